"""``mailstep broadcast send | resend | list | get | cancel | resume`` against a deployed stack or the
local runtime (``--stack`` / ``--target`` / ``--region`` / ``--state-dir``, as every operator
command: ``cli.target.targeted``).

The commands call ``ops.broadcasts`` with the target's settings (tables, the
broadcast queues and the schedule state machine, from the stack outputs) and clients; the
work itself happens in the resolver and worker Lambdas of that target.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from cli.target import targeted

if TYPE_CHECKING:
    from ops.broadcasts import Broadcasts
    from ops.targets import Target

app = typer.Typer(
    help="Broadcasts: one template to a filtered audience, at the SES rate, exactly once.",
    no_args_is_help=True,
)
console = Console()
ID = typer.Argument(..., help="Broadcast id.")
# paused: `mailstep reputation`; held: it resumes by itself (docs/broadcasts.md, "Held")
FINAL = ("done", "cancelled", "failed", "paused_reputation", "held")
HOLD_REASONS = {
    "identity_unverified": "SES has not verified the sending identity yet (`mailstep doctor`: its DKIM)",
    "daily_quota": "the account's 24-hour SES quota is spent",
    "warmup": "today's warm-up allowance is used (`mailstep warmup status`)",
}
FOLLOW_IDLE_S = 600.0  # the follow loop gives up when nothing moved for this long
T = TypeVar("T")


def _service(target: Target) -> Broadcasts:
    """The broadcast service wired to a target's settings and clients."""
    from ops.broadcasts import Broadcasts
    from shared.core.settings import Settings

    settings = Settings.model_validate(target.settings.model_dump() | _rate_overrides())
    return Broadcasts.from_settings(settings, target.aws)


def _rate_overrides() -> dict[str, Any]:
    from shared.core.specs import ENV

    fields = ("broadcast_max_send_rate", "broadcast_rate_share")
    return {f: os.environ[ENV[f]] for f in fields if ENV[f] in os.environ}


def _fail(message: str, code: int = 2) -> NoReturn:
    console.print(f"[red]error:[/red] {message}")
    raise typer.Exit(code)


def _on_broadcast(target: Target, call: Callable[[Broadcasts], T], *errors: type[Exception]) -> T:
    """``call`` on the target's broadcast service; an unknown broadcast (and ``errors``: a
    conflict) ends the command with its message and exit code 1."""
    from shared.core.errors import NotFound

    caught: tuple[type[Exception], ...] = (NotFound, *errors)
    try:
        return call(_service(target))
    except caught as exc:
        _fail(str(exc), 1)


