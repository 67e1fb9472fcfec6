"""``mailstep subscribers ...``: look up, change, erase, import and export subscribers, and
see or change one subscriber's topics.

Parsing and formatting only: the logic is ``ops.admin``, ``ops.topics`` and ``ops.csv_io``. Every
command takes the target options of ``cli.target.targeted`` (local runtime or ``--stack NAME``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from cli.target import AS_JSON, errors_to_exit, json_or, print_json, targeted

if TYPE_CHECKING:
    from ops.admin import SubscriberAdmin
    from ops.targets import Target

app = typer.Typer(
    help="Subscribers: get, list, update, topics, unsubscribe, resubscribe, delete, import, export, "
    "backfill-counts.",
    no_args_is_help=True,
)
console = Console()
err = Console(stderr=True)

EMAIL = typer.Argument(..., help="The subscriber's address.")


def _admin(target: Target) -> SubscriberAdmin:
    from ops.admin import SubscriberAdmin

    return SubscriberAdmin.of(target)


def _subscriber_grid(detail: dict[str, Any]) -> None:
    from ops.tables import subscriber_grid

    console.print(subscriber_grid(detail))


@app.command()
@targeted
@json_or(_subscriber_grid)
def get(email: str = EMAIL, *, target: Target) -> dict[str, Any]:
    """One subscriber: profile, active sequences and suppression."""
    with errors_to_exit():
        detail = _admin(target).get(email)
    return detail.public()


def _page_table(data: dict[str, Any]) -> None:
    from ops.tables import profiles_table

    console.print(profiles_table(f"Subscribers ({len(data['subscribers'])})", data["subscribers"]))
    if data["cursor"]:
        console.print(f"next page: --cursor {data['cursor']}", soft_wrap=True)


@app.command("list")
@targeted
@json_or(_page_table)
def list_(
    tag: str | None = typer.Option(None, help="Only subscribers with this tag."),
    status: str | None = typer.Option(None, help="subscribed | unsubscribed"),
    limit: int = typer.Option(50, help="Subscribers per page (1-1000)."),
    cursor: str | None = typer.Option(None, help="The cursor printed by the previous page."),
    *,
    target: Target,
) -> dict[str, Any]:
    """One page of subscribers; prints the cursor of the next page when there is one."""
    with errors_to_exit():
        page = _admin(target).list(tag=tag, status=status, limit=limit, cursor=cursor)
    return page.public()


@app.command()
@targeted
def update(
    email: str = EMAIL,
    tag: list[str] = typer.Option([], "--tag", help="+name adds, -name removes (repeatable)."),
    attr: list[str] = typer.Option([], "--attr", help="key=value sets, key= deletes (repeatable)."),
    first_name: str | None = typer.Option(None, "--first-name", help="Replace the first name."),
    as_json: bool = AS_JSON,
    *,
    target: Target,
) -> None:
    """Change an existing subscriber's tags, attributes or first name."""
    from ops.admin import parse_update

    with errors_to_exit():
        change = parse_update(tag, attr, first_name)
        result = _admin(target).update(email, change)
    _written(result, as_json, "updated")


def _topics_table(data: dict[str, Any]) -> None:
    state = data["status"] + (", suppressed" if data["suppressed"] else "")
    table = Table(title=f"Topics of {data['email']} ({state})")
    for column in ("topic", "name", "receives", "by"):
        table.add_column(column)
    for row in data["topics"]:
        why = "their choice" if row["source"] == "choice" else f"default ({row['default']})"
        table.add_row(row["id"], row["name"], "yes" if row["receives"] else "no", why)
    console.print(table)
    undeclared = data.get("undeclared")
    if undeclared:
        console.print(f"choices about undeclared topics: in {undeclared['in']}, out {undeclared['out']}")
    if "changed" in data:
        console.print("changed" if data["changed"] else "no change")


