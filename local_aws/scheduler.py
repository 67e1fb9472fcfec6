"""EventBridge Scheduler's one-time schedules, fired on the virtual clock.

moto's Scheduler stores schedules and never runs them. mailstep creates one kind: a one-time
schedule ``at(<wake>)`` whose universal target is Step Functions' SendTaskSuccess
(``arn:aws:scheduler:::aws-sdk:sfn:sendTaskSuccess``, Input ``{"TaskToken", "Output"}``) and which
deletes itself after it ran (``ActionAfterCompletion: DELETE``): it resumes a sequence's callback
Task (docs/sequences.md). :class:`OneTimeSchedules` is told of every schedule moto creates or
updates (``local_aws.hooks``) and, for each:

- waits until its ``at`` time on the virtual clock (:class:`local_aws.clock.VirtualClock`):
  instant in tests, accelerated in ``mailstep dev``, held while the clock is paused;
- an update (a retried Task: a new token, the same name) replaces the pending firing, and a
  deleted schedule never fires;
- fires as EventBridge Scheduler does: with the schedule's role, whose policy the runtime checks
  (``states:SendTaskSuccess`` on the state machine of the token's execution), it calls
  SendTaskSuccess through the emulated endpoint, the path every Lambda's request takes;
- then deletes the schedule. A token that is not waiting any more (a stopped execution, a
  callback that came twice) is answered with an error by Step Functions and changes nothing.

Only that target is emulated; a schedule with any other expression or target is logged and left
alone (docs/local-runtime.md).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from botocore.exceptions import ClientError

from shared.core.aws import ClientFactory
from shared.core.observability import logger

SEND_TASK_SUCCESS = "arn:aws:scheduler:::aws-sdk:sfn:sendTaskSuccess"
_AT = re.compile(r"^at\((\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})\)$")
# (role ARN, IAM action, resource) -> allowed: the schedule role's policy decides (and records)
Authorize = Callable[[str, str, str], bool]
# task token -> the ARN of the state machine whose execution waits on it, or None
MachineOf = Callable[[str], str | None]
# (group, name): the schedule deleted by the service itself (ActionAfterCompletion), not a request
Delete = Callable[[str, str], None]


class Clock(Protocol):
    """What a firing waits on: :class:`local_aws.clock.VirtualClock` (or a test's recorder)."""

    def wait(
        self,
        seconds: float,
        interrupt: threading.Event | None = None,
        running: Callable[[], bool] | None = None,
    ) -> None: ...


def at_time(expression: str) -> datetime | None:
    """The moment of an ``at(yyyy-mm-ddThh:mm:ss)`` expression (UTC), None for any other."""
    found = _AT.match(expression)
    return datetime.fromisoformat(found.group(1)).replace(tzinfo=UTC) if found else None


@dataclass(frozen=True)
class Firing:
    """What one schedule did when it fired (kept for the status and the tests)."""

    name: str
    group: str
    outcome: str  # "resumed", "refused:<error code>", "denied"


class OneTimeSchedules:
    def __init__(
        self, clock: Clock, aws: ClientFactory, authorize: Authorize, machine_of: MachineOf, delete: Delete
    ) -> None:
        self.clock = clock
        self.aws = aws  # the emulated endpoint's clients
        self.authorize = authorize
        self.machine_of = machine_of
        self.delete = delete
        self.fired: list[Firing] = []
        self._generation: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()

    def stop(self) -> None:
        self._stopped.set()

    def armed(self, group: str, name: str, expression: str, target: dict[str, Any]) -> None:
        """A schedule was created or updated: (re)arm its firing."""
        moment = at_time(expression)
        if moment is None or target.get("Arn") != SEND_TASK_SUCCESS:
            logger.warning("schedule not emulated", group=group, expression=expression[:60])
            return
        key = (group, name)
        with self._lock:
            generation = self._generation.get(key, 0) + 1
            self._generation[key] = generation
        thread = threading.Thread(
            target=self._fire_at,
            args=(key, generation, moment, dict(target)),
            name=f"schedule-{name[:20]}",
            daemon=True,
        )
        thread.start()

    def forget(self, group: str, name: str) -> None:
        """A schedule was deleted: it never fires."""
        with self._lock:
            self._generation[(group, name)] = self._generation.get((group, name), 0) + 1

    def _current(self, key: tuple[str, str], generation: int) -> bool:
        with self._lock:
            return self._generation.get(key) == generation and not self._stopped.is_set()

    def _fire_at(
        self, key: tuple[str, str], generation: int, moment: datetime, target: dict[str, Any]
    ) -> None:
        seconds = max(0.0, (moment - datetime.now(UTC)).total_seconds())
        self.clock.wait(seconds, running=lambda: self._current(key, generation))
        if not self._current(key, generation):
            return  # replaced by an update, deleted, or the runtime stopped
        try:
            outcome = self._invoke(target)
        except Exception:  # the endpoint went away (stopping)
            logger.exception("schedule target failed", schedule=key[1])
            return
        with self._lock:
            if self._generation.get(key) != generation:
                return  # updated while it fired: the new firing stands
            self._generation[key] = generation + 1
        group, name = key
        self.fired.append(Firing(name, group, outcome))
        try:
            self.delete(group, name)  # ActionAfterCompletion: DELETE
        except Exception:  # deleted meanwhile
            logger.warning("schedule already gone", schedule=name)

    def _invoke(self, target: dict[str, Any]) -> str:
        """SendTaskSuccess with the schedule's role, as Scheduler's universal target calls it."""
        request = json.loads(target.get("Input") or "{}")
        token, output = str(request.get("TaskToken", "")), str(request.get("Output", "{}"))
        machine = self.machine_of(token) or "*"
        if not self.authorize(str(target.get("RoleArn", "")), "states:SendTaskSuccess", machine):
            logger.warning("schedule target denied by its role", resource=machine)
            return "denied"
        try:
            self.aws.client("stepfunctions").send_task_success(taskToken=token, output=output)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            logger.info("schedule target refused", error=code)  # a dead token: nothing changes
            return f"refused:{code}"
        return "resumed"