@app.command()
@targeted
def send(
    template: str = typer.Option(..., "--template", help="Template key, e.g. newsletter/monthly."),
    subject: str | None = typer.Option(None, help="Subject (default: the template's front matter)."),
    tag: list[str] = typer.Option([], "--tag", help="Recipients carry ALL of these tags (repeatable)."),
    any_tag: list[str] = typer.Option([], "--any-tag", help="... and at least ONE of these (repeatable)."),
    exclude_tag: list[str] = typer.Option([], "--exclude-tag", help="... and NONE of these (repeatable)."),
    where: list[str] = typer.Option(
        [],
        "--where",
        help="Attribute condition: plan=pro, plan!=free, seats>3, country in de,fr (repeatable).",
    ),
    topic: str | None = typer.Option(
        None,
        "--topic",
        help="Topic of this mail (topics.yaml): readers who opted out are skipped (topic_opt_out).",
    ),
    opened: list[str] = typer.Option(
        [], "--opened", help="... who opened a mail of this broadcast or sequence (repeatable)."
    ),
    clicked: list[str] = typer.Option(
        [], "--clicked", help="... who clicked in a mail of this broadcast or sequence (repeatable)."
    ),
    not_opened: list[str] = typer.Option(
        [], "--not-opened", help="... who were sent this broadcast and did not open it (repeatable)."
    ),
    engaged_within: int | None = typer.Option(
        None, "--engaged-within", help="... who opened or clicked any mail within the last N days."
    ),
    not_engaged_within: int | None = typer.Option(
        None, "--not-engaged-within", help="... who did not open or click any mail within the last N days."
    ),
    machine_opens: bool = typer.Option(
        False,
        "--machine-opens",
        help="Engagement conditions count opens and clicks machines made too (default: people only).",
    ),
    at: str | None = typer.Option(None, "--at", help="Send later: ISO 8601 time with zone, in the future."),
    variant: list[str] = typer.Option(
        [],
        "--variant",
        help="A/B test variant (2-5): template=KEY, subject=TEXT or template=KEY,subject=TEXT; "
        "the rest from --template/--subject (docs/broadcasts.md, 'A/B tests').",
    ),
    test_share: int | None = typer.Option(
        None, "--test-share", help="A/B test: per cent of the audience in the test groups (1-90)."
    ),
    metric: str | None = typer.Option(None, "--metric", help="A/B test: opens or clicks (people only)."),
    decide_after: str | None = typer.Option(
        None, "--decide-after", help="A/B test: when the winner goes to the rest, after the start (e.g. 4h)."
    ),
    min_sample: int = typer.Option(
        100,
        "--min-sample",
        help="A/B test: fewest delivered per variant to decide on rates (else variant 1).",
    ),
    broadcast_id: str | None = typer.Option(
        None, "--id", help="Broadcast id (re-running with it sends nothing new)."
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Print the audience size and a sample; send nothing."
    ),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    no_wait: bool = typer.Option(
        False, "--no-wait", help="Return once started instead of following progress."
    ),
    *,
    target: Target,
) -> None:
    """Send (or schedule) a broadcast and follow its progress."""
    from ops.broadcast_requests import ab_request, broadcast_request
    from shared.core.errors import InvalidInput

    try:
        request = broadcast_request(
            template=template,
            subject=subject,
            tags=tag,
            any_tags=any_tag,  # the options are singular: each is repeated once per tag
            exclude_tags=exclude_tag,
            where=where,
            topic=topic,
            at=at,
            broadcast_id=broadcast_id,
            opened=opened,
            clicked=clicked,
            not_opened=not_opened,
            engaged_within_days=engaged_within,
            not_engaged_within_days=not_engaged_within,
            machine_opens=machine_opens,
        )
        if variant or test_share is not None or metric is not None or decide_after is not None:
            request = ab_request(
                request,
                variants=variant,
                test_share=test_share,
                metric=metric,
                decide_after=decide_after,
                min_sample=min_sample,
            )
        service = _service(target)
        service.check(request)
    except InvalidInput as exc:
        _fail(_option_message(exc))
        return
    if service.records.get(request.id) is not None:  # an id used before: say so, send nothing new
        _report_existing(service.send(request))
        return
    described = request.audience.describe()
    if dry_run:  # the whole audience, read now: its exact size
        if request.ab is not None:
            _split(request, service.split(request))
            return
        size, sample = service.preview(request)
        _audience(f"[bold]{size}[/bold] subscriber(s) ({described}) on {target.label}", sample)
        _warmup(target, size)
        return
    when = f" at {request.at.isoformat()}" if request.at else " now"
    if yes:  # no read here: the resolver reads the audience once and counts it as it goes
        _audience(f"{described} on {target.label} (the resolver counts it as it sends)", [])
        _warmup(target, None)
    else:  # the first page only: a lower bound, exact when the audience fits one page
        glance = service.glance(request)
        counted = (
            "" if glance.complete else " (the first page; the resolver counts the rest, --dry-run counts all)"
        )
        _audience(
            f"[bold]{glance.describe()}[/bold] subscriber(s) ({described}) on {target.label}{counted}",
            glance.sample,
        )
        _warmup(target, glance.size if glance.complete else None)
        if not typer.confirm(
            f"Send {request.template} to {glance.describe()} subscriber(s) on {target.label}{when}?"
        ):
            raise typer.Exit(1)
    answer = service.send(request)
    record = answer.record
    if not answer.created:
        _report_existing(answer)
        return
    console.print(
        f"broadcast [bold]{record.id}[/bold] {record.status}" + (f" for {record.at}" if record.at else "")
    )
    if record.ab is not None:
        console.print(f"A/B test: {record.ab.describe()}", soft_wrap=True)
    if no_wait or record.at:
        return
    _follow(service, record.id)


