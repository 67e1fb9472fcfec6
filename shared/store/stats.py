"""Engagement counters: ``STATS#<source>`` / ``COUNTERS`` and ``STATS#<template>`` /
``TEMPLATE_COUNTERS`` in the main table (DESIGN.md section 3).

- Totals: one attribute per metric (``send``, ``delivery``, ``open``, ``click``, ``bounce``,
  ``complaint``, ``unsubscribe``, ...), changed only by atomic ``ADD``.
- Uniques: ``open_unique`` and ``click_unique`` count the FIRST open/click of a subscriber
  per source (and per template). "First" is a marker item ``SUB#<email>`` /
  ``UNIQ#<metric>#<scope>#<id>`` written with ``attribute_not_exists`` in the same
  transaction as the ``ADD`` (see ``shared.engagement.consumer``). Send, delivery, bounce and
  complaint happen at most once per mail; ``unsubscribe`` is counted once per real change
  (``shared.web.unsubscribe``), so their totals are their unique counts.
- ``send`` is counted from the send path's records (:func:`send_counters`): a single send's
  ``SENT#`` entry by the stats fold from the main table's stream, per batch
  (``shared.store.stream_counts``), a broadcast's sends once per batch by its worker; SES Send
  events are not published. A counters item that is busy (:func:`busy`) never holds up a
  send's record: a batch's sends go to the ledger ``STATS#<source>`` / ``UNCOUNTED#<template>``
  and are added once by :func:`settle_uncounted` (right after, retried; or by the engagement
  consumer from the mails' SES events); :func:`settle_send` adds the ``count_pending`` mark older
  versions left on a ``SENT#`` entry. docs/sending.md, "Counters are off the critical path".
- Sharded: a counters item is 16 items (``keys.counter_shard_pk``); an ADD goes to one at
  random, a read sums them (:func:`sum_shards`).
- The event metrics but ``delivery`` can be recomputed from the events table (GSIs
  ``SequenceIndex`` and ``TemplateIndex``, 16 shards each, merged): :meth:`StatsStore.recompute`.
  They agree while no event has expired (``DATA_TTL_DAYS``); ``--since`` reports are always
  computed from the events, so they have no ``send`` and no ``delivery`` (a Delivery is not
  indexed: ``shared.store.events.UNINDEXED_TYPES``), shown as not available, with the rates
  that divide by them.

Rates: delivered and bounced per send; complained, opened (unique), clicked (unique) and
unsubscribed per delivery.

Sign-ups (``shared.consent``) are counted on the sign-up source's item ``STATS#signup`` /
``COUNTERS`` (the item that also counts its confirmation mails): ``signup`` (a new double
opt-in sign-up whose confirmation mail went out), ``confirm`` (one confirmed) and
``single_opt_in`` (subscribed at once by a single opt-in form). Each ADD joins the
transaction of the effect it counts (:func:`signup_counters`), so it happens once per effect;
:class:`SignupCounts` reads them back with the confirmation rate.
"""

from __future__ import annotations

import heapq
import random
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TypeVar

from botocore.exceptions import ClientError

from shared.core import clock
from shared.core.errors import ConcurrentModification
from shared.core.public import public_fields
from shared.core.retry import Backoff
from shared.core.specs import EVENTS_TABLE
from shared.store import keys
from shared.store.dynamo import (
    Action,
    TableAdapter,
    TransactionConflict,
    deserialize,
    from_dynamo,
    key,
    page_start,
    query_all,
    transact,
    values,
)
from shared.store.events import INDEXED, UNINDEXED_TYPES

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef


SOURCE_INDEX = next(g.name for g in EVENTS_TABLE.gsis if g.partition_key == INDEXED["source"])
TEMPLATE_INDEX = next(g.name for g in EVENTS_TABLE.gsis if g.partition_key == INDEXED["template"])

PERMANENT = "Permanent"
# Event-item type -> counter attribute (a transient/undetermined bounce counts apart).
METRICS = (
    "send",
    "delivery",
    "open",
    "click",
    "open_machine",  # opens a machine made (shared.engagement.machine): not in open, no unique
    "click_machine",  # clicks a machine made (a scanner, the hidden link): not in click, no unique
    "bounce",
    "bounce_transient",
    "complaint",
    "unsubscribe",
    "reject",
    "delivery_delay",
    "rendering_failure",
    "subscription",
)
UNIQUE_METRICS = ("open", "click")
SEND_PATH_METRICS = frozenset({"send"})  # counted by the send path, not from events
# What the events indexes cannot recount: sends (not events) and deliveries (not indexed:
# shared.store.events.UNINDEXED_TYPES); the counters have them.
NOT_RECOUNTED = SEND_PATH_METRICS | UNINDEXED_TYPES
SOURCE_SCOPE, TEMPLATE_SCOPE = "source", "template"

