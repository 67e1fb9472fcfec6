"""EventBridge, for the rules of the template that the local runtime can deliver.

In AWS, Step Functions sends a "Step Functions Execution Status Change" event to the default
event bus whenever an execution changes status, and every rule whose pattern matches sends
it to its targets. mailstep's stack has one such rule (``stacks/constructs/sequences.py``):
FAILED, TIMED_OUT and ABORTED executions of its sequence machines go to the cleanup function.

:class:`ExecutionStatusRules` reads the ``AWS::Events::Rule`` resources of the template whose
pattern names ``aws.states`` and whose targets are Lambda functions, watches the emulated Step
Functions for executions that reached a terminal status, builds the event EventBridge would
deliver, and invokes each matching target like EventBridge does (asynchronously, retried on a
function error). :class:`ScheduledRules` fires the rules with a ``ScheduleExpression`` (the
daily list-hygiene run) on the runtime's calendar. Other rules and event sources are not
delivered.

EventBridge hands the event to Lambda, which accepts it (an asynchronous invocation); a function
error is then Lambda's to retry (the function's ``AWS::Lambda::EventInvokeConfig``
``MaximumRetryAttempts``, 2 by default), and when the retries are spent Lambda sends an invocation
record holding the event (``requestPayload``) to the function's on-failure destination
(:func:`invoke_async`; Lambda Developer Guide, "Retaining records of asynchronous invocations").
The rule target's dead-letter queue receives only events EventBridge itself could not deliver
(the function gone, Lambda refusing the invocation: EventBridge User Guide, "Using dead-letter
queues to process undelivered events"), which the local runtime never sees: it is read from the
template, not emulated.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from local_aws.template import LocalTemplate
from shared.core.aws import ClientFactory
from shared.core.observability import logger

SOURCE = "aws.states"
DETAIL_TYPE = "Step Functions Execution Status Change"
TERMINAL = ("SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED")
POLL_S = 0.5
ATTEMPTS = 3  # Lambda retries a failed asynchronous invocation twice

Invoke = Callable[[str, dict[str, Any]], bool]  # (function name, event) -> errored
# (function name, destination ARN, invocation record): Lambda sends an on-failure record
SendFailure = Callable[[str, str, dict[str, Any]], None]


@dataclass(frozen=True)
class AsyncTarget:
    """How Lambda treats an asynchronous invocation of one function (its EventInvokeConfig)."""

    attempts: int = ATTEMPTS
    on_failure: str | None = None  # the on-failure destination's ARN


def async_failure_record(function_arn: str, event: dict[str, Any], attempts: int) -> dict[str, Any]:
    """The invocation record Lambda sends an asynchronous invocation's on-failure destination when
    its retries are spent: the event itself is in ``requestPayload``."""
    return {
        "version": "1.0",
        "timestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
        "requestContext": {
            "requestId": str(uuid.uuid4()),
            "functionArn": f"{function_arn}:$LATEST",
            "condition": "RetriesExhausted",
            "approximateInvokeCount": attempts,
        },
        "requestPayload": event,
        "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
    }


def invoke_async(
    invoke: Invoke,
    function: str,
    event: dict[str, Any],
    target: AsyncTarget,
    *,
    function_arn: str = "",
    send_failure: SendFailure | None = None,
) -> bool:
    """Invoke ``function`` as Lambda runs an asynchronous invocation: retried on a function error
    ``target.attempts`` times in all, then its record sent to the on-failure destination. True
    when every attempt errored."""
    for _ in range(max(1, target.attempts)):
        if not invoke(function, json.loads(json.dumps(event))):
            return False
    if target.on_failure and send_failure is not None:
        send_failure(function, target.on_failure, async_failure_record(function_arn, event, target.attempts))
    return True


@dataclass(frozen=True)
class LambdaTargets:
    """How EventBridge invokes its rules' Lambda targets in one account and region: asynchronously,
    each function with its retries and on-failure destination (:func:`async_targets`)."""

    invoke: Invoke
    region: str
    account: str
    settings: dict[str, AsyncTarget] = field(default_factory=dict)
    send_failure: SendFailure | None = None

    def deliver(self, function: str, event: dict[str, Any]) -> bool:
        """Invoke ``function`` with ``event`` (:func:`invoke_async`); True when every attempt errored."""
        return invoke_async(
            self.invoke,
            function,
            event,
            self.settings.get(function, AsyncTarget()),
            function_arn=f"arn:aws:lambda:{self.region}:{self.account}:function:{function}",
            send_failure=self.send_failure,
        )


def async_targets(template: LocalTemplate) -> dict[str, AsyncTarget]:
    """Physical function name -> its asynchronous invocation settings, from the template."""
    found = {}
    for logical_id, config in template.async_invoke_configs().items():
        name = template.physical[logical_id]["Ref"]
        found[name] = AsyncTarget(attempts=config.retry_attempts + 1, on_failure=config.on_failure)
    return found


Statuses = Callable[[], Iterable[tuple[str, str]]]  # -> (execution ARN, status) of every execution


@dataclass(frozen=True)
class Rule:
    logical_id: str
    pattern: dict[str, Any]
    functions: tuple[str, ...]  # physical names of the Lambda targets


def matches(pattern: Any, value: Any) -> bool:
    """EventBridge pattern matching for the forms the stack uses: lists of exact values or
    ``{"prefix": ...}``, nested objects; a key the event lacks does not match."""
    if isinstance(pattern, dict):
        if not isinstance(value, dict):
            return False
        return all(key in value and matches(inner, value[key]) for key, inner in pattern.items())
    candidates = value if isinstance(value, list) else [value]
    for allowed in pattern:
        for candidate in candidates:
            if isinstance(allowed, dict):
                if (
                    "prefix" in allowed
                    and isinstance(candidate, str)
                    and candidate.startswith(allowed["prefix"])
                ):
                    return True
            elif allowed == candidate:
                return True
    return False


def _enabled_rules(template: LocalTemplate) -> Iterator[tuple[str, dict[str, Any], tuple[str, ...]]]:
    """The template's enabled ``AWS::Events::Rule`` resources: each one's logical id, properties and
    the Lambda functions (physical names) among its targets."""
    functions = {
        template.physical[logical_id]["Arn"]: template.physical[logical_id]["Ref"]
        for logical_id in template.of_type("AWS::Lambda::Function")
    }
    for logical_id, resource in template.of_type("AWS::Events::Rule").items():
        properties = resource["Properties"]
        if properties.get("State", "ENABLED") != "ENABLED":
            continue
        targets = [str(template.resolve(t["Arn"])) for t in properties.get("Targets", [])]
        yield logical_id, properties, tuple(functions[a] for a in targets if a in functions)


def rules_of(template: LocalTemplate) -> list[Rule]:
    """The template's enabled rules on ``aws.states`` events with Lambda targets."""
    found = []
    for logical_id, properties, functions in _enabled_rules(template):
        pattern = template.resolve(properties.get("EventPattern") or {})
        if SOURCE in pattern.get("source", []):
            found.append(Rule(logical_id, pattern, functions))
    return found


