"""The capacity model: from the requests a scenario made, what one partition key, one item and
one function take per mail, and the rate (mails per second) at which the first published limit
is reached. Pure functions of the recorded requests; ``bench.capacity_runs`` runs the scenarios.

- **Partition keys.** Every write (PutItem, UpdateItem, DeleteItem, BatchWriteItem, each item of
  TransactWriteItems, ConditionCheck included) lands on the partition key of its item, and a
  written item that has an index's key attributes also lands on that index's partition key.
  Write units as DynamoDB charges them (``bench.meter``): 1 WCU per started KB, x2 in a
  transaction, an index write x1; UpdateItem and DeleteItem 1 WCU (the stored item's size is
  not in the request). Reads likewise: 1 RCU per started 4 KB strongly consistent, half
  eventually consistent, TransactGetItems x2; a Scan reads every partition and is not counted
  on a key. The hottest key is the largest sum over one actual key value, divided by the mails.
- **Transactions per item.** How many TransactWriteItems requests named the same item
  (table, PK, SK), the largest count divided by the mails: transactions on one item conflict.
- **Tables.** The write and read units per mail of each table and index, all keys together: a
  table serves at once a linear mix of 4,000 WRU and 12,000 RRU per second when new (or its warm
  throughput), and a throttled index throttles its table's writes.
- **Ceiling.** Each limit (:data:`LIMITS`, one sourced table; :class:`Quotas` for a Region, an
  account and the tables) divided by what one mail takes of it; the smallest of all wins.

Everything here is pure (the limits, :func:`ceilings`, :func:`result`), so unit tests build
:class:`Inputs` by hand; ``bench.capacity_runs`` measures them on the local runtime.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from bench.meter import Request, item_size
from shared.core import specs
from stacks.warm import NEW_TABLE_RRU, NEW_TABLE_WRU, TABLE_QUOTA_RU, warm_throughput

# ----- published limits: ONE sourced table ---------------------------------------------------------
# docs/bench.md "Limits used, and where they come from" is this table (``limits_markdown``; a unit
# test keeps them equal). Where AWS documents no number, the source says so and ``note`` states
# the assumption.
DDB_GUIDE = "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide"
SFN_QUOTAS = "https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html"
LAMBDA_QUOTAS = "https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html"
SCHEDULER_QUOTAS = "https://docs.aws.amazon.com/scheduler/latest/UserGuide/scheduler-quotas.html"


@dataclass(frozen=True)
class Limit:
    """One number the model takes from AWS (or assumes), with where it comes from."""

    name: str
    value: float
    what: str
    source: str
    note: str = ""


ON_DEMAND_INITIAL = f"{DDB_GUIDE}/on-demand-capacity-mode.html#on-demand-capacity-mode-initial"
LIMITS: dict[str, Limit] = {
    limit.name: limit
    for limit in (
        Limit("partition_wcu", 1000,
              "DynamoDB write units/s on one partition (a key never spans partitions)",
              f"{DDB_GUIDE}/bp-partition-key-design.html"),
        Limit("partition_rcu", 3000, "DynamoDB read units/s on one partition",
              f"{DDB_GUIDE}/bp-partition-key-design.html"),
        Limit("new_table_wru", NEW_TABLE_WRU,
              "DynamoDB on demand: write request units/s a new table serves at once (or the reads "
              "below, or a linear mix of both); then up to double its previous peak within 30 minutes",
              ON_DEMAND_INITIAL),
        Limit("new_table_rru", NEW_TABLE_RRU,
              "DynamoDB on demand: read request units/s a new table serves at once", ON_DEMAND_INITIAL),
        Limit("new_index_wru", NEW_TABLE_WRU,
              "DynamoDB: write units/s a new GSI takes (its own warm throughput, a new table's); a "
              "throttled index throttles the base table's writes (back-pressure)",
              f"{DDB_GUIDE}/gsi-throttling.html; {DDB_GUIDE}/warm-throughput.html"),
        Limit("table_quota_ru", TABLE_QUOTA_RU,
              "DynamoDB on demand: per-table quota, read and write request units/s each (warm "
              "throughput can be set up to it)", f"{DDB_GUIDE}/ServiceQuotas.html"),
        Limit("lambda_mb_per_vcpu", 1769, "Lambda memory (MB) that buys one vCPU, in proportion below",
              "https://docs.aws.amazon.com/lambda/latest/dg/configuration-memory.html"),
        Limit("python_max_vcpu", 1, "vCPUs one Python process uses", "not an AWS number: the GIL",
              "a function's Python code runs on one vCPU at a time"),
        Limit("lambda_concurrency", 1000,
              "Lambda concurrent executions per account and Region, shared by every function",
              LAMBDA_QUOTAS,
              "new accounts have reduced concurrency (documented, without a number): "
              "--lambda-concurrency sets yours (aws lambda get-account-settings)"),
        Limit("sfn_start_big", 300,
              "Step Functions StartExecution refill/s (Standard) in us-east-1, us-west-2, eu-west-1; "
              "one bucket for every state machine of the account", SFN_QUOTAS),
        Limit("sfn_start_other", 150, "Step Functions StartExecution refill/s in all other Regions",
              SFN_QUOTAS),
        Limit("sfn_transitions_big", 5000,
              "Step Functions state transitions refill/s (Standard) in us-east-1, us-west-2, eu-west-1",
              SFN_QUOTAS,
              "new accounts have reduced state transition quotas (documented, without a number): "
              "--sfn-transitions sets yours"),
        Limit("sfn_transitions_other", 800,
              "Step Functions state transitions refill/s in all other Regions", SFN_QUOTAS),
        Limit("sfn_task_success_big", 500,
              "Step Functions SendTaskSuccess refill/s (bucket 3,000) in us-east-1, us-west-2, eu-west-1: "
              "each resumes a sequence's callback Task; one bucket for the account", SFN_QUOTAS),
        Limit("sfn_task_success_other", 300,
              "Step Functions SendTaskSuccess refill/s (bucket 1,500) in all other Regions", SFN_QUOTAS),
        Limit("scheduler_create_primary", 5000,
              "EventBridge Scheduler CreateSchedule requests/s in its primary Regions (us-east-1, "
              "us-east-2, us-west-2, ap-northeast-1, ap-south-1, ap-southeast-1, ap-southeast-2, "
              "eu-central-1, eu-west-1, eu-west-2, sa-east-1): one per callback Task",
              SCHEDULER_QUOTAS, "older versions of the page said 1,000; adjustable"),
        Limit("scheduler_create_other", 250,
              "EventBridge Scheduler CreateSchedule requests/s in every other Region", SCHEDULER_QUOTAS),
        Limit("scheduler_invocations", 1000,
              "EventBridge Scheduler invocations/s (its targets called: one SendTaskSuccess each)",
              SCHEDULER_QUOTAS,
              "documented for the primary Regions; assumed the same elsewhere (no other number found)"),
        Limit("sfn_retry_share", 0.05,
              "retried task attempts per state entered (each retry is a billed transition, which "
              "the bench's StateEntered count misses)",
              "https://aws.amazon.com/step-functions/pricing/ (retries are transitions)",
              "assumed, not measured: SES throttles at the rate are the retries to expect "
              "(SendRetryable)"),
        Limit("http_api", 10000, "API Gateway requests/s per account and Region",
              "https://docs.aws.amazon.com/apigateway/latest/developerguide/limits.html"),
        Limit("ses_rate_mature", 1000, "SES maximum send rate assumed for a mature account (mails/s)",
              "https://docs.aws.amazon.com/ses/latest/dg/quotas.html",
              "an example: AWS raises it on request; --ses-rate sets yours"),
        Limit("ses_rate_new", 14,
              "SES maximum send rate of a new account just out of the sandbox (mails/s)",
              "https://docs.aws.amazon.com/ses/latest/dg/quotas.html: 1/s in the sandbox; out of it "
              "the rate 'varies based on your specific use case' (not documented)",
              "assumed 14/s (mailstep:sesMaxSendRate's default); --ses-rate sets yours "
              "(mailstep doctor shows it)"),
        Limit("ddb_latency_ms", 10, "DynamoDB request latency (ms)",
              f"{DDB_GUIDE}/on-demand-capacity-mode.html (single-digit milliseconds)",
              "the upper end of single digits, plus the network"),
        Limit("sqs_hop_ms", 50, "one SQS message to the next Lambda invocation (ms)", "not documented",
              "assumed: the event source's pollers long-poll the queue (docs/broadcasts.md: 50-200 ms)"),
        Limit("resolver_serial_per_page", 5,
              "requests a resolver page of 1,000 waits for one after another (a tag audience)",
              "mailstep: shared/broadcasts/fanout.py; measured 4.4-5.2 with `pytest -m bench "
              "tests/integration/test_broadcast_resolver.py` (docs/bench-scale.md, \"The resolver\")",
              "16 requests a page: the record and the queue depth at once, the Query, the page's "
              "BatchGetItems at once, the checkpoint; the batches are sent in the background"),
        Limit("resolver_invocation_s", 60, "seconds one resolver invocation loops over pages",
              "mailstep: shared/broadcasts/fanout.py (invocation_deadline)",
              "one SQS hop to the next invocation per 60 s of pages, not one per page"),
    )
}  # fmt: skip
BIG_SFN_REGIONS = ("us-east-1", "us-west-2", "eu-west-1")  # the Step Functions quotas' larger Regions
# EventBridge Scheduler's primary Regions (its quotas page: the larger CreateSchedule rate)
SCHEDULER_PRIMARY_REGIONS = (
    "us-east-1", "us-east-2", "us-west-2", "ap-northeast-1", "ap-south-1", "ap-southeast-1",
    "ap-southeast-2", "eu-central-1", "eu-west-1", "eu-west-2", "sa-east-1",
)  # fmt: skip
PARTITION_WCU_PER_S = LIMITS["partition_wcu"].value
PARTITION_RCU_PER_S = LIMITS["partition_rcu"].value
LAMBDA_MB_PER_VCPU = LIMITS["lambda_mb_per_vcpu"].value
PYTHON_MAX_VCPU = LIMITS["python_max_vcpu"].value
ACCOUNT_CONCURRENCY = int(LIMITS["lambda_concurrency"].value)
DEFAULT_SES_RATE = LIMITS["ses_rate_mature"].value
SES_LIMIT = "SES rate"  # how the SES limit's name starts


def limits_markdown() -> str:
    """The limits table of docs/bench.md, from :data:`LIMITS`."""
    rows = ["| limit | value | what | source | assumption |", "|---|---:|---|---|---|"]
    for limit in LIMITS.values():
        rows.append(f"| `{limit.name}` | {limit.value:,g} | {limit.what} | {limit.source} | {limit.note} |")
    return "\n".join(rows)


_TABLES = {t.local_name: t for t in specs.TABLES}


# ----- keys ------------------------------------------------------------------------------------
_EMAIL = re.compile(r"[^\s#@/]+@[^\s#@/]+")
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}(:\d{2}(:\d{2}(\.\d+)?)?)?(Z|[+-]\d{2}:?\d{2})?")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_HEX = re.compile(r"\b[0-9a-fA-F]{16,}\b")
_NUMBER = re.compile(r"\b\d+\b")


def key_pattern(value: str, names: Mapping[str, str] | None = None) -> str:
    """``value`` with what varies replaced by placeholders: the scenario's ``names`` (e.g. a
    broadcast id -> ``<broadcast>``, longest first), then addresses, timestamps, dates, ids,
    hashes and numbers: ``STATS#2026-11-25`` -> ``STATS#<date>``."""
    for name in sorted(names or {}, key=len, reverse=True):
        value = value.replace(name, (names or {})[name])
    value = _EMAIL.sub("<email>", value)
    value = _TIMESTAMP.sub("<ts>", value)
    value = _DATE.sub("<date>", value)
    value = _UUID.sub("<id>", value)
    value = _HEX.sub("<hash>", value)
    return _NUMBER.sub("<n>", value)