# Per sequence step (the console's step graph): attributes ``<code>.sent``, ``<code>.opened``
# (subscribers who opened that step's mail: a marker per step, scope ``step``) and
# ``<code>.clicked`` of the sequence's own counters item, ADDed in the same actions as the
# sequence's counts: no item more per mail. Only a sequence's mails have a step code (the send
# job's step is ``<code>:<execution>``, shared.sequences.steps).
STEP_SCOPE = "step"
STEP_CODE = re.compile(r"S\d+(?:[TE]\d+)*")
STEP_METRICS = {"send": "sent", "open": "opened", "click": "clicked"}


def sequence_step(step: str | None) -> str | None:
    """The step code of a sequence mail's send-once step (``S3T1:<execution>`` -> ``S3T1``);
    None for any other mail (a broadcast's, a sign-up's, a test send's)."""
    code, colon, _ = (step or "").partition(":")
    return code if colon and STEP_CODE.fullmatch(code) else None


def step_attribute(code: str, metric: str) -> str:
    """The counters attribute of ``metric`` (send, open, click) of the step ``code``."""
    return f"{code}.{STEP_METRICS[metric]}"


def step_counts(item: Mapping[str, Any] | None) -> dict[str, dict[str, int]]:
    """A sequence's counts per step code (``{"S1": {"sent": 9, "opened": 4}}``) from its summed
    counters item."""
    found: dict[str, dict[str, int]] = {}
    for name, value in (item or {}).items():
        code, dot, what = str(name).partition(".")
        if dot and what in STEP_METRICS.values() and STEP_CODE.fullmatch(code):
            found.setdefault(code, {})[what] = int(value)
    return found


# Rows of a report: (label, metric, rate numerator, rate denominator metric).
REPORT_ROWS = (
    ("sent", "send", None, None),
    ("delivered", "delivery", "delivery", "send"),
    ("opened", "open", "open_unique", "delivery"),  # the rate counts each reader once
    ("opened by machines", "open_machine", "open_machine", "delivery"),
    ("clicked", "click", "click_unique", "delivery"),  # likewise: unique clickers per delivery
    ("clicked by machines", "click_machine", "click_machine", "delivery"),
    ("bounced", "bounce", "bounce", "send"),
    ("complained", "complaint", "complaint", "delivery"),
    ("unsubscribed", "unsubscribe", "unsubscribe", "delivery"),
)


# Sign-up counters: attributes of STATS#signup / COUNTERS beside its engagement metrics.
SIGNUP_SOURCE = "signup"  # the send pipeline's source of confirmation mails, and these counters' item
SIGNUP, CONFIRM, SINGLE_OPT_IN = "signup", "confirm", "single_opt_in"
SIGNUP_METRICS = (SIGNUP, CONFIRM, SINGLE_OPT_IN)
# A transaction holding a counter ADD that a concurrent transaction on the same counters item
# cancelled (``TransactionConflict``, which botocore does not retry) is run again: 8 tries,
# pauses of up to 5 ms, 10 ms, ... 200 ms (full jitter).
CONTENDED_RETRY = Backoff(attempts=8, base=0.005, cap=0.2)
TRANSACTION_CONFLICT = "TransactionConflict"
# Why DynamoDB may refuse a counter ADD for the moment (the counters item is hot): cancellation
# reasons of a transaction, and the codes of a request throttled as a whole.
BUSY_REASONS = frozenset({TRANSACTION_CONFLICT, "ThrottlingError", "ProvisionedThroughputExceeded"})
THROTTLED = frozenset(
    {"ThrottlingException", "ProvisionedThroughputExceededException", "RequestLimitExceeded"}
)
COUNT_PENDING = "count_pending"  # on a SENT# item: its send is not in the counters yet
_shards = random.Random()  # which counters shard an ADD goes to (spreading, not secrecy)
T = TypeVar("T")


def unique_name(metric: str) -> str:
    return f"{metric}_unique"


def metric_of(item: Mapping[str, Any]) -> str | None:
    """The counter an events-table item feeds (None: not an engagement metric)."""
    kind = item.get("type")
    if kind == "send":  # counted by the send path (send_counters), never from an event
        return None
    if kind == "bounce":
        return "bounce" if item.get("bounce_type") == PERMANENT else "bounce_transient"
    if kind == "open" and item.get("machine"):
        return "open_machine"
    if kind == "click" and item.get("machine"):
        return "click_machine"
    return kind if kind in METRICS else None


