"""``mailstep local ...``: generate SES engagement for a message in the local outbox
(``local_aws.simulate`` builds and publishes the events as SES would), move the runtime's
calendar, verify an identity, list the outbox.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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


@contextmanager
def bad_parameter() -> Iterator[None]:
    """What the caller can fix (no such message, ...) as a usage error (exit 2)."""
    from shared.core.errors import InvalidInput

    try:
        yield
    except InvalidInput as exc:
        raise typer.BadParameter(exc.message) from None


def _run(kind: str, target: str, state_dir: Path, link: str | None = None, **flags: bool) -> None:
    """Publish the event (``flags``: ``local_aws.simulate.publish_event``'s) and say where it went."""
    from local_aws.simulate import publish_event

    with bad_parameter():
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
    from local_aws.simulate import post_control

    result = post_control(state_dir, "/_local/calendar", {"advance_days": days}, timeout=1800)
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
    from local_aws.simulate import post_control

    answer = post_control(state_dir, "/_local/ses", {"verify": value})
    note = " (it was waiting for verification: held mail goes out now)" if answer.get("was_pending") else ""
    console.print(f"verified [bold]{value}[/bold]{note}")


@app.command()
def outbox(state_dir: Path = STATE_DIR) -> None:
    """List the messages in the local outbox."""
    from ops.outbox import read_outbox
    from ops.targets import read_state

    state = read_state(state_dir.resolve())
    console.print(outbox_table(read_outbox(Path(state["outbox"]))))