def _split(request: Any, counts: dict[str, int]) -> None:
    """An A/B test's dry run: each variant's test group and the rest."""
    assert request.ab is not None
    console.print(f"A/B test: {request.ab.describe()}", soft_wrap=True)
    console.print(
        f"audience: {request.audience.model_copy(update={'split': None}).describe()}", soft_wrap=True
    )
    for letter, count in counts.items():
        what = "the winner" if letter == "rest" else f"variant {letter}"
        console.print(f"  {letter:>4}: [bold]{count}[/bold] subscriber(s) get {what}")
    console.print(f"  total: {sum(counts.values())}")


def _warmup(target: Target, size: int | None) -> None:
    """The warm-up's plan for ``size`` recipients (None: not counted here: today's allowance)."""
    from ops.warmup import WarmupService

    service = WarmupService.of(target)
    if not service.on:
        return
    if size is not None:
        found = service.plan(size)
        if found is not None:
            console.print(f"warm-up: {found.line}", soft_wrap=True, highlight=False)
        return
    status = service.status()
    if status["on"]:
        console.print(
            f"warm-up: today {status['left']:,} of {status['allowance']:,} left; a larger audience goes on "
            "from tomorrow 00:00 UTC (`mailstep warmup plan SIZE`, --dry-run shows the plan)",
            soft_wrap=True,
            highlight=False,
        )


def _audience(line: str, sample: list[str]) -> None:
    console.print(f"audience: {line}", highlight=False, soft_wrap=True)
    if sample:
        console.print("sample: " + ", ".join(sample))


def _report_existing(answer: Any) -> None:
    record = answer.record
    detail = f"status {record.status}, sent {record.sent} of {record.audience_size}"
    if not answer.same:
        _fail(f"broadcast {record.id} exists with different parameters ({detail}): nothing was sent", 1)
    console.print(f"broadcast {record.id} exists already ({detail}): nothing new was sent", soft_wrap=True)


def _option_message(exc: Any) -> str:
    names = {
        "id": "--id",
        "template": "--template",
        "subject": "--subject",
        "at": "--at",
        "audience.tags": "--tag",
        "audience.any_tags": "--any-tag",
        "audience.exclude_tags": "--exclude-tag",
        "audience.where": "--where",
        "audience.topic": "--topic",
        "audience.opened": "--opened",
        "audience.clicked": "--clicked",
        "audience.not_opened": "--not-opened",
        "audience.engaged_within_days": "--engaged-within",
        "audience.not_engaged_within_days": "--not-engaged-within",
        "audience": "audience",
        "topic": "--topic",
    }
    for problem in exc.problems:
        for name, option in names.items():
            if problem.field.startswith(name):
                return f"{option}: {problem.message}"
    return str(exc.message)


