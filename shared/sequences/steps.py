"""What the sequence step function does for one Task of a generated state machine.

Payload: the versioned envelope the compiler writes (``contract: sequence.step``,
``version: 1``) with ids and the step's static configuration; all subscriber state is
loaded here. Actions:

- ``send``: send through the one send pipeline with the send-once key
  (subscriber, sequence, step code + execution), then apply a riding ``tag`` change;
- ``check``: evaluate a condition on live data -> ``{"ok": bool}``; a condition on a named
  step's mail (``{opened: {step: welcome}}``) comes with ``steps``, each name's step code, and
  looks for a person's event of that step's mail in this execution;
- ``branch``: an ``if`` whose branches are each at most one send: evaluate the condition on
  live data and send the chosen branch's mail (``then`` / ``else``) as that branch's own send
  step (its step code: the same send-once key and per-step counts as a send Task of its own);
- ``tag``: add/remove tags through the store (TAG# partners stay in sync);
- ``schedule``: only compute the wake-up time of the next Wait;
- with ``token`` (a callback Task: a send or a branch and the wait after it): after the mail,
  create the one-time schedule that hands the token back at the wake-up time
  (``shared.sequences.schedules``); the Task's result is what the schedule returns;
- ``finish``: remove the EXEC pair (also ``"finish": true`` on the last Task of a path);
- ``fail``: record the failure (a ``sequence_failed`` event) and remove the pair.

Every action but ``fail`` first checks that the EXEC pair still names this execution;
when it does not (an exit event, unsubscribe, suppression or erase removed it) it raises
:class:`SequenceHalted` and the machine ends quietly without sending.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.core import clock
from shared.core.models import validate_name
from shared.core.observability import logger, redact_email
from shared.sending.jobs import SenderOverride, SendJob
from shared.sending.pipeline import SendOutcome
from shared.sequences.compiler import CONTRACT, VERSION
from shared.sequences.evaluate import evaluate, wake_at
from shared.sequences.model import SendWindow, Variant, parse_condition
from shared.sequences.schedules import Resumer, ScheduleThrottled, schedule_name
from shared.store import keys
from shared.store.subscribers import Execution, SubscriberStore

OPEN_EVENT = "open"
CLICK_EVENT = "click"
FAILED_EVENT = "sequence_failed"
STEP_CODE_PATTERN = r"^[A-Z0-9]{1,40}$"
# How long before the execution's start (the EXEC pair's started_at) a step mail's event is
# looked for: the clocks of the Lambda and of SES's event stamps may differ a little.
CLOCK_SLACK = timedelta(hours=1)


class SendRetryable(Exception):  # noqa: N818 - the name is the ASL error name the Retry matches
    """Nothing was sent and a later attempt may succeed (throttling, claim in flight)."""


class SendPaused(Exception):  # noqa: N818 - the name is the ASL error name the Retry matches
    """SES said "not yet": sending is paused for the mail's configuration set (the reputation
    guardrail, docs/reputation.md) or the account, the sending identity is not verified yet, or
    the account's 24-hour quota is spent. Nothing was sent; the execution waits and tries again
    (its own Retry: up to hourly for about a week, longer than the quota's rolling day and
    SES's 72 hours for a domain's verification), it does not fail."""


class SequenceHalted(Exception):  # noqa: N818 - the name is the ASL error name the Catch matches
    """The EXEC pair no longer names this execution: stop without sending."""


class SendFailed(Exception):
    """The send pipeline reported a permanent failure (render error, SES rejected)."""


class BranchMail(BaseModel):
    """One branch of a ``branch`` Task: its send step's code and its own part of the payload."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    step: str = Field(pattern=STEP_CODE_PATTERN)
    template: str
    subject: str | None = None
    variants: list[Variant] = Field(default_factory=list)
    weight: int = 1
    add: list[str] = Field(default_factory=list)
    remove: list[str] = Field(default_factory=list)


class StepRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    contract: Literal["sequence.step"]
    version: Literal[1]
    action: Literal["send", "branch", "check", "tag", "schedule", "finish", "fail"]
    sequence: str
    step: str = Field(pattern=STEP_CODE_PATTERN)
    email: str
    execution: str = Field(min_length=1, max_length=2048)
    one_off: bool = False
    template: str | None = None
    subject: str | None = None
    variants: list[Variant] = Field(default_factory=list)
    weight: int = 1
    transactional: bool = False
    topic: str | None = None
    sender: SenderOverride | None = None
    add: list[str] = Field(default_factory=list)
    remove: list[str] = Field(default_factory=list)
    wait: int | None = Field(default=None, ge=0)
    wait_step: str | None = Field(default=None, pattern=STEP_CODE_PATTERN)  # the wait a callback stands for
    token: str | None = Field(
        default=None, min_length=1, max_length=2048
    )  # a callback Task's task token (SendTaskSuccess: 1-2048)
    window: SendWindow | None = None
    finish: bool = False
    condition: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    data: dict[str, Any] = Field(default_factory=dict)  # the trigger event's data (templates read it)
    then: BranchMail | None = None
    else_: BranchMail | None = Field(default=None, alias="else")
    # the step code of each step the condition names ({opened: {step: welcome}} -> S1)
    steps: dict[str, Annotated[str, Field(pattern=STEP_CODE_PATTERN)]] = Field(default_factory=dict)

    def model_post_init(self, context: Any) -> None:
        validate_name(self.sequence, "sequence")
        for name in self.steps:
            validate_name(name, "step name")
        branches = [b for b in (self.then, self.else_) if b is not None]
        for tag in (*self.add, *self.remove, *(t for b in branches for t in (*b.add, *b.remove))):
            validate_name(tag, "tag")
        if self.contract != CONTRACT or self.version != VERSION:
            raise ValueError("unsupported contract")


@dataclass
class StepDeps:
    store: SubscriberStore
    send: Callable[[SendJob], SendOutcome]
    data_ttl_days: int = 180
    now: Callable[[], datetime] = field(default=clock.utc_now)
    resumer: Resumer | None = None  # callback Tasks: the schedules that resume them


def _name_of(execution_arn: str) -> str:
    return execution_arn.rsplit(":", 1)[-1]


def pick_variant(request: StepRequest) -> tuple[str, str | None, str]:
    """Sticky A/B choice: a hash of (subscriber, sequence, step) picks by weight."""
    assert request.template is not None
    options: list[tuple[str, str | None, int]] = [(request.template, request.subject, request.weight)]
    options += [
        (v.send or request.template, v.subject or request.subject, v.weight) for v in request.variants
    ]
    if len(options) == 1:
        return request.template, request.subject, "a"
    digest = hashlib.sha256(f"{request.email}\n{request.sequence}\n{request.step}".encode()).digest()
    point = int.from_bytes(digest[:8], "big") % sum(w for _, _, w in options)
    for index, (template, subject, weight) in enumerate(options):
        if point < weight:
            return template, subject, "abcdefghij"[index]
        point -= weight
    raise AssertionError("weights cover the range")


def run_step(request: StepRequest, deps: StepDeps) -> dict[str, Any]:
    log: dict[str, Any] = {
        "sequence": request.sequence,
        "step": request.step,
        "action": request.action,
        "subscriber": redact_email(request.email),
    }
    if request.action == "fail":
        _record_failure(request, deps)
        _remove_pair(request, deps)
        logger.warning("sequence step failed", error=(request.error or {}).get("Error"), **log)
        return {"ok": False}
    execution = None if request.one_off else _require_pair(request, deps)
    result: dict[str, Any] = {}
    attributes: dict[str, Any] | None = None
    mail: StepRequest | None = request if request.action == "send" else None
    if request.action in ("check", "branch"):
        assert request.condition is not None
        profile = deps.store.get_profile(request.email)
        tags, attributes = (profile.tags, profile.attributes) if profile else (frozenset(), {})
        result["ok"] = evaluate(
            parse_condition(request.condition),
            tags,
            attributes,
            lambda kind, key: _engaged(request, deps, kind, key),
            lambda kind, name: _step_mail_engaged(request, deps, execution, kind, name),
        )
        if request.action == "branch":
            chosen = request.then if result["ok"] else request.else_
            mail = None if chosen is None else request.model_copy(update=dict(chosen))
    if mail is not None:
        result["outcome"] = _send(mail, deps)
    if mail is not None and (mail.add or mail.remove):
        deps.store.upsert(request.email, add_tags=mail.add, remove_tags=mail.remove)
    elif request.action == "tag" and (request.add or request.remove):
        deps.store.upsert(request.email, add_tags=request.add, remove_tags=request.remove)
    if request.wait is not None:
        if attributes is None and request.window is not None:
            profile = deps.store.get_profile(request.email)
            attributes = profile.attributes if profile else {}
        result["wake"] = wake_at(deps.now(), request.wait, request.window, attributes or {})
    if request.token is not None:
        _resume_at_wake(request, deps, result)
    if (request.finish or request.action == "finish") and not request.one_off:
        _remove_pair(request, deps, completed=True)
    logger.info("sequence step", **log, **{k: v for k, v in result.items() if k != "wake"})
    return result


