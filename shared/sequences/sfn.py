"""Step Functions adapter: the only module that calls the ``stepfunctions`` API.

AWS errors become plain results or domain errors here: a start that finds its execution
name taken reports it, a stop of an execution that is gone is not an error.

Starts under the regional StartExecution quota (a token bucket per account and region:
1,300 tokens refilled at 300/s in us-east-1, us-west-2 and eu-west-1, 800 at 150/s
elsewhere; docs/sequences.md, "Starts under the quota"):

- every StartExecution (and the DescribeExecution a start may need) that comes back
  throttled is retried with exponential backoff and full jitter until the policy's patience
  runs out. botocore's standard retry mode (``shared.core.aws``) already retries each call up
  to 5 attempts; this loop is what remains when its retries, or its client-wide retry quota,
  are spent;
- a :class:`StartPolicy` with ``rate_per_s`` paces this process's StartExecution calls with a
  token bucket of its own (the CSV import), so a bulk start stays under the quota instead of
  living on retries;
- a start still throttled after the patience, or refused by the open-executions quota
  (``ExecutionLimitExceeded``), raises :class:`QuotaExceeded`: the caller undoes its claim and
  reports it (a 503 to retry, an import row to re-run). Retries are safe because the execution
  name is deterministic: a repeated start finds ``ExecutionAlreadyExists``.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from botocore.exceptions import ClientError

from shared.core.aws import client as aws_client
from shared.core.errors import QuotaExceeded
from shared.core.observability import logger

if TYPE_CHECKING:
    from mypy_boto3_stepfunctions import SFNClient
    from mypy_boto3_stepfunctions.literals import ExecutionStatusType
    from mypy_boto3_stepfunctions.type_defs import (
        ExecutionListItemTypeDef,
        HistoryEventTypeDef,
        ListExecutionsInputTypeDef,
    )


RUNNING = "RUNNING"
EXECUTION_NAME_MAX = 80
# The error codes of a throttled request (botocore's standard retry mode treats the same as throttling).
THROTTLING_CODES = frozenset(
    {"ThrottlingException", "Throttling", "TooManyRequestsException", "RequestLimitExceeded"}
)
EXECUTION_LIMIT_CODE = "ExecutionLimitExceeded"  # the open-executions quota is reached
# The default open-executions quota per account and region (Standard workflows).
OPEN_EXECUTIONS_QUOTA = 1_000_000

T = TypeVar("T")


class NextToken(TypedDict, total=False):
    nextToken: str


def next_token(token: str | None) -> NextToken:
    """The ``nextToken`` argument of a paginated Step Functions call: none for the first page."""
    return {"nextToken": token} if token else {}


def execution_arn(state_machine_arn: str, name: str) -> str:
    """The ARN StartExecution will give ``name``: predictable, so the pair can be written first."""
    head, _, machine = state_machine_arn.rpartition(":stateMachine:")
    return f"{head}:execution:{machine}:{name}"


def state_machine_of(execution: str) -> str:
    head, _, rest = execution.rpartition(":execution:")
    machine = rest.rsplit(":", 1)[0]
    return f"{head}:stateMachine:{machine}"


@dataclass(frozen=True)
class StartResult:
    execution_arn: str
    created: bool  # False: an execution with this name existed already
    status: str  # RUNNING, or the status of the existing execution


@dataclass(frozen=True)
class StartPolicy:
    """How starts meet the StartExecution quota.

    ``rate_per_s``: pace this process's StartExecution calls to at most this many a second
    (None: no pacing; a Lambda starts a handful per request and many run at once, so a
    per-process pace means nothing there). ``patience_s``: keep retrying a throttled call
    until this long after the first attempt (a Lambda answering an HTTP request has 29 s in
    all). Delays grow from ``base_delay_s`` to ``max_delay_s`` (doubling, full jitter)."""

    rate_per_s: float | None = None
    patience_s: float = 5.0
    base_delay_s: float = 0.2
    max_delay_s: float = 4.0

    def delay(self, attempt: int) -> float:
        """The pause before retry ``attempt`` (0-based): uniform in [0, min(max, base * 2^attempt)]."""
        return random.uniform(0.0, min(self.max_delay_s, self.base_delay_s * 2**attempt))


class Pacer:
    """A token bucket on this process's calls: on average at most ``rate_per_s`` a second, at
    most ``burst`` at once. Thread-safe; a caller waits for its own slot outside the lock."""

    def __init__(
        self,
        rate_per_s: float,
        burst: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rate_per_s <= 0:
            raise ValueError("rate_per_s must be positive")
        self.rate = rate_per_s
        self.burst = burst if burst is not None else max(1.0, rate_per_s / 10)
        self._clock = clock
        self._sleep = sleep
        self._tokens = self.burst
        self._at = clock()
        self._lock = threading.Lock()

    def acquire(self) -> float:
        """Take one token, waiting for it when the bucket is empty; returns the wait in seconds."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
            self._at = now
            self._tokens -= 1  # below zero: the slot is reserved, its caller waits for the refill
            wait = 0.0 if self._tokens >= 0 else -self._tokens / self.rate
        if wait > 0:
            self._sleep(wait)
        return wait


