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

from ops.tables import outbox_table
from ops.targets import DEFAULT_STATE_DIR

app = typer.Typer(
    help="Local runtime helpers: outbox, engagement (open, click, bounce, complaint), verify an identity.",
    no_args_is_help=True,
)
console = Console()

STATE_DIR = typer.Option(DEFAULT_STATE_DIR, help="State folder of the running `mailstep dev`.")
TARGET = typer.Argument(..., help="SES message id, or a recipient (their latest message).")


def find_message(outbox: Path, target: str) -> dict[str, Any]:
    from ops.outbox import read_outbox

    direct = outbox / f"{target}.json"
    if direct.exists():
        return dict(json.loads(direct.read_text()))
    wanted = target.strip().lower()
    matches = [m for m in read_outbox(outbox) if wanted in (d.lower() for d in m["destination"])]
    if not matches:
        raise typer.BadParameter(f"no message for {target!r} in {outbox}")
    return matches[-1]


# A person's click comes after they read the mail: at least this long after it was sent (a
# click within seconds of delivery is a security scanner's, docs/hygiene.md).
PERSON_CLICK_DELAY_S = 60
SCANNER_CLICK_DELAY_S = 1  # --scanner: the gateway follows the link as the mail arrives


def _post_local(state_dir: Path, path: str, body: dict[str, Any], timeout: float = 30) -> dict[str, Any]:
    """POST ``body`` to the running runtime's control endpoint ``path``; its JSON answer."""
    import urllib.request

    from ops.targets import read_state

    state = read_state(state_dir.resolve())
    request = urllib.request.Request(  # noqa: S310 - the local runtime's control endpoint
        state["api_url"] + path,
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310
        return dict(json.loads(answer.read()))


def calendar_offset(state: dict[str, Any]) -> float:
    """How far the running runtime's calendar is ahead of the wall clock (``advance``)."""
    import urllib.request

    with urllib.request.urlopen(state["api_url"] + "/_local/status", timeout=10) as answer:  # noqa: S310
        return float(json.loads(answer.read())["clock"].get("calendar_offset_s", 0.0))


def hidden_link(outbox: Path, message_id: str) -> str:
    """The URL of the hidden link of a sent message (marketing mail: the layout's anchor)."""
    from email import message_from_bytes, policy

    from shared.core.models import HIDDEN_LINK_PATH

    message = message_from_bytes((outbox / f"{message_id}.eml").read_bytes(), policy=policy.default)
    part = message.get_body(preferencelist=("html",))  # type: ignore[attr-defined]
    text = part.get_content() if part is not None else ""
    found = re.search(r'href="([^"]*' + re.escape(HIDDEN_LINK_PATH) + ')"', text)
    if not found:
        raise typer.BadParameter("the message has no hidden link (transactional mail has none)")
    return found.group(1)


def click_time(mail: dict[str, Any], *, scanner: bool) -> str:
    from datetime import timedelta

    from local_aws import ses_events as ev
    from shared.core.clock import parse_iso

    sent = parse_iso(str(mail["timestamp"]))
    if scanner:
        return ev.iso(sent + timedelta(seconds=SCANNER_CLICK_DELAY_S))
    return ev.iso(max(ev.now(), sent + timedelta(seconds=PERSON_CLICK_DELAY_S)))


def publish_event(
    state_dir: Path,
    target: str,
    kind: str,
    link: str | None = None,  # a click's URL (None: https://example.com/)
    *,
    soft: bool = False,
    mpp: bool = False,  # an open by Apple Mail Privacy Protection's prefetch (a machine open)
    scanner: bool = False,
    hidden: bool = False,
) -> dict[str, Any]:
    """Build the record for ``kind`` and publish it to the configuration set's destinations."""
    from local_aws import ses_events as ev
    from ops.targets import read_state

    state = read_state(state_dir)
    ev.CALENDAR["offset_s"] = calendar_offset(state)  # SES stamps events with the runtime's time
    message = find_message(Path(state["outbox"]), target)
    mail = message["mail"]
    recipients = message["destination"]
    if kind == "open":
        from shared.engagement.machine import MPP_USER_AGENT

        record = ev.open_event(mail, user_agent=MPP_USER_AGENT) if mpp else ev.open_event(mail)
    elif kind == "click":
        if hidden:
            link = hidden_link(Path(state["outbox"]), message["message_id"])
        at = click_time(mail, scanner=scanner or hidden)
        record = ev.click_event(mail, link or "https://example.com/", at=at)
    elif kind == "bounce" and soft:
        record = ev.bounce_event(mail, recipients, bounce_type="Transient", sub_type="MailboxFull")
    elif kind == "bounce":
        record = ev.bounce_event(mail, recipients)
    else:
        record = ev.complaint_event(mail, recipients)
    if not message.get("configuration_set"):
        raise typer.BadParameter("the message was sent without a configuration set: SES publishes no events")
    # published by the runtime's SES, as its own events are: its reputation monitor counts it
    published = _post_local(state_dir, "/_local/ses/events", {"record": record})
    return {"message_id": message["message_id"], "event": record["eventType"], "topics": published["topics"]}


def _run(kind: str, target: str, state_dir: Path, link: str | None = None, **flags: bool) -> None:
    """Publish the event (``flags``: :func:`publish_event`'s) and say where it went."""
    result = publish_event(state_dir.resolve(), target, kind, link, **flags)
    topics = result["topics"]
    console.print(f"published [bold]{result['event']}[/bold] for {result['message_id']} to {topics} topic(s)")


@app.command("open")  # the function is open_: not to shadow the builtin open
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
    scanner: bool = typer.Option(
        False,
        "--scanner",
        help="As a security scanner makes it: a second after the mail arrived (a machine click).",
    ),
    hidden: bool = typer.Option(
        False, "--hidden", help="On the mail's hidden link, which no person sees (a machine click)."
    ),
    state_dir: Path = STATE_DIR,
) -> None:
    """Publish a Click event for a sent message: a person's (a minute or more after it was sent),
    or with --scanner / --hidden a security scanner's (docs/hygiene.md)."""
    _run("click", target, state_dir, link, scanner=scanner, hidden=hidden)


