"""Counts what a scenario costs: AWS requests per service/operation, DynamoDB capacity,
Lambda invocations and GB-seconds, Step Functions state transitions, SES sends, HTTP
API requests, with DESIGN.md section 9 prices.

Requests are counted with botocore event hooks on every client of ``shared.core.aws`` (the
product's only client factory); requests the platform makes on its own are counted by
the runtime (SQS event source polls, SES sends, HTTP API requests, Lambda invocations).

DynamoDB capacity is computed from each request's items with DynamoDB's rules (writes:
1 WRU per started KB, x2 in transactions, ConditionCheck included, +1 write per GSI the
item is projected into (x1 also for a transaction's items: DynamoDB propagates a committed
transaction to its GSIs afterwards, as ordinary index writes); reads: 1 RRU per started
4 KB strongly consistent, half eventually consistent; a BatchGetItem key as one GetItem, a
missing item at the minimum): moto's ``ConsumedCapacity`` answers are constants.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from shared.core import specs
from shared.core.aws import register_hook, unregister_hook

# DESIGN.md section 9, USD per unit.
PRICES = {
    "ses_email": 0.10 / 1000,
    "sfn_transition": 0.025 / 1000,
    "lambda_request": 0.20 / 1_000_000,
    "lambda_gb_s": 0.0000166667,
    "ddb_wru": 0.625 / 1_000_000,
    "ddb_rru": 0.125 / 1_000_000,
    "sqs_request": 0.40 / 1_000_000,
    "http_request": 1.00 / 1_000_000,
    # EventBridge Scheduler: $1.00 per million scheduled invocations after 14 million free a month
    # (https://aws.amazon.com/eventbridge/pricing/; the free tier is not counted here). Its API
    # requests (CreateSchedule, UpdateSchedule) are not billed; they are counted as requests.
    "scheduler_invocation": 1.00 / 1_000_000,
}
_GSI_KEYS = {t.local_name: [(g.partition_key, g.sort_key) for g in t.gsis] for t in specs.TABLES}


def attribute_size(value: dict[str, Any]) -> int:
    """Approximate DynamoDB size of one AttributeValue (bytes)."""
    ((kind, inner),) = value.items()
    if kind == "S":
        return len(str(inner).encode())
    if kind == "N":
        return math.ceil(len(str(inner).lstrip("-").replace(".", "")) / 2) + 1
    if kind == "B":
        return len(inner) if isinstance(inner, bytes) else len(str(inner)) * 3 // 4
    if kind in ("BOOL", "NULL"):
        return 1
    if kind in ("SS", "NS", "BS"):
        return sum(attribute_size({kind[0]: v}) for v in inner)
    if kind == "L":
        return 3 + sum(attribute_size(v) + 1 for v in inner)
    if kind == "M":
        return 3 + sum(len(k.encode()) + attribute_size(v) + 1 for k, v in inner.items())
    return 1


def item_size(item: dict[str, Any]) -> int:
    return sum(len(name.encode()) + attribute_size(value) for name, value in item.items())


def _write_units(size: int) -> int:
    return max(1, math.ceil(size / 1024))


def _gsi_writes(table: str, item: dict[str, Any]) -> int:
    return sum(1 for pk, sk in _GSI_KEYS.get(table, []) if pk in item and sk in item)


@dataclass
class Usage:
    requests: Counter[tuple[str, str]] = field(default_factory=Counter)
    wru: float = 0.0
    rru: float = 0.0

    def copy(self) -> Usage:
        return Usage(Counter(self.requests), self.wru, self.rru)


# Requests the capacity model reads (bench.capacity): DynamoDB's, and Step Functions starts.
LOGGED = frozenset({"dynamodb"})
LOGGED_OPERATIONS = frozenset({("stepfunctions", "StartExecution")})


@dataclass(frozen=True)
class Request:
    """One request as sent: who sent it (``function``: a function's execution environment, or
    ``runtime``: the CLI code and the runtime in this process), its parameters and its answer."""

    origin: str
    service: str
    operation: str
    params: dict[str, Any]
    parsed: dict[str, Any]


class Meter:
    """Install once; take :meth:`snapshot` before and after a scenario step.

    :meth:`start_log` / :meth:`take_log`: also keep the DynamoDB requests (and Step Functions
    starts) with their parameters, for the capacity model. Requests made in :meth:`quiet`
    (the bench watching a step: polling a record, a queue) on this thread are left out of
    the log.
    """

    def __init__(self) -> None:
        self.usage = Usage()
        self._lock = threading.Lock()
        self._log: list[Any] | None = None
        self._compact: Callable[[Request], Any] | None = None
        self._local = threading.local()

    def start_log(self, compact: Callable[[Request], Any] | None = None) -> None:
        """Keep each request from now on, as ``compact(request)`` when given (the capacity
        model keeps only what it reads: ``bench.capacity.compact``)."""
        with self._lock:
            self._log, self._compact = [], compact

    def take_log(self) -> list[Any]:
        with self._lock:
            log, self._log, self._compact = self._log or [], None, None
        return log

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """Requests made by this thread inside the block are counted but not logged."""
        self._local.quiet = True
        try:
            yield
        finally:
            self._local.quiet = False

    def install(self) -> None:
        register_hook("before-parameter-build", self._remember_params)
        register_hook("after-call", self._after_call)

    def uninstall(self) -> None:
        unregister_hook("before-parameter-build", self._remember_params)
        unregister_hook("after-call", self._after_call)

    @staticmethod
    def _remember_params(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["bench_params"] = dict(params)

    def _after_call(self, model: Any, context: dict[str, Any], parsed: dict[str, Any], **_: Any) -> None:
        params = context.get("bench_params", {})
        self.record(model.service_model.service_name, model.name, params, parsed, origin="runtime")

    def record(
        self,
        service: str,
        operation: str,
        params: dict[str, Any],
        parsed: dict[str, Any],
        origin: str = "function",
    ) -> None:
        """One request: in this process (botocore hooks, ``origin="runtime"``) or reported by a
        function's execution environment (``LocalRuntime.environments.on_request``)."""
        wru = rru = 0.0
        if service == "dynamodb":
            wru, rru = dynamodb_capacity(operation, params, parsed)
        logged = (service in LOGGED or (service, operation) in LOGGED_OPERATIONS) and not getattr(
            self._local, "quiet", False
        )
        entry: Any = None
        if logged and self._log is not None:
            compact = self._compact
            entry = Request(origin, service, operation, params, parsed)
            entry = compact(entry) if compact is not None else entry
        with self._lock:
            self.usage.requests[(service, operation)] += 1
            self.usage.wru += wru
            self.usage.rru += rru
            if entry is not None and self._log is not None:
                self._log.append(entry)

    def snapshot(self) -> Usage:
        with self._lock:
            return self.usage.copy()