@dataclass(frozen=True)
class KeyUse:
    """Capacity one request used on one partition key: ``where`` is the table's spec id
    (``MainTable``) or ``<table id>/<index>``."""

    where: str
    key: str
    wcu: float = 0.0
    rcu: float = 0.0


def _string(value: Any) -> str:
    if isinstance(value, dict) and len(value) == 1:
        return str(next(iter(value.values())))
    return str(value)


def _table(name: str) -> specs.TableSpec:
    return _TABLES.get(name) or specs.TableSpec(id=name, local_name=name, setting="")


def _write_units(size: int) -> int:
    return max(1, math.ceil(size / 1024))


def _item_writes(table_name: str, item: dict[str, Any], units: float, *, indexes: bool) -> list[KeyUse]:
    """The base table's key of ``item`` and, with ``indexes``, each index it is projected into
    (an index write is as large as the item: ALL projection)."""
    table = _table(table_name)
    uses = [KeyUse(table.id, _string(item.get(table.partition_key, "")), wcu=units)]
    if indexes:
        size_units = _write_units(item_size(item))
        for gsi in table.gsis:
            if gsi.partition_key in item and gsi.sort_key in item:
                uses.append(
                    KeyUse(f"{table.id}/{gsi.name}", _string(item[gsi.partition_key]), wcu=size_units)
                )
    return uses


