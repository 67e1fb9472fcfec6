"""``mailstep signups pending``: sign-ups waiting for their confirmation click (the logic is
``ops.topics.TopicAdmin.pending``); ``mailstep signups held`` / ``release DOMAIN``: sign-ups a
recipient domain's hourly cap held, and mailing them now (``ops.signups.HeldSignups``).
Sign-up counts and the confirmation rate are in ``mailstep stats``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.table import Table

from cli.target import errors_to_exit, json_or, targeted

if TYPE_CHECKING:
    from ops.targets import Target

app = typer.Typer(
    help="Sign-ups (double opt-in) waiting for confirmation, and those a domain's cap held.",
    no_args_is_help=True,
)
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


def _held_table(data: dict[str, Any]) -> None:
    if not data["domains"]:
        console.print("No domain held sign-ups in the last two hours.")
        return
    table = Table(title="Sign-ups held by a domain's hourly cap (the last two hours)")
    for column in ("domain", "held", "mailed at once", "held since", "mail not sent yet"):
        table.add_column(column)
    for row in data["domains"]:
        table.add_row(
            row["domain"],
            str(row["held"]),
            str(row["mailed_at_once"]),
            _when(row["since"]),
            str(row["waiting"]),
        )
    console.print(table)
    console.print(
        "A held sign-up is mailed 15 minutes after it came; `mailstep signups release DOMAIN` mails it now."
    )


@app.command()
@targeted
@json_or(_held_table)
def held(*, target: Target) -> dict[str, Any]:
    """Recipient domains over their hourly cap: sign-ups held, since when, mails not sent yet."""
    from ops.signups import HeldSignups

    with errors_to_exit():
        return HeldSignups.of(target).held()


def _released(data: dict[str, Any]) -> None:
    console.print(
        f"{data['released']} held sign-up(s) of {data['domain']} queued for their confirmation mail"
    )


@app.command("release")
@targeted
@json_or(_released)
def release_(
    domain: str = typer.Argument(..., help="The recipient domain, e.g. gmail.com."),
    *,
    target: Target,
) -> dict[str, Any]:
    """Mail the held sign-ups of DOMAIN now (each is still mailed once)."""
    from ops.signups import HeldSignups

    with errors_to_exit():
        return HeldSignups.of(target).release(domain)


if __name__ == "__main__":
    app()
