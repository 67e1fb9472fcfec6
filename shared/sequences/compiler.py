"""The one sequence compiler: a validated :class:`Sequence` -> Step Functions ASL (JSONPath).

Shape (docs/sequences.md explains the cost model):
- one Lambda Task per ``send`` / ``tag`` step (a tag right after a send shares its Task),
  calling the sequence step function with a versioned envelope
  ``{"contract": "sequence.step", "version": 1, "action", ids...}``;
- one Wait state per ``wait`` step; no register or complete states: the dispatcher writes
  the EXEC pair before StartExecution and the last Task of every path removes it
  (``"finish": true``), so a linear sequence costs (2 x sends - 1) transitions;
- ``if`` on tags/attributes is a native Choice on the execution input while that snapshot
  is fresh (no wait or tag step before it); otherwise, when each branch is at most one send,
  one ``branch`` Task that evaluates the condition and sends the chosen mail, else a
  ``check`` Task + Choice;
- a Task that mails (``send`` or ``branch``) followed by a ``wait`` is ONE callback Task
  (``lambda:invoke.waitForTaskToken``): the step function sends, then creates a one-time
  EventBridge Scheduler schedule at the wake-up time that hands the task token back
  (SendTaskSuccess), so the send and the wait cost one transition (docs/sequences.md);
- with a ``send_window`` each wait ends inside the window: a callback Task's schedule is at the
  window's wake-up time; otherwise the Task before the Wait returns the wake-up time
  (``$.r.wake``) and the Wait uses ``TimestampPath``; a Wait reached from a Choice or another
  Wait gets a small ``schedule`` Task in front;
- Retry with backoff for ``SendRetryable``; a Catch sends every other failure to a
  ``fail`` Task that records it and removes the pair; ``SequenceHalted`` (the pair is gone,
  the execution was stopped by an event) ends quietly.

Output is deterministic: the same file gives byte-identical JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from shared.core.yaml_source import Path_
from shared.sequences.model import (
    All,
    Any_,
    AttributeCondition,
    Condition,
    ExitStep,
    HasTag,
    IfStep,
    Not,
    SendStep,
    Sequence,
    Step,
    TagStep,
    WaitStep,
    condition_to_data,
    step_references,
    uses_live_data,
)
from shared.sequences.validate import step_names

CONTRACT = "sequence.step"
VERSION = 1
STEP_FUNCTION_PLACEHOLDER = "${SequenceStepFunctionArn}"
SUBSTITUTION_KEY = "SequenceStepFunctionArn"
# A send and the wait after it: the step function is invoked with the task token and the Task
# waits until a one-time schedule hands the token back (Step Functions Developer Guide, "Wait for
# a Callback with Task Token"; the optimized Lambda integration's ``.waitForTaskToken``).
CALLBACK_RESOURCE = "arn:aws:states:::lambda:invoke.waitForTaskToken"
RETRYABLE_ERROR = "SendRetryable"
HALTED_ERROR = "SequenceHalted"
FAILED_ERROR = "SequenceStepFailed"
LAMBDA_TRANSIENT = [
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
]
RETRY_SEND = {
    "ErrorEquals": [RETRYABLE_ERROR],
    "IntervalSeconds": 30,
    "BackoffRate": 2.0,
    "MaxAttempts": 8,
    "MaxDelaySeconds": 3600,
    "JitterStrategy": "FULL",
}
# Sending paused (the reputation guardrail, docs/reputation.md): wait for the resume instead of
# failing: after 5 min, then doubling up to an hour between tries, for about a week (one
# transition and one invocation per try).
PAUSED_ERROR = "SendPaused"
RETRY_PAUSED = {
    "ErrorEquals": [PAUSED_ERROR],
    "IntervalSeconds": 300,
    "BackoffRate": 2.0,
    "MaxAttempts": 170,
    "MaxDelaySeconds": 3600,
    "JitterStrategy": "FULL",
}
RETRY_LAMBDA = {"ErrorEquals": LAMBDA_TRANSIENT, "IntervalSeconds": 2, "BackoffRate": 2.0, "MaxAttempts": 6}
# A callback Task whose schedule never hands its token back (the schedule was deleted, or EventBridge
# Scheduler gave up calling SendTaskSuccess after its retries) would wait until the execution's
# one-year limit. It times out once its wait, the longest a send window moves a wake-up (8 days:
# shared.sequences.evaluate.next_in_window) and a day of grace have passed. The retry invokes the
# step again: its mail is claimed (answered "already sent", never sent twice) and a new schedule
# resumes it after the wait; a second timeout fails the execution, which the failure Task records
# and cleans up (docs/sequences.md, "A schedule that never fires").
WINDOW_DEFERRAL_MAX_S = 8 * 86400
CALLBACK_GRACE_S = 86400
CALLBACK_TIMEOUT = "States.Timeout"
RETRY_CALLBACK_TIMEOUT = {"ErrorEquals": [CALLBACK_TIMEOUT], "IntervalSeconds": 1, "MaxAttempts": 1}
MAILING = ("send", "branch")  # the actions that may send a mail
FINISH_STATE = "Finish"
FAIL_TASK_STATE = "Failed_cleanup"
FAIL_STATE = "Failed"
HALTED_STATE = "Halted"


def tag_key(tag: str) -> str:
    """A tag as a JSONPath-safe key of the ``tags`` object in the execution input (injective)."""
    return "t_" + tag.replace("_", "__").replace(".", "_2e").replace("-", "_2d")


def duration_label(seconds: int) -> str:
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def step_code(path: Path_) -> str:
    """``("steps", 2, "then", 0)`` -> ``S3T1``: short, stable, unique within a sequence."""
    code = ""
    for part in path:
        if isinstance(part, int):
            code += str(part + 1)
        else:
            code += {"steps": "S", "then": "T", "else": "E"}[part]
    return code


@dataclass
class Cont:
    """Where control goes next, seen from the two kinds of predecessors.

    A Task jumps to ``task_next`` (None: the execution ends there) adding ``task_extra`` to
    its payload (``finish`` or ``wait``); a Choice, a Wait or the start jumps to
    :meth:`entry`, which may create a helper state (Finish, schedule) the first time.
    """

    task_next: str | None
    entry_name: str
    task_extra: dict[str, Any] = field(default_factory=dict)
    make_entry: Callable[[], None] | None = None

    def entry(self) -> str:
        if self.make_entry is not None:
            self.make_entry()
            self.make_entry = None
        return self.entry_name

    @classmethod
    def to(cls, name: str) -> Cont:
        return cls(task_next=name, entry_name=name)


def fresh_ifs(steps: list[Step], path: Path_, fresh: bool) -> tuple[set[Path_], bool]:
    """Paths of the ``if`` steps reached while the start snapshot of tags/attributes is current."""
    found: set[Path_] = set()
    for index, step in enumerate(steps):
        here = (*path, index)
        if isinstance(step, WaitStep | TagStep):
            fresh = False
        elif isinstance(step, IfStep):
            if fresh:
                found.add(here)
            then_found, then_fresh = fresh_ifs(step.then, (*here, "then"), fresh)
            else_found, else_fresh = fresh_ifs(step.else_, (*here, "else"), fresh)
            found |= then_found | else_found
            fresh = then_fresh and else_fresh
    return found, fresh


def choice_rule(condition: Condition) -> dict[str, Any]:
    """A native Choice rule (no Next) for a tag/attribute condition on the execution input."""
    if isinstance(condition, HasTag):
        return {"Variable": f"$.tags.{tag_key(condition.tag)}", "IsPresent": True}
    if isinstance(condition, All):
        rules = [choice_rule(c) for c in condition.all]
        return rules[0] if len(rules) == 1 else {"And": rules}
    if isinstance(condition, Any_):
        rules = [choice_rule(c) for c in condition.any]
        return rules[0] if len(rules) == 1 else {"Or": rules}
    if isinstance(condition, Not):
        return {"Not": choice_rule(condition.not_)}
    if isinstance(condition, AttributeCondition):
        return _attribute_rule(condition)
    raise ValueError(f"{type(condition).__name__} needs live data: compile it as a check")


def _attribute_rule(condition: AttributeCondition) -> dict[str, Any]:
    var = f"$.attributes.{condition.attribute}"
    present = {"Variable": var, "IsPresent": True}

    def equals(value: Any) -> dict[str, Any]:
        if isinstance(value, bool):
            kind, op = "IsBoolean", "BooleanEquals"
        elif isinstance(value, int | float):
            kind, op = "IsNumeric", "NumericEquals"
        else:
            kind, op = "IsString", "StringEquals"
        return {"And": [present, {"Variable": var, kind: True}, {"Variable": var, op: value}]}

    test = condition.test
    if test == "equals":
        return equals(condition.equals)
    if test == "in":
        values = condition.in_ or []
        return equals(values[0]) if len(values) == 1 else {"Or": [equals(v) for v in values]}
    if test == "exists":
        rule = {"And": [present, {"Not": {"Variable": var, "IsNull": True}}]}
        return rule if condition.exists else {"Not": rule}
    op = "NumericGreaterThan" if test == "greater" else "NumericLessThan"
    limit = condition.greater if test == "greater" else condition.less
    return {"And": [present, {"Variable": var, "IsNumeric": True}, {"Variable": var, op: limit}]}


def mail_of(step: SendStep, then_tag: TagStep | None = None) -> dict[str, Any]:
    """A send step's own part of the payload: template, subject, variants, a riding tag change."""
    params: dict[str, Any] = {"template": step.send}
    if step.subject is not None:
        params["subject"] = step.subject
    if step.variants:
        params["weight"] = step.weight
        params["variants"] = [v.model_dump(exclude_none=True) for v in step.variants]
    if then_tag is not None:
        params["add"], params["remove"] = then_tag.tag.add, then_tag.tag.remove
    return params