def writes(request: Request) -> list[KeyUse]:
    """The partition keys one write request wrote, with the WCU each took."""
    params, refused = request.params, "Error" in request.parsed
    operation = request.operation
    if operation == "PutItem":
        item = params.get("Item", {})
        return _item_writes(
            params.get("TableName", ""), item, _write_units(item_size(item)), indexes=not refused
        )
    if operation in ("UpdateItem", "DeleteItem"):
        return _item_writes(params.get("TableName", ""), params.get("Key", {}), 1.0, indexes=False)
    if operation == "TransactWriteItems":
        uses = []
        for action in params.get("TransactItems", []):
            ((kind, body),) = action.items()
            item = body.get("Item") or body.get("Key", {})
            units = 2.0 * _write_units(item_size(item))
            uses += _item_writes(
                body.get("TableName", ""), item, units, indexes=kind == "Put" and not refused
            )
        return uses
    if operation == "BatchWriteItem":
        uses = []
        for table_name, batch in params.get("RequestItems", {}).items():
            unprocessed = request.parsed.get("UnprocessedItems", {}).get(table_name, [])
            for entry in batch:
                if entry in unprocessed:
                    continue
                if "PutRequest" in entry:
                    item = entry["PutRequest"]["Item"]
                    uses += _item_writes(table_name, item, _write_units(item_size(item)), indexes=True)
                else:
                    uses += _item_writes(table_name, entry["DeleteRequest"]["Key"], 1.0, indexes=False)
        return uses
    return []


