"""``mailstep stats``: sent, delivered, opened, clicked, bounced, complained, unsubscribed.

Works against the running local runtime (``--state-dir``, the default) or a deployed stack
(``--stack``). The numbers come from ``shared.stats``; this module only formats them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from cli.dev_cmd import DEFAULT_STATE_DIR

console = Console()
app = typer.Typer(help="Engagement statistics per sequence, broadcast or template.")

STATE_DIR = typer.Option(DEFAULT_STATE_DIR, help="State folder of the running `mailstep dev`.")
STACK = typer.Option(None, help="A deployed stack's name: read it instead of the local runtime.")


def tables(state_dir: Path, stack: str | None) -> tuple[str, str]:
    """(main table, events table) of the target; points the AWS clients at it."""
    from shared import specs
    from shared.aws import client, reset_clients

    if stack:
        outputs = client("cloudformation").describe_stacks(StackName=stack)["Stacks"][0].get("Outputs", [])
        found = {o["OutputKey"]: o["OutputValue"] for o in outputs}
        names = [found.get(f"{t.id}Name") for t in (specs.MAIN_TABLE, specs.EVENTS_TABLE)]
        if not all(names):
            raise typer.BadParameter(f"stack {stack!r} exports no table names")
        return str(names[0]), str(names[1])
    from cli.local import read_state

    try:
        state = read_state(state_dir.resolve())
    except FileNotFoundError as exc:
        raise typer.BadParameter(str(exc)) from None
    os.environ.update(
        {
            "AWS_ENDPOINT_URL": state["endpoint"],
            "AWS_DEFAULT_REGION": state["region"],
            "AWS_ACCESS_KEY_ID": os.environ.get("AWS_ACCESS_KEY_ID", "mailstep-local"),
            "AWS_SECRET_ACCESS_KEY": os.environ.get("AWS_SECRET_ACCESS_KEY", "mailstep-local"),
        }
    )
    reset_clients()
    return state["tables"][specs.MAIN_TABLE.setting], state["tables"][specs.EVENTS_TABLE.setting]


def _percent(rate: float | None) -> str:
    return "" if rate is None else f"{rate * 100:.1f}%"


def counters_table(title: str, rows: list[dict[str, Any]]) -> Table:
    table = Table(title=title)
    for column, justify in (("metric", "left"), ("total", "right"), ("unique", "right"), ("rate", "right")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for row in rows:
        unique = "" if row["unique"] is None else str(row["unique"])
        table.add_row(row["metric"], str(row["total"]), unique, _percent(row["rate"]))
    return table


@app.command()
def stats(
    sequence: str | None = typer.Option(None, help="A sequence id."),
    broadcast: str | None = typer.Option(None, help="A broadcast id."),
    template: str | None = typer.Option(None, help="A template key, e.g. onboarding/welcome."),
    since: str | None = typer.Option(None, help="Only events from this date on (2026-01-31)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    state_dir: Path = STATE_DIR,
    stack: str | None = STACK,
) -> None:
    """Engagement totals, unique opens/clicks and rates; every source when none is named."""
    import json

    from shared.stats import StatsStore, report

    chosen = [v for v in (sequence, broadcast, template) if v]
    if len(chosen) > 1:
        raise typer.BadParameter("name at most one of --sequence, --broadcast, --template")
    store = StatsStore(*tables(state_dir, stack))
    source = sequence or broadcast
    if not chosen:
        if since:
            raise typer.BadParameter("--since needs --sequence, --broadcast or --template")
        everything = {name: c.rows() for name, c in store.sources().items()}
        if as_json:
            console.print_json(json.dumps(everything))
            return
        if not everything:
            console.print("no engagement recorded yet")
        for name, rows in everything.items():
            console.print(counters_table(name, rows))
        return
    try:
        counters = report(store, source=source, template=template, since=since)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    label = f"{'template ' + template if template else source}" + (f" since {since}" if since else "")
    if as_json:
        console.print_json(json.dumps({"scope": label, "rows": counters.rows()}))
    else:
        console.print(counters_table(label, counters.rows()))


if __name__ == "__main__":
    app()