@dataclass(frozen=True)
class Counters:
    totals: dict[str, int] = field(default_factory=dict)
    uniques: dict[str, int] = field(default_factory=dict)
    unavailable: frozenset[str] = frozenset()  # metrics this view cannot know

    def total(self, metric: str) -> int:
        return self.totals.get(metric, 0)

    def event_metrics(self) -> Counters:
        """The part of these counters the events indexes can recompute (no ``send``, no
        ``delivery``)."""
        totals = {m: n for m, n in self.totals.items() if m not in NOT_RECOUNTED}
        return Counters(totals=totals, uniques=dict(self.uniques), unavailable=NOT_RECOUNTED)

    def unique(self, metric: str) -> int | None:
        """Distinct subscribers for open/click; at-most-once metrics are their own uniques."""
        if metric in UNIQUE_METRICS:
            return self.uniques.get(metric, 0)
        return None

    def value(self, name: str) -> int:
        if name.endswith("_unique"):
            return self.uniques.get(name.removesuffix("_unique"), 0)
        return self.total(name)

    def rows(self) -> list[dict[str, Any]]:
        """The report: label, total, unique (or None) and rate (or None) per row."""
        out = []
        for label, metric, numerator, denominator in REPORT_ROWS:
            rate = None
            known = numerator not in self.unavailable and denominator not in self.unavailable
            if numerator and denominator and known and self.total(denominator):
                rate = self.value(numerator) / self.total(denominator)
            total = None if metric in self.unavailable else self.total(metric)
            out.append({"metric": label, "total": total, "unique": self.unique(metric), "rate": rate})
        return out

    @classmethod
    def from_item(cls, item: Mapping[str, Any] | None) -> Counters:
        item = from_dynamo(dict(item or {}))
        totals = {m: int(item[m]) for m in METRICS if m in item}
        uniques = {m: int(item[unique_name(m)]) for m in UNIQUE_METRICS if unique_name(m) in item}
        return cls(totals=totals, uniques=uniques)

    @classmethod
    def from_events(cls, items: Iterable[Mapping[str, Any]]) -> Counters:
        totals: Counter[str] = Counter()
        openers: dict[str, set[str]] = {m: set() for m in UNIQUE_METRICS}
        for item in items:
            metric = metric_of(item)
            if metric is None:
                continue
            totals[metric] += 1
            if metric in openers:
                openers[metric].add(str(item["PK"]))
        uniques = {m: len(s) for m, s in openers.items() if s}
        return cls(
            totals={m: n for m, n in totals.items() if m not in NOT_RECOUNTED},
            uniques=uniques,
            unavailable=NOT_RECOUNTED,
        )


def counter_update(
    table: str, pk: str, sk: str, metric: str, *, unique: bool, at: str
) -> TransactWriteItemTypeDef:
    """A TransactWriteItems ``Update`` that ADDs 1 to ``metric`` (and its unique count)."""
    adds = {metric: 1, **({unique_name(metric): 1} if unique else {})}
    return counter_adds(table, pk, sk, adds, at=at)


def counter_adds(
    table: str, pk: str, sk: str, adds: Mapping[str, int], *, at: str
) -> TransactWriteItemTypeDef:
    """A TransactWriteItems ``Update`` that ADDs several amounts to one counters item
    (``{"delivery": 7, "open": 3, "open_unique": 2}``): a transaction may touch an item once,
    so a batch folds all its changes to one counters item into one action. The ADD goes to one
    of the item's :data:`~shared.store.keys.COUNTER_SHARDS` shards, picked at random (a retry
    may pick another): concurrent counting spreads over 16 items and 16 partition keys, and a
    read sums them (:meth:`StatsStore.source`)."""
    amounts = {name: int(n) for name, n in adds.items() if n}
    if not amounts:
        raise ValueError("nothing to add")
    pk = keys.counter_shard_pk(pk, _shards.randrange(keys.COUNTER_SHARDS))
    names = {f"#c{i}": name for i, name in enumerate(amounts)}
    vals: dict[str, Any] = {f"c{i}": n for i, n in enumerate(amounts.values())}
    expression = "ADD " + ", ".join(f"#c{i} :c{i}" for i in range(len(amounts)))
    return {
        "Update": {
            "TableName": table,
            "Key": key(pk, sk),
            "UpdateExpression": expression + " SET updated_at = :at",
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values(at=at, **vals),
        }
    }


