"""``mailstep send-test <key> --to ADDRESS``: one real send through the send pipeline.

It runs the pipeline the Lambdas run (eligibility, send-once claim, render, SES, SENT#)
against the local runtime or a deployed stack (``cli.target.targeted``), with source ``test`` and
a fresh step id, so every invocation sends once. Suppressed and unsubscribed addresses
are still skipped; an address without a profile gets the mail.
"""

from __future__ import annotations

import json
import time
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
    from shared.sending.jobs import SendJob
    from shared.sending.pipeline import TEST_SOURCE, outcome_dict, send

    try:
        values = json.loads(data)
    except ValueError as exc:
        raise typer.BadParameter(f"--data: {exc}") from None
    with errors_to_exit():
        job = SendJob(
            email=to,
            template=key,
            source=TEST_SOURCE,
            step=f"t{time.time_ns()}",
            subject=subject,
            transactional=transactional,
            data=values if isinstance(values, dict) else {},
        )
        outcome = send(job, target.send_context())
    typer.echo(json.dumps({"target": target.label, **outcome_dict(outcome)}, indent=2))
    if outcome.status != "sent":
        raise typer.Exit(1)
