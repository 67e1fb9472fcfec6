"""``mailstep suppression list | remove <email>``: addresses no mail goes to, and why."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from cli.target import email_param, targeted

if TYPE_CHECKING:
    from ops.targets import Target
    from shared.engagement.suppression import Suppressions

console = Console()
app = typer.Typer(help="Suppressed addresses (permanent bounces, complaints).", no_args_is_help=True)


def _suppressions(target: Target) -> Suppressions:
    from shared.engagement.suppression import Suppressions

    return Suppressions(target.subscriber_store())


@app.command("list")
@targeted
def list_(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    *,
    target: Target,
) -> None:
    """Every suppressed address with its reason."""
    import json

    found = _suppressions(target).list()
    if as_json:
        console.print_json(json.dumps([s.public() for s in found]))
        return
    table = Table(title=f"Suppressed addresses ({len(found)})")
    for column in ("since", "email", "reason", "detail", "source"):
        table.add_column(column)
    for s in found:
        table.add_row(s.at[:19].replace("T", " "), s.email, s.reason, s.detail[:80], s.source or "")
    console.print(table)


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