def _millis(value: Any) -> int | None:
    return int(value.timestamp() * 1000) if isinstance(value, datetime) else None


class _Watcher:
    """A daemon thread that calls ``tick`` every ``interval`` seconds until :meth:`stop` (a
    failing tick is logged: the endpoint may be going away)."""

    def __init__(self, name: str, interval: float, tick: Callable[[], Any]) -> None:
        self._interval = interval
        self._tick = tick
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._tick()
            except Exception:  # the endpoint went away (stopping)
                logger.exception("eventbridge watcher failed", watcher=self._thread.name)


class ExecutionStatusRules:
    """Delivers execution status changes to the rules' Lambda targets (one watcher thread)."""

    def __init__(
        self,
        rules: list[Rule],
        targets: LambdaTargets,
        statuses: Statuses,
        aws: ClientFactory | None = None,
    ) -> None:
        self.rules = rules
        self.targets = targets
        self.statuses = statuses  # read in process: listing through the API costs the emulator
        self.aws = aws or ClientFactory()  # the emulated endpoint's clients (the local runtime's)
        self.delivered = 0
        self._seen: set[str] = set()
        self._watcher = _Watcher("eventbridge-states", POLL_S, self.poll)

    def start(self) -> None:
        if self.rules:
            self._watcher.start()

    def stop(self) -> None:
        self._watcher.stop()

    def poll(self) -> int:
        """Deliver every execution that reached a terminal status since the last poll."""
        ended = [arn for arn, status in self.statuses() if status in TERMINAL and arn not in self._seen]
        delivered = 0
        for arn in ended:
            self._seen.add(arn)
            delivered += self._deliver(self.aws.client("stepfunctions").describe_execution(executionArn=arn))
        self.delivered += delivered
        return delivered

    def event(self, execution: dict[str, Any]) -> dict[str, Any]:
        """The event Step Functions puts on the default bus for ``execution``."""
        return {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": DETAIL_TYPE,
            "source": SOURCE,
            "account": self.targets.account,
            "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": self.targets.region,
            "resources": [execution["executionArn"]],
            "detail": {
                "executionArn": execution["executionArn"],
                "stateMachineArn": execution["stateMachineArn"],
                "name": execution.get("name"),
                "status": execution["status"],
                "startDate": _millis(execution.get("startDate")),
                "stopDate": _millis(execution.get("stopDate")),
                "input": execution.get("input"),
                "output": execution.get("output"),
                "inputDetails": {"included": True},
                "error": execution.get("error"),
                "cause": execution.get("cause"),
            },
        }

    def _deliver(self, execution: dict[str, Any]) -> int:
        event = self.event(execution)
        sent = 0
        for rule in self.rules:
            if not matches(rule.pattern, event):
                continue
            for function in rule.functions:
                self.targets.deliver(function, event)
                sent += 1
        return sent