# Every source's counts per UTC day (the console's overview): ``STATS#~all`` / ``DAY#<date>``,
# sharded like every counters item. "~" is not allowed in a source id, so no source meets it.
DAILY_SCOPE = "~all"
DAY = "DAY"


def day_key(at: str) -> tuple[str, str]:
    """(PK, SK) of the day counters item of the UTC day of ``at`` (an ISO time)."""
    return keys.stats_pk(DAILY_SCOPE), f"{DAY}{keys.SEP}{clock.iso(clock.parse_iso(at))[:10]}"


def day_adds(table: str, adds: Mapping[str, int], *, at: str) -> TransactWriteItemTypeDef:
    """A TransactWriteItems ``Update`` that ADDs ``adds`` to the day counters of ``at``: it joins
    the transaction of the counts it repeats, so the days always sum to the sources' counts."""
    return counter_adds(table, *day_key(at), adds, at=at)


def send_counters(
    table: str, sends: Mapping[tuple[str, str], int], *, at: str, step: str | None = None
) -> list[TransactWriteItemTypeDef]:
    """Updates that ADD ``send`` to the source and template counters of ``sends``
    (``{(source, template): n}``) and to the day of ``at``, one action per counters item; a
    sequence mail's ``step`` (its send-once step) also ADDs to the step's ``sent`` on the
    sequence's item. ``send`` is counted by the send path: a broadcast batch's marker, or the
    stats fold from a single send's ``SENT#`` entry (``shared.store.stream_counts``); SES Send
    events are not published (they would repeat what the send path knows)."""
    return grouped_send_counters(table, {(s, t, step, at): n for (s, t), n in sends.items()}, at=at)


def grouped_send_counters(
    table: str, sends: Mapping[tuple[str, str, str | None, str], int], *, at: str
) -> list[TransactWriteItemTypeDef]:
    """:func:`send_counters` of sends of several steps and days: ``{(source, template, step,
    time of the send): n}``, merged into one action per counters item."""
    per_item: dict[tuple[str, str], Counter[str]] = {}
    for (source, template, step, sent_at), n in sends.items():
        for item, adds in send_adds(source, template, step, sent_at, n).items():
            per_item.setdefault(item, Counter()).update(adds)
    return item_adds(table, per_item, at=at)


def send_adds(
    source: str, template: str, step: str | None, sent_at: str, n: int = 1
) -> dict[tuple[str, str], Counter[str]]:
    """What ``n`` sends add to each counters item: ``send`` on the source (and the step's ``sent``
    of a sequence mail), on the template and on the day of ``sent_at``."""
    counters = (keys.stats_pk(source), keys.COUNTERS)
    per_item = {counters: Counter(send=n)}
    code = sequence_step(step)
    if code is not None:
        per_item[counters][step_attribute(code, "send")] += n
    per_item.setdefault(keys.template_stats_key(template), Counter())["send"] += n
    per_item.setdefault(day_key(sent_at), Counter())["send"] += n
    return per_item


def event_adds(
    metric: str, source: str | None, template: str | None, at: str
) -> dict[tuple[str, str], Counter[str]]:
    """What one SES event of ``metric`` adds to each counters item: its source's and its day's
    (with a source), its template's. The engagement consumer's transaction (``EventWrite.counters``)
    and the stats fold's runs (a Delivery) both count with it."""
    per_item: dict[tuple[str, str], Counter[str]] = {}
    if source:
        per_item[(keys.stats_pk(source), keys.COUNTERS)] = Counter({metric: 1})
        per_item[day_key(at)] = Counter({metric: 1})
    if template:
        per_item[keys.template_stats_key(template)] = Counter({metric: 1})
    return per_item


def item_adds(
    table: str, per_item: Mapping[tuple[str, str], Mapping[str, int]], *, at: str
) -> list[TransactWriteItemTypeDef]:
    """One :func:`counter_adds` per counters item (``{(PK, SK): {name: n}}``); an item whose
    amounts sum to nothing is left out."""
    return [
        counter_adds(table, pk, sk, adds, at=at) for (pk, sk), adds in per_item.items() if any(adds.values())
    ]


def signup_counters(table: str, metric: str, *, at: str) -> list[TransactWriteItemTypeDef]:
    """TransactWriteItems ``Update``s that ADD 1 to the sign-up metric ``metric`` (and to its
    day); they join the transaction of the effect they count (the pending item's mail, the
    confirmation, the single opt-in), so the count and the effect never disagree."""
    if metric not in SIGNUP_METRICS:
        raise ValueError(f"not a sign-up metric: {metric!r}")
    return source_and_day_adds(table, SIGNUP_SOURCE, {metric: 1}, at=at)