_CONDITION = re.compile(r"(#?[A-Za-z_][A-Za-z0-9_]*)\s*=\s*(:[A-Za-z0-9_]+)")


def _query_key(params: dict[str, Any]) -> tuple[str, str]:
    """(where, partition key value) of a Query, from its KeyConditionExpression."""
    table = _table(params.get("TableName", ""))
    index = params.get("IndexName")
    attribute = next((g.partition_key for g in table.gsis if g.name == index), table.partition_key)
    names = params.get("ExpressionAttributeNames", {})
    values = params.get("ExpressionAttributeValues", {})
    for name, placeholder in _CONDITION.findall(params.get("KeyConditionExpression", "")):
        if names.get(name, name) == attribute and placeholder in values:
            return (f"{table.id}/{index}" if index else table.id), _string(values[placeholder])
    return (f"{table.id}/{index}" if index else table.id), "?"


def _read_units(size: int, consistent: bool) -> float:
    return (1.0 if consistent else 0.5) * max(1, math.ceil(size / 4096))


def reads(request: Request) -> list[KeyUse]:
    """The partition keys one read request read, with the RCU each took (a Scan: none)."""
    params, parsed, operation = request.params, request.parsed, request.operation
    consistent = bool(params.get("ConsistentRead"))
    if operation == "GetItem":
        table = _table(params.get("TableName", ""))
        size = item_size(parsed.get("Item", {}))
        key = _string(params.get("Key", {}).get(table.partition_key, ""))
        return [KeyUse(table.id, key, rcu=_read_units(size, consistent))]
    if operation == "Query":
        where, key = _query_key(params)
        size = sum(item_size(i) for i in parsed.get("Items", []))
        return [KeyUse(where, key, rcu=_read_units(size, consistent))]
    if operation == "BatchGetItem":
        uses = []
        for table_name, batch in params.get("RequestItems", {}).items():
            table = _table(table_name)
            found = {
                (_string(i.get(table.partition_key)), _string(i.get(table.sort_key))): i
                for i in parsed.get("Responses", {}).get(table_name, [])
            }
            unread = parsed.get("UnprocessedKeys", {}).get(table_name, {}).get("Keys", [])
            for key in batch.get("Keys", []):
                if key in unread:
                    continue
                pk, sk = _string(key.get(table.partition_key)), _string(key.get(table.sort_key))
                size = item_size(found.get((pk, sk), {}))
                uses.append(KeyUse(table.id, pk, rcu=_read_units(size, bool(batch.get("ConsistentRead")))))
        return uses
    if operation == "TransactGetItems":
        uses = []
        for action in params.get("TransactItems", []):
            body = action["Get"]
            table = _table(body.get("TableName", ""))
            uses.append(KeyUse(table.id, _string(body.get("Key", {}).get(table.partition_key, "")), rcu=2.0))
        return uses
    return []


@dataclass(frozen=True)
class HotKey:
    where: str  # MainTable, EventsTable, EventsTable/TemplateIndex, ...
    pattern: str  # the key with placeholders
    per_mail: float  # capacity units on that one key per mail

    def public(self) -> dict[str, Any]:
        return {"where": self.where, "key": self.pattern, "per_mail": round(self.per_mail, 4)}


def hottest_keys(
    uses: Iterable[KeyUse], mails: int, names: Mapping[str, str] | None = None, *, unit: str = "wcu"
) -> dict[str, HotKey]:
    """Per table and index: the one key value that took the most ``unit`` (``wcu``/``rcu``), as
    capacity per mail, named by its pattern."""
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for use in uses:
        amount = use.wcu if unit == "wcu" else use.rcu
        if amount:
            totals[use.where][use.key] += amount
    found = {}
    for where, per_key in sorted(totals.items()):
        key, amount = max(per_key.items(), key=lambda kv: (kv[1], kv[0]))
        found[where] = HotKey(where, key_pattern(key, names), amount / max(1, mails))
    return found


