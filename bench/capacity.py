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
- **Ceiling.** Each published limit divided by what one mail takes of it; the smallest wins.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from bench.meter import Request, item_size
from shared.core import specs

# ----- published limits (docs/bench.md "Limits", with their sources) ----------------------------
PARTITION_WCU_PER_S = 1000.0  # per partition, so at most this per partition key
PARTITION_RCU_PER_S = 3000.0
LAMBDA_MB_PER_VCPU = 1769.0  # memory / 1,769 MB = vCPU share
PYTHON_MAX_VCPU = 1.0  # one Python process (the GIL) uses at most one vCPU
ACCOUNT_CONCURRENCY = 1000  # Lambda's default concurrent executions per account and region
SFN_START_PER_S = 300.0  # StartExecution refill rate (us-east-1, us-west-2, eu-west-1; 150 elsewhere)
SFN_TRANSITIONS_PER_S = 5000.0  # StateTransition refill rate (same regions; 800 elsewhere)
HTTP_API_PER_S = 10000.0  # API Gateway account-level throttle per region
DEFAULT_SES_RATE = 1000.0  # the account's MaxSendRate assumed (mails per second)
SES_LIMIT = "SES rate"  # how the SES limit's name starts

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
class Inputs:
    """What one scenario's run measured, per mail (or per the scenario's unit)."""

    hot_write: HotKey | None
    hot_read: HotKey | None
    cpu_ms_per_mail: Mapping[str, float]  # function spec name -> CPU ms per mail
    ses_sends_per_mail: float
    starts_per_mail: float  # StartExecution requests
    transitions_per_mail: float
    http_per_mail: float
    ses_rate: float = DEFAULT_SES_RATE
    ses_share: float = 1.0  # the share of the SES rate the scenario's sends may use


def ceilings(inputs: Inputs, shapes: Mapping[str, FunctionShape]) -> dict[str, float]:
    """Every limit's rate in mails per second (only the limits the scenario uses)."""
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
    for name, cpu_ms in sorted(inputs.cpu_ms_per_mail.items()):
        shape = shapes.get(name)
        if shape is not None and cpu_ms > 0:
            what = f"{shape.concurrency} x {shape.vcpu:.2f} vCPU, {shape.concurrency_from}"
            found[f"Lambda CPU of {name} ({what})"] = cpu_ceiling(shape, cpu_ms)
    share = f" x {inputs.ses_share:g} share" if inputs.ses_share != 1 else ""
    limit(
        f"{SES_LIMIT} ({inputs.ses_rate:g}/s{share})",
        inputs.ses_rate * inputs.ses_share,
        inputs.ses_sends_per_mail,
    )
    limit("Step Functions StartExecution (300/s)", SFN_START_PER_S, inputs.starts_per_mail)
    limit("Step Functions state transitions (5,000/s)", SFN_TRANSITIONS_PER_S, inputs.transitions_per_mail)
    limit("HTTP API throttle (10,000 requests/s)", HTTP_API_PER_S, inputs.http_per_mail)
    return found


def ceiling(found: Mapping[str, float]) -> tuple[float, str]:
    """The lowest rate and the limit that sets it."""
    if not found:
        return math.inf, "nothing measured"
    name = min(found, key=lambda n: found[n])
    return found[name], name