def source_and_day_adds(
    table: str, source: str, adds: Mapping[str, int], *, at: str
) -> list[TransactWriteItemTypeDef]:
    """``Update``s that ADD ``adds`` to ``source``'s counters and to the day counters of ``at``,
    for one transaction (the day always repeats the source)."""
    return [
        counter_adds(table, keys.stats_pk(source), keys.COUNTERS, adds, at=at),
        day_adds(table, adds, at=at),
    ]


@dataclass(frozen=True)
class SignupCounts:
    """Sign-ups since the counters exist: ``signups`` (double opt-in, confirmation mailed),
    ``confirmed`` and ``single_opt_in``; the rate is confirmed per sign-up (None: none yet)."""

    signups: int = 0
    confirmed: int = 0
    single_opt_in: int = 0

    @property
    def confirmation_rate(self) -> float | None:
        return self.confirmed / self.signups if self.signups else None

    def public(self) -> dict[str, Any]:
        return public_fields(self, "signups confirmed confirmation_rate single_opt_in")

    @classmethod
    def from_item(cls, item: Mapping[str, Any] | None) -> SignupCounts:
        plain = from_dynamo(dict(item or {}))
        return cls(
            signups=int(plain.get(SIGNUP, 0)),
            confirmed=int(plain.get(CONFIRM, 0)),
            single_opt_in=int(plain.get(SINGLE_OPT_IN, 0)),
        )


def contended(exc: ClientError) -> bool:
    """Whether ``exc`` is a transaction DynamoDB cancelled only because a concurrent
    transaction touched one of its items (a hot counters item): running it again is safe."""
    if exc.response.get("Error", {}).get("Code") != "TransactionCanceledException":
        return False
    codes = {str(r.get("Code")) for r in exc.response.get("CancellationReasons") or []}
    return TRANSACTION_CONFLICT in codes and codes <= {TRANSACTION_CONFLICT, "None"}


def busy(exc: ClientError) -> bool:
    """Whether DynamoDB refused ``exc``'s request only because an item was busy: a transaction
    cancelled by concurrent transactions or by throttling on its items (no condition failed,
    nothing invalid), or a request throttled as a whole after botocore's own retries. Nothing
    was written: the same writes may succeed a moment later."""
    code = exc.response.get("Error", {}).get("Code")
    if code in THROTTLED:
        return True
    if code != "TransactionCanceledException":
        return False
    codes = {str(r.get("Code")) for r in exc.response.get("CancellationReasons") or []}
    return bool(codes & BUSY_REASONS) and codes <= BUSY_REASONS | {"None"}


def retry_contended(
    write: Callable[[], T],
    *,
    sleep: Callable[[float], None] = time.sleep,
    retryable: Callable[[ClientError], bool] = contended,
) -> T:
    """``write()`` (a transaction holding a counter ADD), run again while a concurrent
    transaction on its counters item cancels it (:data:`CONTENDED_RETRY`; ``retryable=busy``:
    also while its items are throttled); then :class:`ConcurrentModification` (a 503: the
    same request succeeds when retried)."""
    for _ in CONTENDED_RETRY.tries(sleep=sleep):
        try:
            return write()
        except ClientError as exc:
            if not retryable(exc):
                raise
    raise ConcurrentModification("a counters item stayed contended: retry")


# ----- send counts that could not be added with their send (counters off the send path) ------
def settle_send(
    client: DynamoDBClient,
    table: str,
    sent_key: Mapping[str, Any],
    source: str,
    template: str,
    *,
    at: str,
    step: str | None = None,
) -> bool:
    """ADD 1 to ``send`` of ``source``'s and ``template``'s counters for the ``SENT#`` item at
    ``sent_key`` that carries :data:`COUNT_PENDING`, and remove that mark, in one transaction:
    the mark is the send's "not counted yet", so the send is counted once however many callers
    settle it. True: counted now; False: the mark was gone (counted before). Busy counters
    raise the ``ClientError`` (:func:`busy`)."""
    unmark: TransactWriteItemTypeDef = {
        "Update": {
            "TableName": table,
            "Key": dict(sent_key),
            "UpdateExpression": "REMOVE #pending",
            "ConditionExpression": "attribute_exists(#pending)",
            "ExpressionAttributeNames": {"#pending": COUNT_PENDING},
        }
    }
    return _settle(client, unmark, send_counters(table, {(source, template): 1}, at=at, step=step))