def _follow(service: Any, broadcast_id: str, idle_timeout_s: float = FOLLOW_IDLE_S) -> None:
    """Show progress until the broadcast ends; stop (exit 1) when the rest of it waits in
    the dead-letter queue, or when nothing moved for ``idle_timeout_s``."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    stalled = idle = False
    try:
        with Progress(*columns, console=console, transient=False) as progress:
            task = progress.add_task("resolving", total=None)
            seen: tuple[Any, ...] = ()
            moved = time.monotonic()
            while True:
                record = service.get(broadcast_id)
                total = record.audience_size if record.resolved else None
                progress.update(task, completed=record.processed, total=total, description=record.status)
                if record.status in FINAL:
                    break
                if record.stalled:
                    stalled = True
                    break
                state = (record.status, record.processed, record.audience_size, record.dead_lettered_batches)
                if state != seen:
                    seen, moved = state, time.monotonic()
                elif time.monotonic() - moved > idle_timeout_s:
                    idle = True
                    break
                time.sleep(0.5)
    except KeyboardInterrupt:
        console.print("stopped following; the broadcast goes on (`mailstep broadcast get` shows it)")
        return
    console.print(_summary(record), soft_wrap=True)
    if stalled:
        from ops.broadcasts import dead_letters

        letters = dead_letters(record, service.queues)
        console.print(
            f"stopped following: {letters['batches']} batch(es) ({letters['recipients']} recipients) "
            "ended in the dead-letter queue after failing every receive; the rest is counted. "
            f"Fix the cause (the broadcast worker's log says it), then redrive: {letters['redrive']} "
            "(docs/operations.md, DLQ redrive). Nothing already sent is sent again.",
            soft_wrap=True,
        )
        raise typer.Exit(1)
    if idle:
        console.print(
            f"stopped following: no progress for {idle_timeout_s:.0f} s; the broadcast goes on "
            "(`mailstep broadcast get` shows it)",
            soft_wrap=True,
        )
        raise typer.Exit(1)


def held_line(record: Any) -> str:
    """Why a held broadcast waits and when it looks again ("" when it is not held)."""
    if record.status != "held":
        return ""
    reason = HOLD_REASONS.get(record.hold_reason or "", record.hold_reason or "held")
    return f"held, not failed: {reason}; it resumes by itself at {record.resume_at} (nothing is sent twice)"


def _status(record: Any) -> str:
    if record.status == "held":
        return f"held: {record.hold_reason} until {record.resume_at}"
    if not record.dead_lettered_batches:
        return str(record.status)
    return f"{record.status} ({record.dead_lettered_batches} batch(es) in the DLQ: see `broadcast get`)"


def _summary(record: Any) -> str:
    skipped = ", ".join(f"{k} {v}" for k, v in sorted(record.skipped.items())) or "none"
    held = held_line(record)
    return (
        f"{record.id}: {record.status}; audience {record.audience_size}, sent {record.sent}, "
        f"failed {record.failed}, skipped: {skipped}" + (f"\n{held}" if held else "")
    )


@app.command()
@targeted
def resend(
    broadcast_id: str = ID,
    to: str = typer.Option("non-openers", "--to", help="Who gets it: non-openers (as people)."),
    after: str = typer.Option(..., "--after", help="How long after the original's start: 90m, 48h, 2d."),
    subject: str | None = typer.Option(None, "--subject", help="Subject (default: the original's)."),
    template: str | None = typer.Option(None, "--template", help="Template (default: the original's)."),
    resend_id: str | None = typer.Option(None, "--id", help="The resend's id (default: <id>-resend)."),
    *,
    target: Target,
) -> None:
    """Schedule one follow-up of a broadcast to its recipients who did not open it as a person
    (minus whoever unsubscribed, was suppressed or left the topic since); cancel it like any."""
    from shared.core.errors import Conflict, InvalidInput

    try:
        answer = _on_broadcast(
            target,
            lambda service: service.resend(
                broadcast_id, to=to, after=after, subject=subject, template=template, resend_id=resend_id
            ),
            Conflict,
        )
    except InvalidInput as exc:
        _fail(_option_message(exc))
    record = answer.record
    if not answer.created:
        _report_existing(answer)
        return
    when = f"scheduled for {record.at}" if record.at else "sending now"
    described = record.audience.describe()
    console.print(f"resend [bold]{record.id}[/bold] of {broadcast_id} {when}: {described}", soft_wrap=True)


@app.command("list")
@targeted
def list_(*, target: Target) -> None:
    """Broadcasts, newest first."""
    table = Table(title="Broadcasts")
    for column in ("id", "status", "template", "audience", "sent", "skipped", "failed", "created", "at"):
        table.add_column(column)
    for record in _service(target).list():
        table.add_row(
            record.id, _status(record), record.template, str(record.audience_size), str(record.sent),
            str(sum(record.skipped.values())), str(record.failed), record.created_at[:19], record.at or "",
        )  # fmt: skip
    console.print(table)


@app.command()
@targeted
def get(
    broadcast_id: str = ID,
    *,
    target: Target,
) -> None:
    """One broadcast: its record merged with its engagement counters (STATS)."""
    details = _on_broadcast(target, lambda service: service.details(broadcast_id))
    console.print_json(json.dumps(details))


@app.command()
@targeted
def cancel(
    broadcast_id: str = ID,
    *,
    target: Target,
) -> None:
    """Stop a scheduled or running broadcast (batches already in a worker's hands finish)."""
    record, changed = _on_broadcast(target, lambda service: service.cancel(broadcast_id))
    if not changed:
        console.print(f"broadcast {record.id} is {record.status}: nothing to cancel")
        return
    console.print(f"broadcast {record.id} cancelled; sent so far: {record.sent} of {record.audience_size}")


@app.command()
@targeted
def resume(
    broadcast_id: str = ID,
    *,
    target: Target,
) -> None:
    """Resume a cancelled or failed broadcast: whoever has not received it yet gets it."""
    from shared.core.errors import Conflict

    record = _on_broadcast(target, lambda service: service.resume(broadcast_id), Conflict)
    console.print(f"broadcast {record.id} resumed (round {record.round})")
