"""``mailstep executions failed [--sequence ID]``: failed, timed-out and aborted executions."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from cli.target import REGION, STACK, STATE_DIR, TARGET, errors_to_exit, select

app = typer.Typer(help="Sequence executions (Step Functions).", no_args_is_help=True)
console = Console()


@app.command()
def failed(
    sequence: str | None = typer.Option(None, help="Only this sequence."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    target: str | None = TARGET,
    stack: str | None = STACK,
    state_dir: Path = STATE_DIR,
    region: str | None = REGION,
) -> None:
    """FAILED, TIMED_OUT and ABORTED executions of the sequence state machines, newest first."""
    from ops.admin import failed_executions

    with errors_to_exit():
        resolved = select(target, stack, state_dir, region)
        found = failed_executions(sequence, arn_prefix=resolved.settings.state_machine_arn_prefix)
    if as_json:
        typer.echo(json.dumps([f.public() for f in found], indent=2))
        return
    table = Table(title=f"Failed executions ({len(found)})")
    for column in ("sequence", "status", "stopped", "name"):
        table.add_column(column)
    for item in found:
        table.add_row(item.sequence, item.status, item.stopped_at[:19].replace("T", " "), item.name)
    console.print(table)
    if found:
        console.print("history: aws stepfunctions get-execution-history --execution-arn <arn> (see --json)")
