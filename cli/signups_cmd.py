"""``mailstep signups pending``: sign-ups waiting for their confirmation click. The logic is
``ops.topics.TopicAdmin.pending``; sign-up counts and the confirmation rate are in
``mailstep stats``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.table import Table

from cli.target import errors_to_exit, json_or, targeted

if TYPE_CHECKING:
    from ops.targets import Target

app = typer.Typer(help="Sign-ups (double opt-in) waiting for confirmation.", no_args_is_help=True)
console = Console()


def _when(iso: str | None) -> str:
    return (iso or "")[:19].replace("T", " ")


def _pending_table(data: dict[str, Any]) -> None:
    table = Table(title=f"Pending sign-ups ({data['total']})")
    for column in ("signed up", "email", "form", "topics", "last mail", "expires"):
        table.add_column(column)
    for row in data["pending"]:
        topics = "(defaults)" if row["topics"] is None else " ".join(row["topics"]) or "(none)"
        table.add_row(
            _when(row["created_at"]),
            row["email"],
            row["form"],
            topics,
            _when(row["last_mail_at"]) or "-",
            _when(row["expires_at"]),
        )
    console.print(table)
    if data["total"] > len(data["pending"]):
        console.print(f"showing the newest {len(data['pending'])} of {data['total']}: --limit for more")


@app.command()
@targeted
@json_or(_pending_table)
def pending(
    limit: int = typer.Option(100, help="Show at most this many, newest first (1-1000)."),
    *,
    target: Target,
) -> dict[str, Any]:
    """Unconfirmed sign-ups that have not expired: address, form, times (a Scan of the table)."""
    from ops.topics import TopicAdmin

    with errors_to_exit():
        page = TopicAdmin.of(target).pending(limit=limit)
    return page.public()


if __name__ == "__main__":
    app()