class StepFunctions:
    def __init__(
        self,
        client: SFNClient | None = None,
        starts: StartPolicy | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._client = client
        self.starts = starts or StartPolicy()
        self._pacer = Pacer(self.starts.rate_per_s, sleep=sleep) if self.starts.rate_per_s else None
        self._sleep = sleep

    @property
    def client(self) -> SFNClient:
        return self._client or aws_client("stepfunctions")

    def with_starts(self, starts: StartPolicy) -> StepFunctions:
        """The same client under another start policy (the CSV import paces its starts)."""
        return StepFunctions(self._client, starts, sleep=self._sleep)

    def start(self, state_machine_arn: str, name: str, payload: dict[str, Any]) -> StartResult:
        """Start ``name``; a name already used (a retried start) is reported, never raised.

        Throttled: retried (paced, backoff with jitter) within the policy's patience, then
        :class:`QuotaExceeded`; the open-executions quota reached: :class:`QuotaExceeded` at once."""
        if len(name) > EXECUTION_NAME_MAX:
            raise ValueError("execution names are at most 80 characters")
        body = json.dumps(payload, separators=(",", ":"), sort_keys=True, ensure_ascii=False)

        def call() -> str:
            if self._pacer is not None:
                self._pacer.acquire()
            return self.client.start_execution(stateMachineArn=state_machine_arn, name=name, input=body)[
                "executionArn"
            ]

        try:
            arn = self._patiently("StartExecution", call)
        except ClientError as exc:
            code = exc.response["Error"]["Code"]
            if code == EXECUTION_LIMIT_CODE:
                logger.warning("open-executions quota reached: execution not started", execution=name)
                raise QuotaExceeded(
                    "the account's open Step Functions executions reached their quota"
                    " (ExecutionLimitExceeded): nothing was started; see mailstep doctor"
                ) from exc
            if code != "ExecutionAlreadyExists":
                raise
            arn = execution_arn(state_machine_arn, name)
            return StartResult(arn, created=False, status=self.status(arn) or RUNNING)
        return StartResult(arn, created=True, status=RUNNING)

    def _patiently(self, operation: str, call: Callable[[], T]) -> T:
        """``call()``, retried while it is throttled and the policy's patience lasts."""
        policy = self.starts
        give_up_at = time.monotonic() + policy.patience_s
        attempt = 0
        while True:
            try:
                return call()
            except ClientError as exc:
                if exc.response["Error"]["Code"] not in THROTTLING_CODES:
                    raise
                delay = policy.delay(attempt)
                attempt += 1
                if time.monotonic() + delay > give_up_at:
                    logger.warning("throttled past the retries", operation=operation, attempts=attempt)
                    raise QuotaExceeded(
                        f"Step Functions {operation} stayed throttled after {attempt} attempts: retry later"
                    ) from exc
                logger.info(
                    "throttled: retrying", operation=operation, attempt=attempt, delay_s=round(delay, 3)
                )
                self._sleep(delay)

    def stop(self, execution: str, *, error: str, cause: str) -> bool:
        """Stop a running execution; False when it does not exist or already ended."""
        try:
            self.client.stop_execution(executionArn=execution, error=error[:256], cause=cause[:32768])
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("ExecutionDoesNotExist", "ValidationException"):
                return False
            raise
        return True

    def status(self, execution: str) -> str | None:
        """RUNNING / SUCCEEDED / FAILED / TIMED_OUT / ABORTED, or None when there is no such execution."""
        try:
            return str(
                self._patiently(
                    "DescribeExecution", lambda: self.client.describe_execution(executionArn=execution)
                )["status"]
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ExecutionDoesNotExist":
                return None
            raise

    def describe(self, execution: str) -> dict[str, Any]:
        return dict(self.client.describe_execution(executionArn=execution))

    def history(self, execution: str) -> list[HistoryEventTypeDef]:
        events: list[HistoryEventTypeDef] = []
        token: str | None = None
        while True:
            page = self.client.get_execution_history(
                executionArn=execution, maxResults=1000, **next_token(token)
            )
            events += page["events"]
            token = page.get("nextToken")
            if not token:
                return events

    def list_executions(
        self, state_machine_arn: str, status: ExecutionStatusType | None = None
    ) -> list[ExecutionListItemTypeDef]:
        found: list[ExecutionListItemTypeDef] = []
        request: ListExecutionsInputTypeDef = {"stateMachineArn": state_machine_arn}
        if status:
            request["statusFilter"] = status
        while True:
            page = self.client.list_executions(**request)
            found += page["executions"]
            token = page.get("nextToken")
            if not token:
                return found
            request["nextToken"] = token

    def count_running(self, state_machine_arn: str, at_most: int) -> tuple[int, bool]:
        """RUNNING executions of a state machine, counted page by page (ListExecutions, up to
        1,000 a page): (count, complete). Counting stops once ``at_most`` are counted, so the
        count is then a lower bound: a million open executions are a thousand pages of a call
        whose quota refills at 2-5 a second."""
        count = 0
        request: ListExecutionsInputTypeDef = {
            "stateMachineArn": state_machine_arn,
            "statusFilter": "RUNNING",
            "maxResults": max(1, min(1000, at_most)),
        }
        while True:
            page = self.client.list_executions(**request)
            count += len(page["executions"])
            token = page.get("nextToken")
            if not token:
                return count, True
            if count >= at_most:
                return count, False
            request["nextToken"] = token

    def put_state_machine(self, name: str, definition: str, role_arn: str) -> str:
        """Create or update a STANDARD state machine (local runtime and tests; CDK in the cloud)."""
        try:
            return str(
                self.client.create_state_machine(name=name, definition=definition, roleArn=role_arn)[
                    "stateMachineArn"
                ]
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "StateMachineAlreadyExists":
                raise
        arn = next(
            m["stateMachineArn"]
            for m in self.client.list_state_machines()["stateMachines"]
            if m["name"] == name
        )
        self.client.update_state_machine(stateMachineArn=arn, definition=definition, roleArn=role_arn)
        return str(arn)


def state_transitions(history: list[dict[str, Any]]) -> int:
    """Billable state transitions in an execution history: every state entered (retries of a
    Task count as extra transitions in AWS billing; they appear as extra scheduled invocations:
    ``LambdaFunctionScheduled`` for a Lambda Task, ``TaskScheduled`` for a callback Task)."""
    entered = sum(1 for e in history if e["type"].endswith("StateEntered"))
    scheduled = sum(1 for e in history if e["type"] in ("LambdaFunctionScheduled", "TaskScheduled"))
    retries = scheduled - sum(1 for e in history if e["type"] == "TaskStateEntered")
    return entered + max(0, retries)