def hottest(found: Mapping[str, HotKey]) -> HotKey | None:
    return max(found.values(), key=lambda h: h.per_mail, default=None)


def transaction_items(request: Request) -> list[tuple[str, str, str]]:
    """(table, PK, SK) of each item a TransactWriteItems request names."""
    if request.operation != "TransactWriteItems":
        return []
    found = []
    for action in request.params.get("TransactItems", []):
        ((_, body),) = action.items()
        table = _table(body.get("TableName", ""))
        item = body.get("Item") or body.get("Key", {})
        found.append((table.id, _string(item.get(table.partition_key)), _string(item.get(table.sort_key))))
    return found


@dataclass(frozen=True)
class Logged:
    """What the model reads of one logged request, taken when it is made (:func:`compact`):
    a run at 100,000 mails keeps millions of requests, and their parameters and answers (a
    resolver's page holds a thousand items) would take gigabytes."""

    origin: str
    service: str
    operation: str
    writes: tuple[KeyUse, ...] = ()
    reads: tuple[KeyUse, ...] = ()
    tx_items: frozenset[tuple[str, str, str]] = frozenset()


def compact(request: Request) -> Logged:
    """The model's view of ``request``: the keys it wrote and read, the items its transaction named."""
    return Logged(
        request.origin,
        request.service,
        request.operation,
        tuple(writes(request)),
        tuple(reads(request)),
        frozenset(transaction_items(request)),
    )


def max_tx_per_item(
    log: Iterable[Logged], mails: int, names: Mapping[str, str] | None = None
) -> tuple[float, str]:
    """The most transactions that named one item, per mail, and that item's pattern."""
    counts: Counter[tuple[str, str, str]] = Counter()
    for logged in log:
        counts.update(logged.tx_items)
    if not counts:
        return 0.0, ""
    (table, pk, sk), n = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
    return n / max(1, mails), f"{table}: {key_pattern(pk, names)} / {key_pattern(sk, names)}"


# ----- the ceiling -------------------------------------------------------------------------------
@dataclass(frozen=True)
class FunctionShape:
    """What a function can do at once: memory (its vCPU share) and concurrency."""

    name: str
    memory_mb: int
    concurrency: int
    concurrency_from: str  # "reserved", "event source maximum" or "account default"

    @property
    def vcpu(self) -> float:
        return min(PYTHON_MAX_VCPU, self.memory_mb / LAMBDA_MB_PER_VCPU)


def function_shape(spec: specs.FunctionSpec) -> FunctionShape:
    """Memory and concurrency of a function from its spec (what the template deploys): its
    reserved concurrency, else the smallest maximum concurrency of its event sources, else the
    account's default concurrency."""
    if spec.reserved_concurrency:
        return FunctionShape(spec.name, spec.memory_mb, spec.reserved_concurrency, "reserved")
    limits = [s.max_concurrency for s in spec.event_sources if s.max_concurrency]
    if limits:
        return FunctionShape(spec.name, spec.memory_mb, min(limits), "event source maximum")
    return FunctionShape(spec.name, spec.memory_mb, ACCOUNT_CONCURRENCY, "account default")


def cpu_ceiling(shape: FunctionShape, cpu_ms_per_mail: float) -> float:
    """Mails per second the function's environments can compute: concurrency x vCPU share x
    1000 ms / CPU ms per mail."""
    if cpu_ms_per_mail <= 0:
        return math.inf
    return shape.concurrency * shape.vcpu * 1000.0 / cpu_ms_per_mail


@dataclass(frozen=True)
class Quotas:
    """The limits that depend on where and for whom: the Region (Step Functions), the account
    (new or mature: SES rate, Lambda concurrency) and the tables (fresh: a new on-demand table's
    throughput; warm: the warm throughput ``mailstep:expectedPeakMailsPerSecond`` sets for
    ``peak``). Every value from :data:`LIMITS`; :func:`quotas` builds it."""

    region: str = "us-east-1"
    account: str = "mature"
    table: str = "fresh"
    ses_rate: float = DEFAULT_SES_RATE
    lambda_concurrency: int = ACCOUNT_CONCURRENCY
    sfn_start: float = LIMITS["sfn_start_big"].value
    sfn_transitions: float = LIMITS["sfn_transitions_big"].value
    sfn_task_success: float = LIMITS["sfn_task_success_big"].value  # callback Tasks resumed per second
    scheduler_create: float = LIMITS["scheduler_create_primary"].value
    scheduler_invocations: float = LIMITS["scheduler_invocations"].value
    # table id -> (write, read) units/s it serves at once; a table not named: a new table's
    warm: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    retry_share: float = LIMITS["sfn_retry_share"].value

    def table_capacity(self, where: str) -> tuple[float, float]:
        """(write, read) units/s the table or index ``where`` serves at once (an index keeps a
        new index's: the warm throughput is set on the tables)."""
        return self.warm.get(where, (NEW_TABLE_WRU, NEW_TABLE_RRU))

    def describe(self) -> str:
        return f"{self.region}, {self.account} account, {self.table} tables, SES {self.ses_rate:g}/s"