def uncounted_add(table: str, source: str, template: str, n: int, *, at: str) -> TransactWriteItemTypeDef:
    """An ``Update`` that ADDs ``n`` sends of (source, template) to its ledger of sends still to
    be counted (``STATS#<source>`` / ``UNCOUNTED#<template>``): it joins the transaction that
    records the sends (a broadcast batch's marker), so they are in the ledger exactly once."""
    pk, sk = keys.uncounted_key(source, template)
    return {
        "Update": {
            "TableName": table,
            "Key": key(pk, sk),
            "UpdateExpression": "ADD #send :n SET #source = :source, #template = :template, updated_at = :at",
            "ExpressionAttributeNames": {"#send": "send", "#source": "source", "#template": "template"},
            "ExpressionAttributeValues": values(n=int(n), source=source, template=template, at=at),
        }
    }


def settle_uncounted(
    client: DynamoDBClient, table: str, source: str, template: str, n: int, *, at: str
) -> bool:
    """Move ``n`` sends from the (source, template) ledger to the counters in one transaction,
    conditioned on the ledger holding at least ``n``: ledger + counters stay equal to the sends
    whoever settles, and however often. True: moved; False: fewer than ``n`` left (another
    caller settled them). Busy counters raise the ``ClientError`` (:func:`busy`)."""
    if n <= 0:
        return False
    pk, sk = keys.uncounted_key(source, template)
    take: TransactWriteItemTypeDef = {
        "Update": {
            "TableName": table,
            "Key": key(pk, sk),
            "UpdateExpression": "ADD #send :minus SET updated_at = :at",
            "ConditionExpression": "#send >= :n",
            "ExpressionAttributeNames": {"#send": "send"},
            "ExpressionAttributeValues": values(minus=-int(n), n=int(n), at=at),
        }
    }
    return _settle(client, take, send_counters(table, {(source, template): n}, at=at))


def _settle(
    client: DynamoDBClient, guard: TransactWriteItemTypeDef, counters: list[TransactWriteItemTypeDef]
) -> bool:
    try:
        transact(client, [Action("guard", guard), *(Action("counters", c) for c in counters)])
    except TransactionConflict as exc:
        if exc.failed("guard"):
            return False
        raise
    return True


def settle_soon(settle: Callable[[], bool], *, sleep: Callable[[float], None] = time.sleep) -> bool | None:
    """Run ``settle`` (:func:`settle_send` / :func:`settle_uncounted`) again while its counters
    are :func:`busy` (:data:`CONTENDED_RETRY`). None: still busy after the retries; the count
    stays pending and the engagement consumer settles it from the mail's SES event
    (``SendLog.record_evidence``)."""
    try:
        return retry_contended(settle, sleep=sleep, retryable=busy)
    except ConcurrentModification:
        return None


def active_count(item: Mapping[str, Any] | None) -> int:
    """The active executions of a summed ``ACTIVE`` item. Never below 0: executions started
    before the count existed end with a -1 that no +1 preceded (docs/console.md)."""
    return max(0, int((item or {}).get("active", 0)))


def execution_counts(item: Mapping[str, Any] | None) -> dict[str, int]:
    """A summed ``ACTIVE`` item's counts: active (:func:`active_count`), started and completed
    (each 0 before its first ADD: they began with the version that added them)."""
    found = item or {}
    return {
        "active": active_count(item),
        "started": int(found.get("started", 0)),
        "completed": int(found.get("completed", 0)),
    }


