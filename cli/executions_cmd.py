"""``mailstep executions failed [--sequence ID]``: failed, timed-out and aborted executions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.table import Table

from cli.target import errors_to_exit, json_or, targeted

if TYPE_CHECKING:
    from ops.targets import Target

app = typer.Typer(help="Sequence executions (Step Functions).", no_args_is_help=True)
console = Console()


def _failed_table(found: list[dict[str, Any]]) -> None:
    table = Table(title=f"Failed executions ({len(found)})")
    for column in ("sequence", "status", "stopped", "name"):
        table.add_column(column)
    for item in found:
        stopped = item["stopped_at"][:19].replace("T", " ")
        table.add_row(item["sequence"], item["status"], stopped, item["name"])
    console.print(table)
    if found:
        console.print("history: aws stepfunctions get-execution-history --execution-arn <arn> (see --json)")


@app.command()
@targeted
@json_or(_failed_table)
def failed(
    sequence: str | None = typer.Option(None, help="Only this sequence."),
    *,
    target: Target,
) -> list[dict[str, Any]]:
    """FAILED, TIMED_OUT and ABORTED executions of the sequence state machines, newest first."""
    from ops.admin import failed_executions

    with errors_to_exit():
        found = failed_executions(
            sequence, arn_prefix=target.settings.state_machine_arn_prefix, aws=target.aws
        )
    return [f.public() for f in found]