def quotas(region: str = "us-east-1", account: str = "mature", table: str = "fresh",
           ses_rate: float | None = None, peak: float | None = None, lambda_concurrency: int | None = None,
           sfn_transitions: float | None = None) -> Quotas:  # fmt: skip
    """The quotas of ``region`` for a ``new`` or ``mature`` account with ``fresh`` or ``warm``
    tables (warmed for ``peak`` mails/s, by default the SES rate). A new account's SES rate is
    the assumed start out of the sandbox (14/s); its Lambda concurrency and state transitions
    are reduced by an amount AWS does not document, so the documented defaults stand unless
    given."""
    big = region in BIG_SFN_REGIONS
    rate = ses_rate if ses_rate is not None else LIMITS[f"ses_rate_{account}"].value
    warm = (
        {t: (float(w), float(r)) for t, (w, r) in warm_throughput(peak or rate).items()}
        if table == "warm"
        else {}
    )
    return Quotas(
        region=region,
        account=account,
        table=table,
        ses_rate=rate,
        lambda_concurrency=lambda_concurrency or ACCOUNT_CONCURRENCY,
        sfn_start=LIMITS["sfn_start_big" if big else "sfn_start_other"].value,
        sfn_transitions=sfn_transitions
        or LIMITS["sfn_transitions_big" if big else "sfn_transitions_other"].value,
        sfn_task_success=LIMITS["sfn_task_success_big" if big else "sfn_task_success_other"].value,
        scheduler_create=LIMITS[
            "scheduler_create_primary" if region in SCHEDULER_PRIMARY_REGIONS else "scheduler_create_other"
        ].value,
        warm=warm,
    )


@dataclass(frozen=True)
class Inputs:
    """What one scenario's run measured, per mail (or per the scenario's unit)."""

    hot_write: HotKey | None
    hot_read: HotKey | None
    cpu_ms_per_mail: Mapping[str, float]  # function spec name -> CPU ms per mail
    ses_sends_per_mail: float
    starts_per_mail: float  # StartExecution requests
    transitions_per_mail: float  # StateEntered: retries not counted (Quotas.retry_share adds them)
    http_per_mail: float
    ses_rate: float = DEFAULT_SES_RATE  # used when ceilings() gets no Quotas
    ses_share: float = 1.0  # the share of the SES rate the scenario's sends may use
    # table id or "<table id>/<index>" -> (write units, read units) per mail, all keys together
    table_units: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    requests_per_mail: float = 0.0  # DynamoDB requests, starts and SES sends: each a wait in a function
    broadcast: bool = False  # the broadcast workers' limiter polls the main table while it sends
    # callback Tasks (a send and the wait after it): the schedules created (or updated by a retry)
    # and the schedules that fired, each one SendTaskSuccess
    schedules_per_mail: float = 0.0
    resumes_per_mail: float = 0.0

    def public(self) -> dict[str, Any]:
        """As JSON (``python -m bench capacity --json``'s ``inputs``; :func:`inputs_from` reads it)."""
        found = asdict(self)
        found["table_units"] = {w: list(u) for w, u in self.table_units.items()}
        return found


def inputs_from(data: Mapping[str, Any]) -> Inputs:
    """:meth:`Inputs.public` back to :class:`Inputs`."""
    values = dict(data)
    for name in ("hot_write", "hot_read"):
        values[name] = HotKey(**values[name]) if values.get(name) else None
    values["table_units"] = {w: (float(u[0]), float(u[1])) for w, u in values.get("table_units", {}).items()}
    return Inputs(**values)


def table_units(log: Iterable[Logged], mails: int) -> dict[str, tuple[float, float]]:
    """Per table and index: (write units, read units) per mail over all its keys."""
    write: Counter[str] = Counter()
    read: Counter[str] = Counter()
    for logged in log:
        for use in logged.writes:
            write[use.where] += use.wcu
        for use in logged.reads:
            read[use.where] += use.rcu
    mails = max(1, mails)
    return {where: (write[where] / mails, read[where] / mails) for where in sorted(set(write) | set(read))}