@app.command()
@targeted
@json_or(_topics_table)
def topics(
    email: str = EMAIL,
    on: list[str] = typer.Option([], "--on", help="Turn this topic on (repeatable)."),
    off: list[str] = typer.Option([], "--off", help="Turn this topic off (repeatable)."),
    *,
    target: Target,
) -> dict[str, Any]:
    """A subscriber's topics (received or not, their choice or the default); --on/--off change some."""
    from ops.topics import TopicAdmin

    with errors_to_exit():
        admin = TopicAdmin.of(target)
        shown = admin.change(email, on, off) if on or off else admin.subscriber(email)
    return shown.public()


def _written(result: Any, as_json: bool, verb: str) -> None:
    if as_json:
        print_json(result.public())
        return
    if not result.changed:
        console.print(f"{result.email}: no change")
    else:
        details = [f"+{t}" for t in result.tags_added] + [f"-{t}" for t in result.tags_removed]
        console.print(f"{result.email}: {verb}" + (f" ({' '.join(details)})" if details else ""))
    if result.sequences_stopped:
        console.print(f"stopped sequences: {', '.join(result.sequences_stopped)}")


def _simple(verb: str, method: str, doc: str) -> None:
    def command(
        email: str = EMAIL,
        as_json: bool = AS_JSON,
        *,
        target: Target,
    ) -> None:
        with errors_to_exit():
            result = getattr(_admin(target), method)(email)
        _written(result, as_json, verb)

    command.__doc__ = doc
    app.command(method)(targeted(command))


_simple(
    "unsubscribed", "unsubscribe", "Unsubscribe (remembered) and stop the subscriber's marketing sequences."
)
_simple(
    "resubscribed", "resubscribe", "Explicit opt-in again (a suppression stays; see `suppression remove`)."
)


@app.command()
@targeted
def delete(
    email: str = EMAIL,
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    as_json: bool = AS_JSON,
    *,
    target: Target,
) -> None:
    """Erase a subscriber (GDPR): every item in both tables, partners included."""
    if not yes:
        typer.confirm(f"Erase {email} and all their data?", abort=True)
    with errors_to_exit():
        result = _admin(target).delete(email)
    if as_json:
        print_json(result.public())
        return
    console.print(
        f"{result.email}: erased ({result.main_items} items, {result.event_items} events"
        + (f"; stopped {', '.join(result.sequences_stopped)})" if result.sequences_stopped else ")")
    )


def _totals_line(totals: dict[str, int]) -> None:
    console.print(", ".join(f"{name} {n:,}" for name, n in totals.items()))


@app.command("backfill-counts")
@targeted
@json_or(_totals_line)
def backfill_counts(*, target: Target) -> dict[str, int]:
    """Count the subscribers into the overview's list-health totals, once, after the upgrade
    that adds them (reads every profile; docs/data-model.md, "List health")."""
    from ops.overview import backfill_list
    from shared.store.list_health import AlreadyBackfilled, ListHealthStore

    store = ListHealthStore(target.settings.table_name, client=target.client("dynamodb"))
    try:
        return backfill_list(_admin(target).iter(), store)
    except AlreadyBackfilled as exc:
        err.print(f"[red]{exc}[/red]: the totals count every change since then")
        raise typer.Exit(1) from None


