"""``mailstep suppression list | remove <email>``: addresses no mail goes to, and why."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.table import Table

from cli.target import email_param, json_or, targeted

if TYPE_CHECKING:
    from ops.targets import Target
    from shared.engagement.suppression import Suppressions

console = Console()
app = typer.Typer(help="Suppressed addresses (permanent bounces, complaints).", no_args_is_help=True)


def _suppressions(target: Target) -> Suppressions:
    from shared.engagement.suppression import Suppressions

    return Suppressions(target.subscriber_store())


def _suppressions_table(found: list[dict[str, Any]]) -> None:
    table = Table(title=f"Suppressed addresses ({len(found)})")
    for column in ("since", "email", "reason", "detail", "source"):
        table.add_column(column)
    for s in found:
        table.add_row(
            s["at"][:19].replace("T", " "), s["email"], s["reason"], s["detail"][:80], s.get("source", "")
        )
    console.print(table)


@app.command("list")
@targeted
@json_or(_suppressions_table)
def list_(*, target: Target) -> list[dict[str, Any]]:
    """Every suppressed address with its reason."""
    return [s.public() for s in _suppressions(target).list()]


@app.command()
@targeted
def remove(
    email: str = typer.Argument(..., help="The address to allow mail to again."),
    *,
    target: Target,
) -> None:
    """Lift a suppression (the profile may be mailed again)."""
    address = email_param(email)
    if _suppressions(target).remove(address):
        console.print(f"{address} is no longer suppressed")
    else:
        console.print(f"{address} was not suppressed")
        raise typer.Exit(1)


if __name__ == "__main__":
    app()