def limiter_writes_per_s(ses_rate: float, share: float = 1.0) -> float:
    """UpdateItems per second the broadcast workers' rate limiter makes while they send: one per
    lease of ``lease_size(rate, threads)`` tokens on the shared clock item; a worker whose lease
    is not due sleeps until it is, so starved workers do not poll (shared/sending/rate.py):
    at 1,000/s, leases of 16 (8 sends in flight x 2) give 62.5 writes a second."""
    from shared.core.settings import Settings
    from shared.sending.rate import lease_size

    rate = ses_rate * share
    threads = Settings.model_fields["broadcast_worker_threads"].default
    return rate / lease_size(rate, threads)


def busy_seconds_per_mail(inputs: Inputs, shapes: Mapping[str, FunctionShape], latency_s: float) -> float:
    """Seconds of execution environments one mail keeps busy, all functions together: each
    function's CPU at its vCPU share, and each AWS request's latency (a function waits for it;
    the broadcast worker's sends in flight overlap, so this is an upper bound there)."""
    cpu = sum(ms / 1000 / shapes[f].vcpu for f, ms in inputs.cpu_ms_per_mail.items() if f in shapes)
    return cpu + inputs.requests_per_mail * latency_s


RESOLVER_LATENCY = (
    f"per page of 1,000: {LIMITS['resolver_serial_per_page'].value:g} requests one after another x "
    f"{LIMITS['ddb_latency_ms'].value:g} ms (DynamoDB: single-digit ms documented), after the page's "
    f"CPU; one SQS hop of {LIMITS['sqs_hop_ms'].value:g} ms (not documented: assumed) per "
    f"{LIMITS['resolver_invocation_s'].value:g} s invocation"
)


def resolution_rate(cpu_ms_per_recipient: float, vcpu: float, page: int = 1000) -> float:
    """Recipients per second the resolver resolves, one page after another: a page's CPU at the
    resolver's vCPU share and the requests it waits for in turn at DynamoDB's latency; an
    invocation loops over pages for ``resolver_invocation_s``, then the SQS hop to the next."""
    page_s = (
        page * cpu_ms_per_recipient / 1000 / vcpu
        + LIMITS["resolver_serial_per_page"].value * LIMITS["ddb_latency_ms"].value / 1000
    )
    pages_per_invocation = max(1.0, math.floor(LIMITS["resolver_invocation_s"].value / page_s))
    return page / (page_s + LIMITS["sqs_hop_ms"].value / 1000 / pages_per_invocation)


def _table_ceiling(units: tuple[float, float], capacity: tuple[float, float], fixed: float) -> float:
    """Mails per second before a table's or an index's throughput (a linear mix of writes and reads) is full,
    with ``fixed`` write units per second taken first."""
    (write, read), (cap_write, cap_read) = units, capacity
    mix = write / cap_write + read / cap_read
    return max(0.0, 1 - fixed / cap_write) / mix if mix > 0 else math.inf


