"""``mailstep executions failed [--sequence ID]``: failed, timed-out and aborted executions."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from cli.target import errors_to_exit, targeted

if TYPE_CHECKING:
    from ops.targets import Target

app = typer.Typer(help="Sequence executions (Step Functions).", no_args_is_help=True)
console = Console()


@app.command()
@targeted
def failed(
    sequence: str | None = typer.Option(None, help="Only this sequence."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    *,
    target: Target,
) -> None:
    """FAILED, TIMED_OUT and ABORTED executions of the sequence state machines, newest first."""
    from ops.admin import failed_executions

    with errors_to_exit():
        found = failed_executions(
            sequence, arn_prefix=target.settings.state_machine_arn_prefix, aws=target.aws
        )
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
