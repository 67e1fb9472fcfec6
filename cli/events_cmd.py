"""``mailstep events <email>``: a subscriber's timeline (API events, sends, SES events)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.table import Table

from cli.target import email_param, targeted

if TYPE_CHECKING:
    from ops.targets import Target

console = Console()
app = typer.Typer(help="A subscriber's event timeline.")
DETAIL_FIELDS = (
    "link",
    "bounce_type",
    "diagnostic",
    "feedback_type",
    "reason",
    "delay_type",
    "error",
    "origin",
)


def _detail(item: dict[str, Any]) -> str:
    return ", ".join(f"{k}={item[k]}" for k in DETAIL_FIELDS if item.get(k) not in (None, ""))[:160]


@app.command()
@targeted
def events(
    email: str = typer.Argument(..., help="The subscriber's address."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    *,
    target: Target,
) -> None:
    """Every event of one subscriber, oldest first."""
    import json

    address = email_param(email)
    store = target.subscriber_store()
    items = store.list_events(address)
    if as_json:
        console.print_json(json.dumps(items, default=str))
        return
    table = Table(title=f"Events of {address} ({len(items)})")
    for column in ("time", "type", "source", "template", "detail"):
        table.add_column(column)
    for item in items:
        table.add_row(
            str(item.get("at", ""))[:19].replace("T", " "),
            str(item.get("type", "")),
            str(item.get("source", "")),
            str(item.get("template", "")),
            _detail(item),
        )
    console.print(table)


if __name__ == "__main__":
    app()