def ceilings(
    inputs: Inputs, shapes: Mapping[str, FunctionShape], q: Quotas | None = None
) -> dict[str, float]:
    """Every limit's rate in mails per second (only the limits the scenario uses)."""
    q = q or Quotas(ses_rate=inputs.ses_rate)
    found: dict[str, float] = {}

    def limit(name: str, capacity: float, per_mail: float) -> None:
        if per_mail > 0:
            found[name] = capacity / per_mail

    if inputs.hot_write:
        hot = inputs.hot_write
        limit(f"DynamoDB {hot.where} key {hot.pattern} (1,000 WCU/s)", PARTITION_WCU_PER_S, hot.per_mail)
    if inputs.hot_read:
        hot = inputs.hot_read
        limit(f"DynamoDB {hot.where} key {hot.pattern} (3,000 RCU/s)", PARTITION_RCU_PER_S, hot.per_mail)
    limiter = limiter_writes_per_s(q.ses_rate, inputs.ses_share) if inputs.broadcast else 0.0
    for where, units in inputs.table_units.items():
        cap_write, cap_read = q.table_capacity(where)
        fixed = limiter if where == specs.MAIN_TABLE.id else 0.0
        kind = "index (GSI back-pressure on the table's writes)" if "/" in where else f"table, {q.table}"
        polls = f", limiter {fixed:,.0f} WRU/s" if fixed else ""
        name = f"DynamoDB {where} {kind} ({cap_write:,.0f} WRU/s or {cap_read:,.0f} RRU/s{polls})"
        found[name] = _table_ceiling(units, (cap_write, cap_read), fixed)
    for name, cpu_ms in sorted(inputs.cpu_ms_per_mail.items()):
        shape = shapes.get(name)
        if shape is not None and cpu_ms > 0:
            shared = replace(shape, concurrency=min(shape.concurrency, q.lambda_concurrency))
            what = f"{shared.concurrency} x {shared.vcpu:.2f} vCPU, {shape.concurrency_from}"
            found[f"Lambda CPU of {name} ({what})"] = cpu_ceiling(shared, cpu_ms)
    latency_s = LIMITS["ddb_latency_ms"].value / 1000
    limit(
        f"Lambda account concurrency ({q.lambda_concurrency:,} shared by every function)",
        q.lambda_concurrency,
        busy_seconds_per_mail(inputs, shapes, latency_s) if inputs.cpu_ms_per_mail else 0.0,
    )
    resolver = shapes.get("broadcast-resolver")
    if resolver and inputs.cpu_ms_per_mail.get("broadcast-resolver", 0) > 0:
        rate = resolution_rate(inputs.cpu_ms_per_mail["broadcast-resolver"], resolver.vcpu)
        found[f"broadcast resolver (pages one after another: {RESOLVER_LATENCY})"] = rate
    share = f" x {inputs.ses_share:g} share" if inputs.ses_share != 1 else ""
    limit(f"{SES_LIMIT} ({q.ses_rate:g}/s{share})", q.ses_rate * inputs.ses_share, inputs.ses_sends_per_mail)
    start = f"Step Functions StartExecution ({q.sfn_start:,.0f}/s, {q.region})"
    limit(start, q.sfn_start, inputs.starts_per_mail)
    limit(
        f"Step Functions state transitions ({q.sfn_transitions:,.0f}/s, {q.region}, retries included)",
        q.sfn_transitions,
        inputs.transitions_per_mail * (1 + q.retry_share),
    )
    limit(
        f"Step Functions SendTaskSuccess ({q.sfn_task_success:,.0f}/s, {q.region}): callback Tasks resumed",
        q.sfn_task_success,
        inputs.resumes_per_mail,
    )
    limit(
        f"EventBridge Scheduler CreateSchedule ({q.scheduler_create:,.0f}/s, {q.region})",
        q.scheduler_create,
        inputs.schedules_per_mail,
    )
    limit(
        f"EventBridge Scheduler invocations ({q.scheduler_invocations:,.0f}/s)",
        q.scheduler_invocations,
        inputs.resumes_per_mail,
    )
    limit("HTTP API throttle (10,000 requests/s)", LIMITS["http_api"].value, inputs.http_per_mail)
    return found


def ceiling(found: Mapping[str, float]) -> tuple[float, str]:
    """The lowest rate and the limit that sets it."""
    if not found:
        return math.inf, "nothing measured"
    name = min(found, key=lambda n: found[n])
    return found[name], name


def trigger_wave(sequences: Inputs) -> Inputs:
    """A sign-up or import spike: every first mail needs its own StartExecution (the steady
    0.2 starts per mail averages over a drip's five mails), so first mails go out at most at the
    StartExecution refill rate."""
    return replace(sequences, starts_per_mail=max(1.0, sequences.starts_per_mail))


def result(inputs: Inputs, shapes: Mapping[str, FunctionShape], q: Quotas) -> dict[str, Any]:
    """One scenario's ceiling and limit, and mailstep's own (every limit but the account's SES
    rate, which AWS raises on request)."""
    limits = ceilings(inputs, shapes, q)
    rate, limited_by = ceiling(limits)
    own_rate, own_limited_by = ceiling({n: v for n, v in limits.items() if not n.startswith(SES_LIMIT)})
    return {
        "ceiling_per_s": round(rate, 1) if math.isfinite(rate) else None,
        "limited_by": limited_by,
        "ceiling_without_ses_per_s": round(own_rate, 1) if math.isfinite(own_rate) else None,
        "limited_without_ses_by": own_limited_by,
        "ceilings_per_s": {name: round(v, 1) for name, v in sorted(limits.items(), key=lambda kv: kv[1])},
    }


def shapes_for(shapes: Mapping[str, FunctionShape], ses_rate: float) -> dict[str, FunctionShape]:
    """The functions as a deployment for ``ses_rate`` gets them: the broadcast workers' maximum
    concurrency follows ``mailstep:sesMaxSendRate`` (``broadcast_workers``), the rest as measured."""
    found = dict(shapes)
    worker = found.get(specs.BROADCAST_WORKER_FUNCTION.name)
    if worker and worker.concurrency_from == "event source maximum":
        found[worker.name] = replace(worker, concurrency=specs.broadcast_workers(ses_rate))
    return found