def dynamodb_capacity(operation: str, params: dict[str, Any], parsed: dict[str, Any]) -> tuple[float, float]:
    """(WRU, RRU) of one DynamoDB request. A refused request (``parsed`` holds the ``Error``)
    is charged its write units without index writes: DynamoDB bills a failed conditional write;
    for a cancelled transaction this is an upper bound."""
    table = params.get("TableName", "")
    refused = "Error" in parsed
    if operation == "PutItem":
        item = params.get("Item", {})
        return _write_units(item_size(item)) * (1 + (0 if refused else _gsi_writes(table, item))), 0.0
    if operation in ("UpdateItem", "DeleteItem"):
        return 1.0, 0.0
    if operation == "TransactWriteItems":
        wru = 0.0
        for action in params.get("TransactItems", []):
            ((kind, body),) = action.items()
            item = body.get("Item") or body.get("Key", {})
            units = _write_units(item_size(item))
            wru += 2 * units
            if kind == "Put" and not refused:
                wru += units * _gsi_writes(body.get("TableName", ""), item)
        return wru, 0.0
    if operation == "BatchWriteItem":
        wru = 0.0
        for table_name, requests in params.get("RequestItems", {}).items():
            for request in requests:
                if "PutRequest" in request:
                    item = request["PutRequest"]["Item"]
                    wru += _write_units(item_size(item)) * (1 + _gsi_writes(table_name, item))
                else:
                    wru += 1
        return wru, 0.0
    factor = 1.0 if params.get("ConsistentRead") else 0.5
    if operation == "GetItem":
        size = item_size(parsed.get("Item", {}))
        return 0.0, factor * max(1, math.ceil(size / 4096))
    if operation in ("Query", "Scan"):
        size = sum(item_size(i) for i in parsed.get("Items", []))
        return 0.0, factor * max(1, math.ceil(size / 4096))
    if operation == "BatchGetItem":  # each key read as a GetItem would be (a missing item too)
        rru = 0.0
        for table_name, request in params.get("RequestItems", {}).items():
            per_read = 1.0 if request.get("ConsistentRead") else 0.5
            found = parsed.get("Responses", {}).get(table_name, [])
            unread = len(parsed.get("UnprocessedKeys", {}).get(table_name, {}).get("Keys", []))
            missing = len(request.get("Keys", [])) - unread - len(found)
            rru += per_read * (sum(max(1, math.ceil(item_size(i) / 4096)) for i in found) + missing)
        return 0.0, rru
    if operation == "TransactGetItems":
        return 0.0, 2.0 * len(params.get("TransactItems", []))
    return 0.0, 0.0