def _resume_at_wake(request: StepRequest, deps: StepDeps, result: dict[str, Any]) -> None:
    """A callback Task: the schedule that sends ``result`` back with the token at the wake-up
    time. Throttled: retried like a throttled send (the mail is claimed: never sent twice)."""
    if deps.resumer is None or "wake" not in result or request.token is None:
        raise ValueError("a callback Task needs its wait, its token and the schedules' settings")
    name = schedule_name(request.step, request.execution)
    try:
        deps.resumer.resume_at(name, clock.parse_iso(result["wake"]), request.token, result)
    except ScheduleThrottled as exc:
        raise SendRetryable(f"schedule throttled: {exc}") from exc


def _send(request: StepRequest, deps: StepDeps) -> str:
    template, subject, variant = pick_variant(request)
    job = SendJob(
        email=request.email,
        template=template,
        source=request.sequence,
        # the send-once key: one mail per step per execution (a re-entry sends again)
        step=send_once_step(request.step, request.execution),
        subject=subject,
        transactional=request.transactional,
        topic=request.topic,
        sender=request.sender,
        data={**request.data, "variant": variant} if request.variants else request.data,
    )
    outcome = deps.send(job)
    if outcome.held:
        raise SendPaused(f"{outcome.reason}: {outcome.detail or ''}"[:300])
    if outcome.status == "retryable":
        raise SendRetryable(outcome.reason or "retryable")
    if outcome.status == "failed":
        raise SendFailed(f"{outcome.reason}: {outcome.detail or ''}"[:300])
    return outcome.status if outcome.status == "sent" else f"skipped:{outcome.reason}"


def _require_pair(request: StepRequest, deps: StepDeps) -> Execution:
    for execution in deps.store.list_executions(request.email):
        if execution.sequence_id == request.sequence:
            if execution.execution_arn == request.execution:
                return execution
            break
    raise SequenceHalted("the EXEC pair is gone or names another execution")


def _remove_pair(request: StepRequest, deps: StepDeps, *, completed: bool = False) -> None:
    if request.one_off:
        return
    if completed:  # the change stream tells a completed execution from a stopped one by this mark
        deps.store.mark_execution_ended(
            request.email, request.sequence, request.execution, keys.EXECUTION_COMPLETED
        )
    deps.store.delete_execution(request.email, request.sequence, request.execution)


def _record_failure(request: StepRequest, deps: StepDeps) -> None:
    error = request.error or {}
    deps.store.add_event(
        request.email,
        FAILED_EVENT,
        at=deps.now(),
        ttl_days=deps.data_ttl_days,
        origin="sequence",
        source=request.sequence,
        execution=_name_of(request.execution),
        error=str(error.get("Error", ""))[:200],
        cause=str(error.get("Cause", ""))[:1000],
    )


def _engaged(request: StepRequest, deps: StepDeps, kind: str, template: str) -> bool:
    """opened / clicked: an engagement event for the template; sent: a send log entry."""
    if kind == "sent":
        return deps.store.has_sent(request.email, template)
    return deps.store.has_event(request.email, OPEN_EVENT if kind == "opened" else CLICK_EVENT, template)


def _step_mail_engaged(
    request: StepRequest, deps: StepDeps, execution: Execution | None, kind: str, name: str
) -> bool:
    """opened / clicked {step: name}: a person's open (click) of the mail that step sent in this
    execution: an event of this sequence whose ``step`` is that step's send-once step (its code
    and this execution), without a ``machine`` verdict, since the execution started."""
    code = request.steps.get(name)
    if code is None or execution is None:
        raise ValueError(f"the condition names step {name!r}, whose step code the payload lacks")
    # every pair is written with its start time; without one, every event of the subscriber is read
    since = clock.iso(clock.parse_iso(execution.started_at) - CLOCK_SLACK) if execution.started_at else ""
    return deps.store.has_step_event(
        request.email,
        OPEN_EVENT if kind == "opened" else CLICK_EVENT,
        source=request.sequence,
        step=send_once_step(code, request.execution),
        since=since,
    )


def send_once_step(code: str, execution_arn: str) -> str:
    """The send job's ``step`` of a sequence mail: the step code and this execution (the
    send-once key; SES events carry it in the ``step`` tag)."""
    return f"{code}:{_name_of(execution_arn)[-40:]}"


def parse_request(payload: dict[str, Any]) -> StepRequest:
    return StepRequest.model_validate(payload)