def sum_shards(items: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """One counters item from its shards: every number summed, other fields of the latest."""
    total: dict[str, Any] = {}
    for item in sorted(items, key=lambda i: str(i.get("updated_at", ""))):
        for name, value in item.items():
            if name in ("PK", "SK"):
                continue
            if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
                total[name] = total.get(name, 0) + value
            else:
                total[name] = value
    return total


class StatsStore(TableAdapter):
    def __init__(self, table_name: str, events_table_name: str, client: DynamoDBClient | None = None) -> None:
        super().__init__(table_name, client)
        self.events_table = events_table_name

    # ----- counters ---------------------------------------------------------------------
    def source(self, source: str) -> Counters:
        return self._get(keys.stats_pk(source), keys.COUNTERS)

    def template(self, template: str) -> Counters:
        return self._get(*keys.template_stats_key(template))

    def sources_of(self, sources: Iterable[str]) -> dict[str, Counters]:
        """The counters of several sources (:meth:`summed`)."""
        found = self.summed([(keys.stats_pk(source), keys.COUNTERS) for source in dict.fromkeys(sources)])
        return {keys.counter_scope(pk)[0]: Counters.from_item(item) for (pk, _), item in found.items()}

    def steps(self, sequence_id: str) -> dict[str, dict[str, int]]:
        """A sequence's counts per step code (:func:`step_counts`): its counters item's shards,
        one BatchGetItem."""
        return step_counts(self._item(keys.stats_pk(sequence_id), keys.COUNTERS))

    def active_of(self, sequence_ids: Iterable[str]) -> dict[str, int]:
        """Each sequence's active executions (``keys.active_key``: the count kept with the EXEC
        pairs), without reading an ``EXEC#`` partition."""
        return {s: counts["active"] for s, counts in self.executions_of(sequence_ids).items()}

    def executions_of(self, sequence_ids: Iterable[str]) -> dict[str, dict[str, int]]:
        """Each sequence's executions: ``active`` now, ``started`` and ``completed`` (ran to
        their last step) since the counts began, from the same item (:func:`execution_counts`)."""
        found = self.summed([keys.active_key(s) for s in dict.fromkeys(sequence_ids)])
        return {keys.counter_scope(pk)[0]: execution_counts(item) for (pk, _), item in found.items()}

    def summed(self, wanted: Iterable[tuple[str, str]]) -> dict[tuple[str, str], dict[str, Any] | None]:
        """Several counters items (``(STATS#<scope>, SK)``), each summed over its 16 shards (None:
        no shard exists): 100 keys per BatchGetItem, the requests at once (7 items: 2 requests
        instead of 7)."""
        by_key = {
            (shard, sk): (pk, sk) for pk, sk in dict.fromkeys(wanted) for shard in keys.counter_shard_pks(pk)
        }
        asked = [key(shard, sk) for shard, sk in by_key]
        chunks = [asked[i : i + 100] for i in range(0, len(asked), 100)]
        with ThreadPoolExecutor(max_workers=8, thread_name_prefix="counters") as pool:
            pages = list(pool.map(self._read_all, chunks))
        shards: dict[tuple[str, str], list[dict[str, Any]]] = {item: [] for item in by_key.values()}
        for item in (item for page in pages for item in page):
            shards[by_key[(str(item["PK"]), str(item["SK"]))]].append(item)
        return {item: sum_shards(found) if found else None for item, found in shards.items()}

    def _get(self, pk: str, sk: str) -> Counters:
        return Counters.from_item(self._item(pk, sk))

    def _item(self, pk: str, sk: str) -> dict[str, Any] | None:
        """The counters item at (pk, sk): its shards read at once (one BatchGetItem, strongly
        consistent) and summed (None: no shard exists)."""
        return self.summed([(pk, sk)])[(pk, sk)]

    def _read_all(self, wanted: list[Any]) -> list[dict[str, Any]]:
        """Every item of ``wanted`` (at most 100 keys) that exists, strongly consistent."""
        found: list[dict[str, Any]] = []
        while wanted:
            request: Any = {self.table: {"Keys": wanted, "ConsistentRead": True}}
            answer = self.client.batch_get_item(RequestItems=request)
            found += [deserialize(i) for i in answer.get("Responses", {}).get(self.table, [])]
            unread: Any = answer.get("UnprocessedKeys", {}).get(self.table, {})
            wanted = list(unread.get("Keys", []))
            if wanted:
                time.sleep(0.05)
        return found

    def daily(self, first: date, days: int) -> list[dict[str, int]]:
        """Every source's counts per UTC day from ``first`` on, ``days`` of them (one dict of
        metric -> count per day; uniques as ``open_unique``/``click_unique``): one Query per
        shard of the day counters for the window's days (``DAY#<first>`` to ``DAY#<last>``),
        the 16 at once. Only the days that had counts are read: 90 days cost 16 small Queries
        where a read of each day's 16 keys would be 1,440 keys (15 BatchGetItem)."""
        dates = [(first + timedelta(days=n)).isoformat() for n in range(days)]
        low, high = f"{DAY}{keys.SEP}{dates[0]}", f"{DAY}{keys.SEP}{dates[-1]}"

        shard_queries = [
            {
                "TableName": self.table,
                "KeyConditionExpression": "PK = :pk AND SK BETWEEN :low AND :high",
                "ExpressionAttributeValues": values(pk=pk, low=low, high=high),
                "ConsistentRead": True,
            }
            for pk in keys.counter_shard_pks(keys.stats_pk(DAILY_SCOPE))
        ]
        pages = self._query_at_once(shard_queries, thread_name_prefix="daily")
        per_day: dict[str, list[dict[str, Any]]] = {d: [] for d in dates}
        for item in (item for page in pages for item in page):
            per_day.setdefault(str(item["SK"]).split(keys.SEP, 1)[1], []).append(item)
        return [
            {name: int(v) for name, v in sum_shards(per_day[d]).items() if isinstance(v, (int, Decimal))}
            for d in dates
        ]

    def signups(self) -> SignupCounts:
        """The sign-up counters (one GetItem of ``STATS#signup`` / ``COUNTERS``)."""
        return SignupCounts.from_item(self._item(keys.stats_pk(SIGNUP_SOURCE), keys.COUNTERS))

    def sources(self) -> dict[str, Counters]:
        """Every source's counters (a filtered scan: an operator command, not a hot path)."""
        shards: dict[str, list[dict[str, Any]]] = {}
        start: dict[str, Any] | None = None
        while True:
            page = self.client.scan(
                TableName=self.table,
                FilterExpression="SK = :sk AND begins_with(PK, :prefix)",
                ExpressionAttributeValues=values(sk=keys.COUNTERS, prefix=f"{keys.STATS}{keys.SEP}"),
                **page_start(start),
            )
            for raw in page.get("Items", []):
                item = deserialize(raw)
                scope, _ = keys.counter_scope(str(item["PK"]))
                shards.setdefault(scope, []).append(item)
            start = page.get("LastEvaluatedKey")
            if not start:
                return {
                    scope: Counters.from_item(sum_shards(found)) for scope, found in sorted(shards.items())
                }

    # ----- recomputed from the events table ------------------------------------------------
    def events(self, *, source: str | None = None, template: str | None = None, since: str | None = None):  # type: ignore[no-untyped-def]
        """Events-table items of one source or template (optionally from ``since`` on), in
        time order: the index's shards queried at once and merged."""
        if (source is None) == (template is None):
            raise ValueError("name exactly one of source or template")
        index, attribute, value = (
            (SOURCE_INDEX, INDEXED["source"], source)
            if source is not None
            else (TEMPLATE_INDEX, INDEXED["template"], template)
        )
        condition = "#k = :v AND begins_with(SK, :evt)"
        params: dict[str, Any] = {"v": value, "evt": f"{keys.EVT}{keys.SEP}"}
        if since:
            condition = "#k = :v AND SK BETWEEN :from AND :to"
            params = {"v": value, "from": f"{keys.EVT}{keys.SEP}{since}", "to": f"{keys.EVT}{keys.SEP}\uffff"}
            params.pop("evt", None)
        assert value is not None

        shard_queries = [
            {
                "TableName": self.events_table,
                "IndexName": index,
                "KeyConditionExpression": condition,
                "ExpressionAttributeNames": {"#k": attribute},
                "ExpressionAttributeValues": values(**{**params, "v": index_key}),
            }
            for index_key in keys.index_keys(value)
        ]
        pages = self._query_at_once(shard_queries)
        yield from heapq.merge(*pages, key=lambda item: str(item["SK"]))

    def _query_at_once(
        self, queries: list[dict[str, Any]], thread_name_prefix: str = ""
    ) -> list[list[dict[str, Any]]]:
        """Runs the Queries (each to its last page) at once, one thread each: every Query's
        items, deserialized, in the order of ``queries``."""

        def run(query: dict[str, Any]) -> list[dict[str, Any]]:
            return [deserialize(raw) for raw in query_all(self.client, **query)]

        with ThreadPoolExecutor(max_workers=len(queries), thread_name_prefix=thread_name_prefix) as pool:
            return list(pool.map(run, queries))

    def recompute(
        self, *, source: str | None = None, template: str | None = None, since: str | None = None
    ) -> Counters:
        counters = Counters.from_events(self.events(source=source, template=template, since=since))
        if template is not None:
            # Unsubscribes are counted per source only (shared.web.unsubscribe): keep the scopes alike.
            counters.totals.pop("unsubscribe", None)
        return counters


def parse_since(value: str) -> str:
    """``2026-01-31`` or an ISO timestamp -> the ISO form event sort keys use (UTC)."""
    try:
        moment = clock.parse_iso(value.strip())
    except ValueError:
        raise ValueError(f"not a date: {value!r} (use 2026-01-31 or 2026-01-31T12:00)") from None
    return clock.iso(moment)


def report(
    stats: StatsStore, *, source: str | None = None, template: str | None = None, since: str | None = None
) -> Counters:
    """The numbers ``mailstep stats`` shows: the counters, or the events from ``since`` on."""
    if since is not None:
        return stats.recompute(source=source, template=template, since=parse_since(since))
    if source is not None:
        return stats.source(source)
    if template is not None:
        return stats.template(template)
    raise ValueError("name a source or a template")