def branch_mail(steps: list[Step], path: Path_) -> dict[str, Any] | None | Literal[False]:
    """An ``if`` branch as the payload of a ``branch`` Task: None when empty, its one send (and
    a tag riding on it) with that send's own step code, or False when it holds anything else."""
    if not steps:
        return None
    send, *rest = steps
    if not isinstance(send, SendStep) or len(rest) > 1 or (rest and not isinstance(rest[0], TagStep)):
        return False
    tag = rest[0] if rest and isinstance(rest[0], TagStep) else None
    return {"step": step_code((*path, 0)), **mail_of(send, tag)}


class _Compiler:
    def __init__(self, sequence: Sequence) -> None:
        self.seq = sequence
        self.states: dict[str, dict[str, Any]] = {}
        self.window = sequence.send_window is not None
        self.fresh, _ = fresh_ifs(sequence.steps, ("steps",), not self.window)

    # ----- states -------------------------------------------------------------------
    def add(self, name: str, state: dict[str, Any]) -> str:
        if name in self.states:
            raise AssertionError(f"state {name} emitted twice")
        self.states[name] = state
        return name

    def payload(self, action: str, code: str, params: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {
            "contract": CONTRACT,
            "version": VERSION,
            "action": action,
            "sequence": self.seq.id,
            "step": code,
            "email.$": "$.email",
            "execution.$": "$$.Execution.Id",
        }
        if self.seq.is_one_off:
            body["one_off"] = True
        return {**body, **params}

    def task(
        self,
        name: str,
        action: str,
        code: str,
        params: dict[str, Any],
        cont: Cont,
        *,
        wait: tuple[int, str] | None = None,
    ) -> str:
        """A Task calling the step function; with ``wait`` (seconds, the wait step's code) a
        callback Task that sends and then waits that long (or for the send window) before going
        on to ``cont``; ``wait_step`` tells readers of the history which step it waits in."""
        retry = [RETRY_SEND, RETRY_PAUSED, RETRY_LAMBDA] if action in MAILING else [RETRY_LAMBDA]
        payload = self.payload(action, code, {**params, **cont.task_extra})
        resource: dict[str, Any] = {"Resource": STEP_FUNCTION_PLACEHOLDER, "Parameters": payload}
        if wait is not None:
            payload |= {"wait": wait[0], "wait_step": wait[1], "token.$": "$$.Task.Token"}
            if self.seq.send_window is not None:
                payload["window"] = self.seq.send_window.model_dump()
            resource = {
                "Resource": CALLBACK_RESOURCE,
                "Parameters": {"FunctionName": STEP_FUNCTION_PLACEHOLDER, "Payload": payload},
                "TimeoutSeconds": self.callback_timeout(wait[0]),
            }
            retry = [*retry, RETRY_CALLBACK_TIMEOUT]
        state: dict[str, Any] = {
            "Type": "Task",
            **resource,
            "ResultPath": "$.r",
            "Retry": retry,
            "Catch": [
                {"ErrorEquals": [HALTED_ERROR], "ResultPath": "$.error", "Next": self.halted()},
                {"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": self.failed()},
            ],
        }
        if cont.task_next is None:
            state["End"] = True
        else:
            state["Next"] = cont.task_next
        return self.add(name, state)

    def callback_timeout(self, wait_s: int) -> int:
        """How long a callback Task waits for its schedule before it is tried again."""
        deferral = WINDOW_DEFERRAL_MAX_S if self.seq.send_window is not None else 0
        return wait_s + deferral + CALLBACK_GRACE_S

    def halted(self) -> str:
        if HALTED_STATE not in self.states:
            self.add(HALTED_STATE, {"Type": "Succeed", "Comment": "stopped: the EXEC pair is gone"})
        return HALTED_STATE

    def failed(self) -> str:
        if FAIL_TASK_STATE not in self.states:
            self.add(FAIL_TASK_STATE, {})  # reserve the name, fill below (the Task catches to FAIL_STATE)
            self.add(
                FAIL_STATE, {"Type": "Fail", "Error": FAILED_ERROR, "Cause": "a step failed; see the history"}
            )
            self.states[FAIL_TASK_STATE] = {
                "Type": "Task",
                "Resource": STEP_FUNCTION_PLACEHOLDER,
                "Parameters": self.payload("fail", "FAIL", {"error.$": "$.error"}),
                "ResultPath": "$.r",
                "Retry": [{**RETRY_LAMBDA, "ErrorEquals": ["States.ALL"], "MaxAttempts": 3}],
                "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": FAIL_STATE}],
                "Next": FAIL_STATE,
            }
        return FAIL_TASK_STATE

    def end(self) -> Cont:
        def make() -> None:
            if FINISH_STATE not in self.states:
                self.task(FINISH_STATE, "finish", "END", {}, Cont(task_next=None, entry_name=""))

        return Cont(task_next=None, entry_name=FINISH_STATE, task_extra={"finish": True}, make_entry=make)

    # ----- steps --------------------------------------------------------------------
    def steps(self, steps: list[Step], path: Path_, cont: Cont) -> Cont:
        index = len(steps) - 1
        while index >= 0:
            step = steps[index]
            if isinstance(step, TagStep) and index > 0 and isinstance(steps[index - 1], SendStep):
                # a tag right after a send rides on the send's Task: one transition less
                cont = self.step(steps[index - 1], (*path, index - 1), cont, then_tag=step)
                index -= 2
                continue
            mailer = self.mailer_before(steps, path, index) if isinstance(step, WaitStep) else None
            if isinstance(step, WaitStep) and mailer is not None:
                # a send (or branch) and the wait after it: one callback Task, one transition
                mail_index, tag = mailer
                wait = (step.wait, step_code((*path, index)))
                cont = self.step(steps[mail_index], (*path, mail_index), cont, then_tag=tag, wait=wait)
                index = mail_index - 1
                continue
            cont = self.step(step, (*path, index), cont)
            index -= 1
        return cont

    def step(
        self,
        step: Step,
        path: Path_,
        cont: Cont,
        then_tag: TagStep | None = None,
        wait: tuple[int, str] | None = None,
    ) -> Cont:
        """The states of one step before ``cont``; ``wait``: the step is a send (or a branch of
        single sends) whose Task also stands for the wait after it (a callback Task): the wait's
        seconds and its step code."""
        code = step_code(path)
        if wait is not None:
            # after the wait the execution goes where a Wait state would have gone
            cont = Cont.to(cont.entry())
        if isinstance(step, ExitStep):
            return self.end()
        if isinstance(step, SendStep):
            params = {**self.mail_params(), **mail_of(step, then_tag)}
            name = f"{code}_send_{step.send.replace('/', '-')}"[:80]
            return Cont.to(self.task(name, "send", code, params, cont, wait=wait))
        if isinstance(step, TagStep):
            params = {"add": step.tag.add, "remove": step.tag.remove}
            return Cont.to(self.task(f"{code}_tag", "tag", code, params, cont))
        if isinstance(step, WaitStep):
            return self.wait(code, step.wait, cont)
        assert isinstance(step, IfStep)
        if self.branch_task(step, path):
            # check + Choice + send folded into one Task that evaluates and sends: 2 transitions less
            branches = (branch_mail(step.then, (*path, "then")), branch_mail(step.else_, (*path, "else")))
            params = {**self.mail_params(), **self.condition_params(step.if_)}
            params |= {key: b for key, b in zip(("then", "else"), branches, strict=True) if b is not None}
            return Cont.to(self.task(f"{code}_branch", "branch", code, params, cont, wait=wait))
        assert wait is None, "only a send or a branch Task carries the wait after it"
        then = self.steps(step.then, (*path, "then"), cont)
        other = self.steps(step.else_, (*path, "else"), cont)
        choice_name = f"{code}_if"
        if path in self.fresh and not uses_live_data(step.if_):
            rule = choice_rule(step.if_)
        else:
            rule = {"Variable": "$.r.ok", "BooleanEquals": True}
        self.add(
            choice_name,
            {"Type": "Choice", "Choices": [{**rule, "Next": then.entry()}], "Default": other.entry()},
        )
        if "Variable" in rule and rule["Variable"] == "$.r.ok":
            check = self.condition_params(step.if_)
            return Cont.to(self.task(f"{code}_check", "check", code, check, Cont.to(choice_name)))
        return Cont.to(choice_name)

    def mailer_before(self, steps: list[Step], path: Path_, index: int) -> tuple[int, TagStep | None] | None:
        """For the wait at ``index``: the index of the send right before it (a tag riding on that
        send may sit in between, returned too) or of an ``if`` that compiles to one ``branch``
        Task; None when the wait follows anything else."""
        before, tag = index - 1, None
        if before >= 1 and isinstance(steps[before], TagStep) and isinstance(steps[before - 1], SendStep):
            tag, before = steps[before], before - 1
        if before < 0:
            return None
        found = steps[before]
        if isinstance(found, SendStep) or (
            tag is None and isinstance(found, IfStep) and self.branch_task(found, (*path, before))
        ):
            return before, tag if isinstance(tag, TagStep) else None
        return None

    def branch_task(self, step: IfStep, path: Path_) -> bool:
        """The ``if`` is one ``branch`` Task: evaluated on live data, each branch one send or empty."""
        live = not (path in self.fresh and not uses_live_data(step.if_))
        branches = (branch_mail(step.then, (*path, "then")), branch_mail(step.else_, (*path, "else")))
        return live and all(b is not False for b in branches)

    def condition_params(self, condition: Condition) -> dict[str, Any]:
        """A live condition for the step function, and the step code of each step it names
        (``steps``: only when it names one, so other machines stay as they were)."""
        params: dict[str, Any] = {"condition": condition_to_data(condition)}
        named = {ref.step for _, ref in step_references(condition)}
        if named:
            codes = {name: step_code(path) for name, (_, path, _) in step_names(self.seq.steps).items()}
            params["steps"] = {name: codes[name] for name in sorted(named)}
        return params

    def mail_params(self) -> dict[str, Any]:
        """What every mail of the sequence carries (the step's own template and subject aside)."""
        params: dict[str, Any] = {"data.$": "$.data"}
        if self.seq.transactional:
            params["transactional"] = True
        if self.seq.topic is not None:
            params["topic"] = self.seq.topic
        if self.seq.sender is not None:
            params["sender"] = self.seq.sender.model_dump(by_alias=True, exclude_none=True)
        return params

    def wait(self, code: str, seconds: int, cont: Cont) -> Cont:
        name = f"{code}_wait_{duration_label(seconds)}" if seconds else f"{code}_window"
        if not self.window:
            self.add(name, {"Type": "Wait", "Seconds": seconds, "Next": cont.entry()})
            return Cont.to(name)
        self.add(name, {"Type": "Wait", "TimestampPath": "$.r.wake", "Next": cont.entry()})
        schedule = f"{code}_schedule"
        assert self.seq.send_window is not None
        extra = {"wait": seconds, "window": self.seq.send_window.model_dump()}

        def make() -> None:
            self.task(schedule, "schedule", code, extra, Cont.to(name))

        return Cont(task_next=name, entry_name=schedule, task_extra=extra, make_entry=make)

    # ----- the machine --------------------------------------------------------------
    def compile(self) -> dict[str, Any]:
        if self.seq.on is not None:
            send = SendStep(send=self.seq.on.send, subject=self.seq.on.subject)
            entry = self.step(send, ("steps", 0), Cont(task_next=None, entry_name=""))
        else:
            entry = self.steps(self.seq.steps, ("steps",), self.end())
            if self.window and not isinstance(self.seq.steps[0], WaitStep):
                entry = self.wait("S0", 0, entry)
        start = entry.entry()
        return {
            "Comment": f"mailstep sequence {self.seq.id} (generated from its YAML file; do not edit)",
            "StartAt": start,
            "States": {name: self.states[name] for name in sorted(self.states)},
            **({"TimeoutSeconds": self.seq.timeout} if self.seq.timeout else {}),
        }


def compile_sequence(sequence: Sequence) -> dict[str, Any]:
    """ASL for one sequence; Task resources hold :data:`STEP_FUNCTION_PLACEHOLDER`."""
    return _Compiler(sequence).compile()


def definition_json(sequence: Sequence) -> str:
    """The ASL as canonical JSON text (byte-identical for the same sequence)."""
    return json.dumps(compile_sequence(sequence), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def render_definition(definition: str, step_function_arn: str) -> str:
    """Substitute the step function ARN (CDK does this with DefinitionSubstitutions)."""
    return definition.replace(STEP_FUNCTION_PLACEHOLDER, step_function_arn)