@dataclass
class Measurement:
    """Everything one scenario step consumed, and what it would cost on AWS."""

    label: str
    units: int  # events or emails the step handled
    unit_name: str
    requests: Counter[tuple[str, str]]
    wru: float
    rru: float
    lambda_invocations: int
    lambda_gb_s: float  # the CPU work at each function's vCPU share (bench.harness)
    sfn_transitions: int
    ses_sends: int
    http_requests: int
    sqs_platform_requests: int  # event source polls and deletes made by the Lambda service
    lambda_gb_s_wall: float = 0.0  # local wall time x memory: an upper bound
    scheduler_invocations: int = 0  # one-time schedules that fired (a callback Task's resume)

    def sqs_requests(self) -> int:
        return (
            sum(n for (service, _), n in self.requests.items() if service == "sqs")
            + self.sqs_platform_requests
        )

    def costs(self) -> dict[str, float]:
        return {
            "SES": self.ses_sends * PRICES["ses_email"],
            "Step Functions": self.sfn_transitions * PRICES["sfn_transition"],
            "Lambda": self.lambda_invocations * PRICES["lambda_request"]
            + self.lambda_gb_s * PRICES["lambda_gb_s"],
            "DynamoDB": self.wru * PRICES["ddb_wru"] + self.rru * PRICES["ddb_rru"],
            "SQS": self.sqs_requests() * PRICES["sqs_request"],
            "HTTP API": self.http_requests * PRICES["http_request"],
            "EventBridge Scheduler": self.scheduler_invocations * PRICES["scheduler_invocation"],
        }

    def cost_per_1000(self) -> float:
        return sum(self.costs().values()) / self.units * 1000

    def minus(self, other: Measurement, label: str, unit_name: str | None = None) -> Measurement:
        """What this step consumed beyond ``other`` (the same work without one part): that
        part's cost, per this step's units."""
        requests = Counter(self.requests)
        requests.subtract(other.requests)
        return replace(
            self,
            label=label,
            unit_name=unit_name or self.unit_name,
            requests=+requests,
            wru=self.wru - other.wru,
            rru=self.rru - other.rru,
            lambda_invocations=self.lambda_invocations - other.lambda_invocations,
            lambda_gb_s=max(0.0, self.lambda_gb_s - other.lambda_gb_s),
            lambda_gb_s_wall=max(0.0, self.lambda_gb_s_wall - other.lambda_gb_s_wall),
            sfn_transitions=self.sfn_transitions - other.sfn_transitions,
            ses_sends=self.ses_sends - other.ses_sends,
            http_requests=self.http_requests - other.http_requests,
            sqs_platform_requests=self.sqs_platform_requests - other.sqs_platform_requests,
            scheduler_invocations=self.scheduler_invocations - other.scheduler_invocations,
        )
