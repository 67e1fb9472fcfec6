"""``mailstep hygiene report | run [--dry-run] | backfill [--dry-run]``: the sunset of subscribers
without human engagement, and the backfill of subscribers from before it (docs/hygiene.md)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.table import Table

from cli.target import targeted

if TYPE_CHECKING:
    from ops.targets import Target

console = Console()
app = typer.Typer(
    help="List hygiene: cold subscribers and the sunset (docs/hygiene.md).", no_args_is_help=True
)
AT = typer.Option(None, "--at", help="Run or report for this day (YYYY-MM-DD) instead of today.")


def _changes(result: dict[str, Any]) -> str:
    return f"{result['to_mark_cold']} to mark cold, {result['to_unsubscribe']} to unsubscribe"


def _share(counted: dict[str, Any]) -> str:
    if counted["share"] is None:
        return "- (none)"
    return f"{counted['share']:.0%} ({counted['machines']} of {counted['people'] + counted['machines']})"


@app.command()
@targeted
def report(
    at: str | None = AT,
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    *,
    target: Target,
) -> None:
    """Cold subscribers, those at risk (cold within 14 days) and what the next daily run would change."""
    from ops import hygiene

    found = hygiene.report(target, at=at)
    if as_json:
        console.print_json(json.dumps(found))
        return
    table = Table(title=f"List hygiene on {found['day']} ({target.label})", show_header=False)
    table.add_row("cold (tag cold)", str(found["cold"]))
    table.add_row("at risk: cold within 14 days", str(found["at_risk"]))
    table.add_row(f"next daily run ({found['next_run']['day']})", _changes(found["next_run"]))
    last = found["last_run"] or {}
    table.add_row(
        "last run",
        f"{last.get('day')}: {last.get('marked_cold', 0)} marked cold, "
        f"{last.get('unsubscribed', 0)} unsubscribed"
        if last
        else "never",
    )
    machines = found["machines"]
    table.add_row(
        f"made by machines (last {machines['days']} days)",
        f"{_share(machines['open'])} of opens, {_share(machines['click'])} of clicks",
    )
    policy = found["policy"]
    table.add_row(
        "rule",
        f"cold after {policy['cold_after_days']} days without a human open or click "
        f"({policy['new_subscriber_cold_after_days']} while younger), "
        f"unsubscribed {policy['grace_days']} days later",
    )
    console.print(table)


@app.command()
@targeted
def run(
    dry_run: bool = typer.Option(False, "--dry-run", help="Only say what it would change."),
    at: str | None = AT,
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    *,
    target: Target,
) -> None:
    """Run the daily hygiene now, as the scheduled function does (idempotent: a second run the
    same day changes nothing)."""
    from ops import hygiene

    result = hygiene.run(target, dry_run=dry_run, at=at)
    if as_json:
        console.print_json(json.dumps(result))
        return
    if dry_run:
        console.print(f"{result['day']} (dry run): {_changes(result)}")
        return
    console.print(
        f"{result['day']}: {result['marked_cold']} marked cold, {result['unsubscribed']} unsubscribed"
    )


@app.command()
@targeted
def backfill(
    dry_run: bool = typer.Option(False, "--dry-run", help="Only count what it would create."),
    restart: bool = typer.Option(
        False, "--restart", help="Start from the first subscriber, not where an unfinished run stopped."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    *,
    target: Target,
) -> None:
    """Create the ENGAGEMENT items of subscribers from before list hygiene, from their recorded
    opens and clicks, so the sunset sees them (idempotent: a second run writes nothing)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from ops import hygiene

    with Progress(
        TextColumn("subscribers"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        disable=as_json,
    ) as bar:
        task = bar.add_task("backfill", total=None)
        result = hygiene.backfill(
            target,
            dry_run=dry_run,
            restart=restart,
            progress=lambda done, total: bar.update(task, completed=done, total=max(total, done)),
        )
    if as_json:
        console.print_json(json.dumps(result))
        return
    resumed = f" (resumed after {result['resumed_after']})" if result["resumed_after"] else ""
    verb = "would create" if dry_run else "created"
    console.print(
        f"{result['read']} subscribed subscribers read{resumed}: {result['had_item']} had their item, "
        f"{verb} {result['created']} ({result['engaged']} with a human open or click), "
        f"{result['raced']} written meanwhile by others; {result['writes']} writes"
    )
