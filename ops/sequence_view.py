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
from typing import Any

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


def current_state(sfn: StepFunctions, execution_arn: str) -> str | None:
    """The name of the state the execution entered last (None: ended, or not known); for a
    callback Task that sent its mail and waits for its schedule (``TaskSubmitted``), the wait
    it stands for (``<wait step code>_wait``, from the Task's ``wait_step``).

    Newest events first (``reverseOrder``, one short page); an endpoint that answers oldest
    first (the local runtime's emulation) is read to its end instead."""
    page = sfn.client.get_execution_history(executionArn=execution_arn, reverseOrder=True, maxResults=20)
    events: list[Any] = list(page["events"])
    if len(events) > 1 and events[0]["id"] < events[-1]["id"]:
        events = list(reversed(sfn.history(execution_arn)))
    submitted = False
    for event in events:
        if event["type"] in (
            "ExecutionSucceeded",
            "ExecutionFailed",
            "ExecutionAborted",
            "ExecutionTimedOut",
        ):
            return None
        submitted = submitted or event["type"] == "TaskSubmitted"
        scheduled = event.get("taskScheduledEventDetails")
        if submitted and scheduled:
            wait_step = json.loads(scheduled.get("parameters") or "{}").get("Payload", {}).get("wait_step")
            if wait_step:
                return f"{wait_step}_wait"
        details = event.get("stateEnteredEventDetails")
        if details:
            return str(details["name"])
    return None


def waiting_at(sfn: StepFunctions, executions: Iterable[str]) -> Counter[str]:
    """How many of ``executions`` are in each step now (by step code), looked up for at most
    :data:`MAX_LOCATED` of them."""
    found: Counter[str] = Counter()
    for index, arn in enumerate(executions):
        if index >= MAX_LOCATED:
            break
        state = current_state(sfn, arn)
        if state:
            found[state.split("_", 1)[0]] += 1
    return found


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
                nodes.append(
                    StepNode(code, "wait", f"wait {duration_label(step.wait)}", depth, (), counts(code, ()))
                )
            elif isinstance(step, TagStep):
                label = f"tag +{','.join(step.tag.add) or '-'} -{','.join(step.tag.remove) or '-'}"
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
        except (ValueError, AttributeError):
            email = ""
        error, cause = str(found.get("error") or ""), str(found.get("cause") or "")
        if execution.status != "ABORTED":
            kind, reason = "failed", " ".join(p for p in (execution.status.lower(), error, cause[:200]) if p)
        elif error == STOPPED and cause.startswith(GOAL):
            kind, reason = "exit", f"goal reached: {cause.removeprefix(GOAL)}"
        else:
            kind, reason = "stopped", cause or "stopped (no reason recorded)"
        return Ended(kind, email, reason, execution.stopped_at, execution.execution_arn)

    if not shown:
        return []
    with ThreadPoolExecutor(max_workers=READERS) as pool:
        return list(pool.map(one, shown))


def current_steps(sfn: StepFunctions, catalog: Any, executions: Iterable[Any]) -> dict[str, str]:
    """Where each of a subscriber's ``executions`` is now, by execution ARN: its step's label
    ("wait 1d", "send onboarding/tips"; "" when it ended or its sequence is no longer in
    ``catalog``), one history read per execution, :data:`READERS` at a time."""
    shown = list(executions)[:MAX_LOCATED]

    def one(execution: Any) -> tuple[str, str]:
        sequence = catalog.get(execution.sequence_id)
        state = current_state(sfn, execution.execution_arn) if sequence is not None else None
        if sequence is None or not state:
            return execution.execution_arn, ""
        labels = {node.code: node.label for node in graph(sequence)}
        return execution.execution_arn, labels.get(state.split("_", 1)[0], state)

    if not shown:
        return {}
    with ThreadPoolExecutor(max_workers=READERS) as pool:
        return dict(pool.map(one, shown))