@app.command("import")
@targeted
def import_(
    file: Path = typer.Argument(..., exists=True, dir_okay=False, help="CSV file with a header row."),
    tag: list[str] = typer.Option(
        [], "--tag", help="Add this tag to every imported subscriber (repeatable)."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Validate and report; write nothing."),
    trigger: bool = typer.Option(
        False, "--trigger", help="Start the sequences triggered by subscriber.subscribed."
    ),
    start_rate: float = typer.Option(
        100.0,
        "--start-rate",
        min=0.1,
        max=10000.0,
        help="With --trigger: at most this many StartExecution calls a second. The regional quota "
        "refills 300/s in us-east-1, us-west-2 and eu-west-1 and 150/s elsewhere, shared with the "
        "events API (docs/sequences.md).",
    ),
    workers: int | None = typer.Option(
        None, min=1, max=64, help="Concurrent writes (default: 8 against a stack, 1 locally)."
    ),
    restart: bool = typer.Option(False, "--restart", help="Ignore a checkpoint of an interrupted run."),
    sequences_dir: Path = typer.Option(Path("sequences"), help="Sequence definitions (with --trigger)."),
    as_json: bool = AS_JSON,
    *,
    target: Target,
) -> None:
    """Import subscribers from CSV: streamed, validated, idempotent, resumable."""
    from ops.admin import tag_arg
    from ops.csv_io import SequenceTrigger, checkpoint_path, import_csv
    from shared.sequences.sfn import StepFunctions

    with errors_to_exit():
        tags = tuple(tag_arg(t) for t in tag)
        sfn = StepFunctions(target.client("stepfunctions"))
        # moto's DynamoDB (the local runtime) is not safe for concurrent transactions.
        workers = workers or (1 if target.kind == "local" else 8)
        store = target.subscriber_store()
        starter = (
            SequenceTrigger.load(
                store, target.settings.state_machine_arn_prefix, sequences_dir, sfn, start_rate=start_rate
            )
            if trigger
            else None
        )
        checkpoint = checkpoint_path(file)
        if restart and checkpoint.exists():
            checkpoint.unlink()
        size = file.stat().st_size
        with Progress(
            TextColumn("[bold]importing[/bold]"),
            BarColumn(),
            DownloadColumn(),
            TextColumn("{task.fields[rows]} rows"),
            TimeElapsedColumn(),
            console=err,
            transient=as_json,
        ) as bar:
            task = bar.add_task("import", total=size, rows=0)
            report = import_csv(
                file,
                store,
                extra_tags=tags,
                dry_run=dry_run,
                trigger=starter,
                workers=workers,
                checkpoint=checkpoint,
                progress=lambda done, rows: bar.update(task, completed=done, rows=rows),
            )
    data = report.public()
    if as_json:
        print_json(data)
    else:
        _import_summary(report)
    if report.rejected or report.starts_failed:
        raise typer.Exit(1)


def _import_summary(report: Any) -> None:
    head = "dry run: nothing written. " if report.dry_run else ""
    if report.resumed_after_line:
        head += f"resumed after line {report.resumed_after_line}. "
    console.print(
        f"{head}{report.rows} rows: {report.valid} valid "
        f"({report.created} created, {report.updated} updated, {report.unchanged} unchanged"
        + (f", {report.skipped_before_checkpoint} done before" if report.skipped_before_checkpoint else "")
        + f"), {len(report.rejected)} rejected; {report.seconds:.1f} s, {report.rows_per_second:.0f} rows/s"
        + (f"; {report.sequences_started} sequences started" if report.sequences_started else "")
    )
    if report.rejected:
        table = Table(title=f"Rejected rows ({len(report.rejected)})")
        table.add_column("line", justify="right")
        table.add_column("reason")
        for rejected in report.rejected:
            table.add_row(str(rejected.line), rejected.reason)
        console.print(table)
    if report.starts_failed:
        table = Table(title=f"Rows written whose sequence did not start ({len(report.starts_failed)})")
        table.add_column("line", justify="right")
        table.add_column("sequences")
        table.add_column("reason")
        for failed in report.starts_failed:
            table.add_row(str(failed.line), ", ".join(failed.sequences), failed.reason)
        console.print(table)
        console.print("run the same command again to start them (the checkpoint keeps these lines)")


@app.command()
@targeted
def export(
    tag: str | None = typer.Option(None, help="Only subscribers with this tag."),
    status: str | None = typer.Option(None, help="subscribed | unsubscribed"),
    *,
    target: Target,
) -> None:
    """Write subscribers as CSV to stdout (streamed): `mailstep subscribers export > list.csv`."""
    from ops.csv_io import export_csv

    with errors_to_exit():
        count = export_csv(_admin(target), sys.stdout, tag=tag, status=status)
    err.print(f"exported {count} subscribers")