@app.command()
def advance(
    days: float = typer.Option(..., "--days", min=0.0001, max=3650, help="Days to move the calendar ahead."),
    state_dir: Path = STATE_DIR,
) -> None:
    """Move the running runtime's calendar ahead: every scheduled rule (the daily list-hygiene
    run) fires for each scheduled time passed, in order; later SES events carry the new dates."""
    result = _post_local(state_dir, "/_local/calendar", {"advance_days": days}, timeout=1800)
    failed = [r for r in result["runs"] if r["errored"]]
    console.print(
        f"calendar now {result['calendar']}: {len(result['runs'])} scheduled run(s), {len(failed)} failed"
    )
    if failed:
        raise typer.Exit(1)


@app.command()
def bounce(
    target: str = TARGET,  # SES message id, or a recipient (their latest message)
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
    --ses-sandbox`, mail to it is then delivered; with `--identity-pending`, mail from the sending
    domain goes out. Locally it is verified at once (no mail, no DNS)."""
    from cli.target import local

    value = identity.strip()
    if not IDENTITY.fullmatch(value):
        raise typer.BadParameter(
            f"{identity!r} is neither an email address nor a domain", param_hint="IDENTITY"
        )
    from botocore.exceptions import ClientError

    try:
        local(state_dir).client("sesv2").create_email_identity(EmailIdentity=value)
    except ClientError as exc:  # it exists: `mailstep dev --identity-pending`'s sending domain
        if exc.response["Error"]["Code"] != "AlreadyExistsException":
            raise
    answer = _post_local(state_dir, "/_local/ses", {"verify": value})
    note = " (it was waiting for verification: held mail goes out now)" if answer.get("was_pending") else ""
    console.print(f"verified [bold]{value}[/bold]{note}")


@app.command()
def outbox(state_dir: Path = STATE_DIR) -> None:
    """List the messages in the local outbox."""
    from ops.outbox import read_outbox
    from ops.targets import read_state

    state = read_state(state_dir.resolve())
    console.print(outbox_table(read_outbox(Path(state["outbox"]))))
