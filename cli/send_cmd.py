"""``mailstep send-test <key> --to ADDRESS``: one real send through the send pipeline.

It runs ``ops.templates.send_test``: the pipeline the Lambdas run (eligibility, send-once
claim, render, SES, SENT#) against the local runtime or a deployed stack
(``cli.target.targeted``), with source ``test`` and a fresh step id, so every invocation sends
once. Suppressed and unsubscribed addresses are still skipped; an address without a profile
gets the mail.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import typer

from cli.target import errors_to_exit, targeted

if TYPE_CHECKING:
    from ops.targets import Target


@targeted
def send_test(
    key: str = typer.Argument(..., help="Template key, e.g. onboarding/welcome."),
    to: str = typer.Option(..., "--to", help="Recipient address."),
    data: str = typer.Option("{}", "--data", help="Event data as JSON."),
    subject: str | None = typer.Option(None, "--subject", help="Subject override (a template string)."),
    transactional: bool = typer.Option(
        False, "--transactional", help="Send as transactional (no unsubscribe)."
    ),
    *,
    target: Target,
) -> None:
    """Send one template to one address through the real pipeline (local runtime or stack)."""
    from ops.templates import send_test as send_one
    from shared.sending.pipeline import outcome_dict

    try:
        values = json.loads(data)
    except ValueError as exc:
        raise typer.BadParameter(f"--data: {exc}") from None
    with errors_to_exit():
        outcome = send_one(
            target,
            key,
            to,
            data=values if isinstance(values, dict) else {},
            subject=subject,
            transactional=transactional,
        )
    typer.echo(json.dumps({"target": target.label, **outcome_dict(outcome)}, indent=2))
    if outcome.status != "sent":
        raise typer.Exit(1)
