"""A sequence as operators look at it: its step graph with per-step counts, its members and
where their executions wait now (``mailstep sequences subscribers``, the MCP tool
``sequence_subscribers`` and the console's sequence page).

Costs: the graph reads the sequence's counters item (``StatsStore.steps``: its 16 shards in one
BatchGetItem), whose per-step attributes count each step's mails sent and the subscribers who
opened and clicked them (``shared.store.stats.step_attribute``); members are the sequence's ``EXEC#``
partition (a Query) and one Query of each shown member's executions; "waiting here" asks Step
Functions for the last events of at most :data:`MAX_LOCATED` executions.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from shared.core import clock
from shared.core.errors import FieldProblem, InvalidInput
from shared.sequences.compiler import duration_label, step_code
from shared.sequences.model import ExitStep, IfStep, SendStep, Sequence, TagStep, WaitStep, condition_to_data
from shared.sequences.sfn import StepFunctions
from shared.store.stats import StatsStore
from shared.store.subscribers import SubscriberStore

MAX_MEMBERS = 100  # members listed on one page
MAX_LOCATED = 200  # executions whose current step is looked up
READERS = 8  # reads in flight at once (members' executions)


@dataclass(frozen=True)
class StepNode:
    code: str  # S1, S3T1 ...: the prefix of the step's state names
    kind: str  # send | wait | if | tag | exit | then | else
    label: str
    depth: int
    templates: tuple[str, ...] = ()
    counts: dict[str, int] = field(default_factory=dict)  # sent, opened, clicked, waiting
    condition: dict[str, Any] | None = None  # an ``if`` step's condition (``condition_to_data``)
    wait_s: int = 0  # a ``wait`` step's seconds

    def public(self) -> dict[str, Any]:
        return {**asdict(self), "templates": list(self.templates)}


@dataclass(frozen=True)
class Member:
    email: str
    started_at: str
    execution_arn: str

    def public(self) -> dict[str, Any]:
        return {"email": self.email, "started_at": self.started_at, "execution_arn": self.execution_arn}


def sequence_arg(value: str) -> str:
    from shared.core.models import validate_name

    try:
        return validate_name(value, "sequence id")
    except ValueError as exc:
        raise InvalidInput(str(exc), [FieldProblem("sequence", str(exc))]) from None


def members(
    store: SubscriberStore, sequence_id: str, limit: int | None = None, emails: list[str] | None = None
) -> list[Member]:
    """Subscribers with an active execution of the sequence (its ``EXEC#`` pairs, or ``emails``
    when the caller read them already), with the execution's start and ARN; the first ``limit``
    of them when given. Their executions are read :data:`READERS` at a time."""
    sequence_id = sequence_arg(sequence_id)
    if emails is None:
        emails = store.sequence_members(sequence_id)
    shown = emails[:limit] if limit is not None else emails

    def member(email: str) -> Member | None:
        execution = next((e for e in store.list_executions(email) if e.sequence_id == sequence_id), None)
        return Member(email, execution.started_at, execution.execution_arn) if execution else None

    if not shown:
        return []
    with ThreadPoolExecutor(max_workers=READERS) as pool:
        return [m for m in pool.map(member, shown) if m is not None]


@dataclass(frozen=True)
class Position:
    """The state an execution entered last: its name, when, and the input it entered with."""

    state: str
    entered: datetime | None
    input: dict[str, Any]

    @property
    def code(self) -> str:
        return self.state.split("_", 1)[0]


def locate(sfn: StepFunctions, execution_arn: str) -> Position | None:
    """Where the execution is now (None: ended, or not known). A callback Task that sent its
    mail and waits for its schedule (``TaskSubmitted``: the step function returned) is in the
    wait it stands for (``<wait step code>_wait``, from the Task's ``wait_step``), entered when
    the Task was submitted.

    Newest events first (``reverseOrder``, one short page); an endpoint that answers oldest
    first (the local runtime's emulation) is read to its end instead."""
    page = sfn.client.get_execution_history(executionArn=execution_arn, reverseOrder=True, maxResults=20)
    events: list[Any] = list(page["events"])
    if len(events) > 1 and events[0]["id"] < events[-1]["id"]:
        events = list(reversed(sfn.history(execution_arn)))
    submitted: list[datetime | None] = []  # the newest TaskSubmitted's time, once one is seen
    for event in events:
        if event["type"] in (
            "ExecutionSucceeded",
            "ExecutionFailed",
            "ExecutionAborted",
            "ExecutionTimedOut",
        ):
            return None
        if event["type"] == "TaskSubmitted" and not submitted:
            at = event.get("timestamp")
            submitted.append(at if isinstance(at, datetime) else None)
        scheduled = event.get("taskScheduledEventDetails")
        if submitted and scheduled:
            payload = json.loads(scheduled.get("parameters") or "{}").get("Payload", {})
            wait_step = payload.get("wait_step") if isinstance(payload, dict) else None
            if wait_step:
                return Position(f"{wait_step}_wait", submitted[0], {})
        details = event.get("stateEnteredEventDetails")
        if details:
            try:
                given = json.loads(details.get("input") or "{}")
            except ValueError:
                given = {}
            entered = event.get("timestamp")
            return Position(
                str(details["name"]),
                entered if isinstance(entered, datetime) else None,
                given if isinstance(given, dict) else {},
            )
    return None


def current_state(sfn: StepFunctions, execution_arn: str) -> str | None:
    """The name of the state the execution entered last (None: ended, or not known)."""
    found = locate(sfn, execution_arn)
    return found.state if found is not None else None


def locate_all(sfn: StepFunctions, executions: Iterable[str]) -> dict[str, Position | None]:
    """Where each of the first :data:`MAX_LOCATED` ``executions`` is now, by ARN, :data:`READERS`
    history reads at a time."""
    shown = list(executions)[:MAX_LOCATED]
    if not shown:
        return {}
    with ThreadPoolExecutor(max_workers=READERS) as pool:
        return dict(zip(shown, pool.map(lambda arn: locate(sfn, arn), shown), strict=True))


def waiting_at(positions: Iterable[Position | None]) -> Counter[str]:
    """How many of the located executions are in each step now (by step code)."""
    return Counter(p.code for p in positions if p is not None)


def whereabouts(
    nodes: list[StepNode], position: Position | None, *, windowed: bool = False
) -> dict[str, Any]:
    """What an execution at ``position`` does now and next, for people: ``step`` (its step's
    label, "" when it ended), ``next`` (the step after it: "send onboarding/tips", "end"; an
    ``if`` step's condition in ``next_condition``) and ``next_at`` (when a wait ends, ISO 8601:
    its entry plus its seconds, or with a send window (``windowed``) the time its ``schedule``
    Task set, ``$.r.wake`` of the input it entered with; None while a step runs now)."""
    if position is None:
        return {"step": "", "next": "", "next_condition": None, "next_at": None}
    index = next((i for i, n in enumerate(nodes) if n.code == position.code), None)
    if index is None:
        return {"step": position.state, "next": "", "next_condition": None, "next_at": None}
    here, following = nodes[index], _after(nodes, index)
    next_at = None
    if here.kind == "wait":
        result = position.input.get("r")
        wake = result.get("wake") if isinstance(result, dict) else None
        if windowed:
            next_at = wake if isinstance(wake, str) else None
        elif position.entered is not None:
            next_at = clock.iso(position.entered + timedelta(seconds=here.wait_s))
    return {
        "step": here.label,
        "next": following.label if following is not None else "end",
        "next_condition": following.condition if following is not None else None,
        "next_at": next_at,
    }


def _after(nodes: list[StepNode], index: int) -> StepNode | None:
    """The step that runs after ``nodes[index]`` (depth first: the rest of its branch, then
    what follows its ``if``; an ``else`` ends a ``then`` branch); None: the sequence ends."""
    limit = nodes[index].depth
    for node in nodes[index + 1 :]:
        if node.depth > limit or node.kind == "then":
            continue
        if node.kind == "else":  # the then-branch ends here: its else-branch is skipped
            limit = node.depth - 1
            continue
        return node
    return None


def graph(
    sequence: Sequence, stats: StatsStore | None = None, waiting: Counter[str] | None = None
) -> list[StepNode]:
    """The steps depth first (branches indented), each with its counts: its mails sent, the
    subscribers who opened and clicked them, and how many executions are in it now."""
    waiting = waiting or Counter()
    nodes: list[StepNode] = []
    per_step = stats.steps(sequence.id) if stats is not None else {}

    def counts(code: str, templates: tuple[str, ...]) -> dict[str, int]:
        out = {"waiting": waiting.get(code, 0)}
        if stats is not None and templates:
            mine = per_step.get(code, {})
            out.update({what: mine.get(what, 0) for what in ("sent", "opened", "clicked")})
        return out

    def add(steps: list[Any], path: tuple[Any, ...], depth: int) -> None:
        for index, step in enumerate(steps):
            here = (*path, index)
            code = step_code(here)
            if isinstance(step, SendStep):
                templates = tuple(dict.fromkeys([step.send, *(v.send or step.send for v in step.variants)]))
                label = f"send {step.send}" + (
                    f" (A/B: {len(step.variants) + 1} variants)" if step.variants else ""
                )
                nodes.append(StepNode(code, "send", label, depth, templates, counts(code, templates)))
            elif isinstance(step, WaitStep):
                label = f"wait {duration_label(step.wait)}"
                nodes.append(StepNode(code, "wait", label, depth, (), counts(code, ()), wait_s=step.wait))
            elif isinstance(step, TagStep):
                changes = [*(f"+{t}" for t in step.tag.add), *(f"-{t}" for t in step.tag.remove)]
                label = "tag " + " ".join(changes)  # "tag +onboarded -trial"
                nodes.append(StepNode(code, "tag", label, depth, (), counts(code, ())))
            elif isinstance(step, ExitStep):
                nodes.append(StepNode(code, "exit", "exit", depth, (), counts(code, ())))
            elif isinstance(step, IfStep):
                condition = condition_to_data(step.if_)
                label = f"if {json.dumps(condition)}"
                nodes.append(StepNode(code, "if", label, depth, (), counts(code, ()), condition))
                nodes.append(StepNode(f"{code}T", "then", "then", depth + 1))
                add(step.then, (*here, "then"), depth + 2)
                if step.else_:
                    nodes.append(StepNode(f"{code}E", "else", "else", depth + 1))
                    add(step.else_, (*here, "else"), depth + 2)

    if sequence.on is not None:
        templates = (sequence.on.send,)
        nodes.append(
            StepNode(
                "S1",
                "send",
                f"on {sequence.on.event}: send {sequence.on.send}",
                0,
                templates,
                counts("S1", templates),
            )
        )
        return nodes
    add(sequence.steps, ("steps",), 0)
    return nodes


STOPPED = "mailstep.stopped"  # the error the engine stops an execution with (its cause: why)
GOAL = "event "  # the cause of a stop on one of the sequence's exit events: its goal reached


CAUSE_CHARS = 200  # of a failure's cause shown


def cause_text(cause: str) -> str:
    """A failed execution's cause as a person reads it: a Lambda function error's cause is its
    JSON (``errorMessage``, ``errorType``, ``stackTrace``): its message alone, never the trace
    (file paths of the function's code); any other cause as it is; at most
    :data:`CAUSE_CHARS` characters."""
    try:
        found = json.loads(cause)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
        found = None
    if isinstance(found, dict) and isinstance(found.get("errorMessage"), str):
        cause = found["errorMessage"]
    return cause[:CAUSE_CHARS]


@dataclass(frozen=True)
class Ended:
    """An execution that ended before its last step: ``exit`` (an exit event came: the goal,
    a conversion), ``stopped`` (unsubscribed, erased, restarted: the cause says), ``failed``
    (FAILED or TIMED_OUT: a fault)."""

    kind: str
    email: str
    reason: str
    stopped_at: str
    execution_arn: str


def ended(sfn: StepFunctions, executions: Iterable[Any], limit: int = 50) -> list[Ended]:
    """The first ``limit`` of ``executions`` (``ops.admin.failed_executions``: not SUCCEEDED,
    newest first) told apart by their DescribeExecution (``error``, ``cause``, and the
    subscriber from the input), :data:`READERS` at a time."""
    shown = list(executions)[:limit]

    def one(execution: Any) -> Ended:
        found = sfn.client.describe_execution(executionArn=execution.execution_arn)
        try:
            email = str(json.loads(found.get("input") or "{}").get("email") or "")
        except (ValueError, AttributeError, RecursionError):
            email = ""
        error, cause = str(found.get("error") or ""), str(found.get("cause") or "")
        if execution.status != "ABORTED":
            parts = (execution.status.lower(), error, cause_text(cause))
            kind, reason = "failed", " ".join(p for p in parts if p)
        elif error == STOPPED and cause.startswith(GOAL):
            kind, reason = "exit", f"goal reached: {cause.removeprefix(GOAL)}"
        else:
            kind, reason = "stopped", cause or "stopped (no reason recorded)"
        return Ended(kind, email, reason, execution.stopped_at, execution.execution_arn)

    if not shown:
        return []
    with ThreadPoolExecutor(max_workers=READERS) as pool:
        return list(pool.map(one, shown))


def current_steps(sfn: StepFunctions, catalog: Any, executions: Iterable[Any]) -> dict[str, dict[str, Any]]:
    """Where each of a subscriber's ``executions`` is now and what comes next, by execution ARN
    (:func:`whereabouts`: the step's label, "" when it ended or its sequence is no longer in
    ``catalog``; the next step and when a wait ends), one history read per execution,
    :data:`READERS` at a time."""
    shown = list(executions)
    known = [e for e in shown if catalog.get(e.sequence_id) is not None]
    positions = locate_all(sfn, (e.execution_arn for e in known))
    found = {}
    for execution in shown:
        sequence = catalog.get(execution.sequence_id)
        nodes = graph(sequence) if sequence is not None else []
        windowed = sequence is not None and sequence.send_window is not None
        found[execution.execution_arn] = whereabouts(
            nodes, positions.get(execution.execution_arn), windowed=windowed
        )
    return found
