"""``mailstep local ...``: generate SES engagement for a message in the local outbox.

The events are published in the SES event-publishing format to the SNS topics of the
message's configuration set, through the running runtime's endpoint, exactly as SES
would publish them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from cli.dev_cmd import DEFAULT_STATE_DIR

app = typer.Typer(
    help="Local runtime helpers: outbox, engagement (open, click, bounce, complaint), verify an identity.",
    no_args_is_help=True,
)
console = Console()

STATE_DIR = typer.Option(DEFAULT_STATE_DIR, help="State folder of the running `mailstep dev`.")
TARGET = typer.Argument(..., help="SES message id, or a recipient (their latest message).")


def find_message(outbox: Path, target: str) -> dict[str, Any]:
    from cli.local.ses import read_outbox

    direct = outbox / f"{target}.json"
    if direct.exists():
        return dict(json.loads(direct.read_text()))
    wanted = target.strip().lower()
    matches = [m for m in read_outbox(outbox) if wanted in (d.lower() for d in m["destination"])]
    if not matches:
        raise typer.BadParameter(f"no message for {target!r} in {outbox}")
    return matches[-1]


def publish_event(
    state_dir: Path, target: str, kind: str, link: str | None = None, *, soft: bool = False, mpp: bool = False
) -> dict[str, Any]:
    """Build the record for ``kind`` and publish it to the configuration set's destinations."""
    from cli.local import read_state
    from cli.local import ses_events as ev
    from cli.target import local

    state = read_state(state_dir)
    message = find_message(Path(state["outbox"]), target)
    mail = message["mail"]
    recipients = message["destination"]
    if kind == "open":
        from shared.engagement.machine import MPP_USER_AGENT

        record = ev.open_event(mail, user_agent=MPP_USER_AGENT) if mpp else ev.open_event(mail)
    elif kind == "click":
        record = ev.click_event(mail, link or "https://example.com/")
    elif kind == "bounce" and soft:
        record = ev.bounce_event(mail, recipients, bounce_type="Transient", sub_type="MailboxFull")
    elif kind == "bounce":
        record = ev.bounce_event(mail, recipients)
    else:
        record = ev.complaint_event(mail, recipients)
    runtime = local(state_dir)  # the running runtime, and clients that reach it
    configuration_set = message.get("configuration_set")
    if not configuration_set:
        raise typer.BadParameter("the message was sent without a configuration set: SES publishes no events")
    destinations = runtime.client("sesv2").get_configuration_set_event_destinations(
        ConfigurationSetName=configuration_set
    )
    kind_name = ev.destination_event_type(record)
    sns = runtime.client("sns")
    topics = []
    for destination in destinations["EventDestinations"]:
        topic = (destination.get("SnsDestination") or {}).get("TopicArn")
        if destination.get("Enabled") and topic and kind_name in destination.get("MatchingEventTypes", []):
            sns.publish(TopicArn=topic, Message=json.dumps(record))
            topics.append(topic)
    return {"message_id": message["message_id"], "event": record["eventType"], "topics": topics}


def _run(
    kind: str, target: str, state_dir: Path, link: str | None = None, *, soft: bool = False, mpp: bool = False
) -> None:
    result = publish_event(state_dir.resolve(), target, kind, link, soft=soft, mpp=mpp)
    topics = len(result["topics"])
    console.print(f"published [bold]{result['event']}[/bold] for {result['message_id']} to {topics} topic(s)")


@app.command("open")
def open_(
    target: str = TARGET,
    mpp: bool = typer.Option(
        False, "--mpp", help="As Apple Mail Privacy Protection's prefetch makes it (a machine open)."
    ),
    state_dir: Path = STATE_DIR,
) -> None:
    """Publish an Open event for a sent message (a person's, or with --mpp a machine's)."""
    _run("open", target, state_dir, mpp=mpp)


@app.command()
def click(
    target: str = TARGET,
    link: str = typer.Option("https://example.com/", help="The clicked link."),
    state_dir: Path = STATE_DIR,
) -> None:
    """Publish a Click event for a sent message."""
    _run("click", target, state_dir, link)


@app.command()
def bounce(
    target: str = TARGET,
    soft: bool = typer.Option(
        False, "--soft", help="A transient bounce (MailboxFull) instead of a permanent one."
    ),
    state_dir: Path = STATE_DIR,
) -> None:
    """Publish a Bounce event for a sent message: permanent (suppresses the address), or with
    --soft transient (counted; repeated ones escalate, docs/hygiene.md)."""
    _run("bounce", target, state_dir, soft=soft)


@app.command()
def complain(target: str = TARGET, state_dir: Path = STATE_DIR) -> None:
    """Publish a Complaint event for a sent message."""
    _run("complaint", target, state_dir)


IDENTITY = re.compile(r"([^@\s<>()\[\],;:\"]+@)?[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+")


@app.command()
def verify(
    identity: str = typer.Argument(..., help="An address (ann@example.com) or a domain (example.com)."),
    state_dir: Path = STATE_DIR,
) -> None:
    """Verify an SES identity of the local account (SES v2 CreateEmailIdentity): with `mailstep dev
    --ses-sandbox`, mail to it is then delivered. Locally it is verified at once (no mail, no DNS)."""
    from cli.target import local

    value = identity.strip()
    if not IDENTITY.fullmatch(value):
        raise typer.BadParameter(
            f"{identity!r} is neither an email address nor a domain", param_hint="IDENTITY"
        )
    local(state_dir).client("sesv2").create_email_identity(EmailIdentity=value)
    console.print(f"verified [bold]{value}[/bold]")


@app.command()
def outbox(state_dir: Path = STATE_DIR) -> None:
    """List the messages in the local outbox."""
    from cli.local import read_state
    from cli.local.ses import read_outbox

    state = read_state(state_dir.resolve())
    console.print(outbox_table(read_outbox(Path(state["outbox"]))))


def outbox_table(messages: list[dict[str, Any]]) -> Table:
    table = Table(title=f"Outbox ({len(messages)} messages)")
    for column in ("time", "to", "subject", "outcome", "message id"):
        table.add_column(column)
    for message in messages:
        outcomes = message.get("outcomes", {})
        table.add_row(
            message["timestamp"][11:19],
            ", ".join(message["destination"]),
            message.get("subject", ""),
            ", ".join(sorted(set(outcomes.values()))),
            message["message_id"],
        )
    return table