# ----- scheduled rules --------------------------------------------------------------------------
# EventBridge runs a rule with a ScheduleExpression at each time its cron (UTC) or rate names and
# invokes the targets with a "Scheduled Event" whose ``time`` is that scheduled time (AWS docs:
# "Creating an Amazon EventBridge rule that runs on a schedule", and the Scheduled Event example
# in "Events from AWS services"). Locally the times come from the runtime's calendar: the wall
# clock while it runs, and every day ``mailstep local advance`` passes. Only the cron forms
# ``cron(M H * * ? *)`` (daily) and ``rate(N minute|minutes|hour|hours|day|days)`` are read.
SCHEDULED = "Scheduled Event"
SCHEDULE_POLL_S = 30.0
_CRON = re.compile(r"^cron\((\d{1,2}) (\d{1,2}) \* \* \? \*\)$")
_RATE = re.compile(r"^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$")
_UNITS = {"minute": 60, "hour": 3600, "day": 86400}


@dataclass(frozen=True)
class ScheduledRule:
    logical_id: str
    arn: str
    expression: str  # the ScheduleExpression: cron(...) or rate(...)
    functions: tuple[str, ...]  # the Lambda targets' function names

    def times(self, after: datetime, until: datetime) -> list[datetime]:
        """The scheduled times in ``(after, until]``, oldest first."""
        cron = _CRON.match(self.expression)
        if cron:
            minute, hour = int(cron.group(1)), int(cron.group(2))
            first = after.replace(hour=hour, minute=minute, second=0, microsecond=0)
            if first <= after:
                first += timedelta(days=1)
            found = []
            while first <= until:
                found.append(first)
                first += timedelta(days=1)
            return found
        rate = _RATE.match(self.expression)
        if rate:
            step = timedelta(seconds=int(rate.group(1)) * _UNITS[rate.group(2).rstrip("s")])
            found, moment = [], after + step
            while moment <= until:
                found.append(moment)
                moment += step
            return found
        raise ValueError(f"schedule expression not emulated: {self.expression}")


def scheduled_rules_of(template: LocalTemplate) -> list[ScheduledRule]:
    """The template's enabled rules with a ScheduleExpression and Lambda targets."""
    found = []
    for logical_id, properties, functions in _enabled_rules(template):
        expression = properties.get("ScheduleExpression")
        if expression:
            arn = f"arn:aws:events:{template.region}:{template.account}:rule/{logical_id}"
            found.append(ScheduledRule(logical_id, arn, str(expression), functions))
    return found


class ScheduledRules:
    """Fires the scheduled rules on the runtime's calendar: a watcher thread for the wall clock,
    and :meth:`advance` for the days ``mailstep local advance`` passes (each scheduled time in
    order, its targets invoked one after another, a function error retried like EventBridge's
    asynchronous invocation)."""

    def __init__(
        self,
        rules: list[ScheduledRule],
        targets: LambdaTargets,
        calendar: Callable[[], datetime],
    ) -> None:
        self.rules = rules
        self.targets = targets
        self.calendar = calendar
        self.delivered = 0
        self._checked = calendar()
        self._lock = threading.Lock()
        self._watcher = _Watcher(
            "eventbridge-schedules", SCHEDULE_POLL_S, lambda: self.fire_until(self.calendar())
        )

    def start(self) -> None:
        if self.rules:
            self._watcher.start()

    def stop(self) -> None:
        self._watcher.stop()

    def fire_until(self, until: datetime) -> list[dict[str, Any]]:
        """Deliver every scheduled time in (last checked, ``until``]; each delivery's
        (rule, time, function, errored)."""
        with self._lock:
            after, self._checked = self._checked, max(self._checked, until)
            due = sorted(
                ((moment, rule) for rule in self.rules for moment in rule.times(after, until)),
                key=lambda found: found[0],
            )
            return [self._deliver(rule, moment) for moment, rule in due]

    def event(self, rule: ScheduledRule, moment: datetime) -> dict[str, Any]:
        """The Scheduled Event EventBridge sends for ``rule`` at ``moment``."""
        return {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": SCHEDULED,
            "source": "aws.events",
            "account": self.targets.account,
            "time": moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": self.targets.region,
            "resources": [rule.arn],
            "detail": {},
        }

    def _deliver(self, rule: ScheduledRule, moment: datetime) -> dict[str, Any]:
        event = self.event(rule, moment)
        errored = False
        for function in rule.functions:
            errored = self.targets.deliver(function, event)
            self.delivered += 1
        return {
            "rule": rule.logical_id,
            "time": event["time"],
            "functions": list(rule.functions),
            "errored": errored,
        }
