"""List health: subscribers by status and their changes per day, folded from the main table's
change stream (docs/data-model.md, "List health").

Every path that changes a subscriber (the events API, an unsubscribe link, the preference
centre, the sunset, a suppression, an erase, the CLI...) writes the ``PROFILE`` item, so its
stream records (``NEW_AND_OLD_IMAGES``) see every change by construction. A record's effect is
the difference of its old and new image (:func:`effect`):

- the totals ``STATS#~list`` / ``TOTAL`` (16 shards, summed on read): ``profiles``,
  ``subscribed``, ``unsubscribed``, ``suppressed`` and ``mailable`` (subscribed, not suppressed);
- the day counters ``STATS#~all`` / ``DAY#<date>`` (the console's overview already reads them):
  ``list_new`` (created subscribed), ``list_resubscribed``, ``list_unsubscribed`` (subscribed ->
  unsubscribed, any path), ``list_suppressed``, ``list_erased`` and ``list_net`` (the change of
  ``mailable``), on the UTC day of the record.

Exactly once per record under at-least-once delivery: each item's records reach the stream in
the order of its writes, so the fold keeps, per item, the sequence number of the last record it
counted (``keys.fold_mark_key``: a mark, zero-padded so strings compare as numbers) and sets it in
the SAME TransactWriteItems as the counts' ADDs, conditioned on the mark still being below the
first record it counts. A refused mark comes back with the item (``ALL_OLD``): the records at or
below it are dropped and the rest written again. A mark outlives the stream's 24 hours of
retention by a day (``ttl``), so no redelivered record finds it gone. Records that change no
count (a tag, an attribute) write nothing.

The stream's records do not name their shard (Lambda hands a batch without its shard id), so the
mark is per item, not per shard; per item is also what DynamoDB Streams orders.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from shared.core import clock
from shared.core.models import SUBSCRIBED, UNSUBSCRIBED
from shared.store import keys
from shared.store.dynamo import (
    CONDITION_FAILED,
    NO_REASON,
    Action,
    TableAdapter,
    deserialize,
    key,
    try_transact,
    values,
)
from shared.store.stats import BUSY_REASONS, CONTENDED_RETRY, counter_adds, day_key

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

LIST_SCOPE = "~list"  # "~" is not allowed in a source id: no source meets it
TOTAL = "TOTAL"
BACKFILL = "BACKFILL"
TOTALS = ("profiles", SUBSCRIBED, UNSUBSCRIBED, "suppressed", "mailable")
DAILY = ("list_new", "list_resubscribed", "list_unsubscribed", "list_suppressed", "list_erased", "list_net")
SEQUENCE_DIGITS = 40  # DynamoDB Streams sequence numbers have 21 to 40 digits
MARK_TTL_DAYS = 2  # the stream keeps a record 24 hours: a redelivery always finds its mark
# marks per transaction: TransactWriteItems takes 100 actions, the rest are the counts' ADDs
# (the totals, and one day item per UTC day the records span)
MARKS_PER_TRANSACTION = 90
# a transaction refused for a mark is written again without the counted records: bounded by the
# items of the batch; the rest (throttling, a conflict on a counters shard) backs off
MAX_ATTEMPTS = 32


def total_key() -> tuple[str, str]:
    return keys.stats_pk(LIST_SCOPE), TOTAL


def padded(sequence_number: str) -> str:
    """A stream sequence number as a string that compares like the number."""
    if not sequence_number.isdigit() or len(sequence_number) > SEQUENCE_DIGITS:
        raise ValueError(f"not a stream sequence number: {sequence_number!r}")
    return sequence_number.zfill(SEQUENCE_DIGITS)


@dataclass(frozen=True)
class State:
    status: str
    suppressed: bool

    @property
    def mailable(self) -> bool:
        return self.status == SUBSCRIBED and not self.suppressed


def state_of(image: Mapping[str, Any] | None) -> State | None:
    """A profile's list state from a stream image (DynamoDB JSON; None: no profile)."""
    if not image:
        return None
    item = deserialize(dict(image))
    return State(status=str(item.get("status") or SUBSCRIBED), suppressed=bool(item.get("suppressed")))


def effect(old: State | None, new: State | None) -> tuple[Counter[str], Counter[str]]:
    """(adds to the totals, adds to the day) of a profile going from ``old`` to ``new``."""
    totals: Counter[str] = Counter()
    day: Counter[str] = Counter()
    for state, sign in ((old, -1), (new, 1)):
        if state is not None:
            totals["profiles"] += sign
            totals[state.status] += sign
            totals["suppressed"] += sign * state.suppressed
            totals["mailable"] += sign * state.mailable
    if new is not None and new.status == SUBSCRIBED and (old is None or old.status != SUBSCRIBED):
        day["list_new" if old is None else "list_resubscribed"] += 1
    if old is not None and new is not None and old.status == SUBSCRIBED and new.status != SUBSCRIBED:
        day["list_unsubscribed"] += 1
    if new is not None and new.suppressed and not (old is not None and old.suppressed):
        day["list_suppressed"] += 1
    if old is not None and new is None:
        day["list_erased"] += 1
    day["list_net"] = totals["mailable"]
    return _nonzero(totals), _nonzero(day)


def _nonzero(counts: Counter[str]) -> Counter[str]:
    return Counter({name: n for name, n in counts.items() if n})


@dataclass(frozen=True)
class Change:
    """One stream record of a profile, with what it adds."""

    item: tuple[str, str]  # the profile's (PK, SK)
    sequence: str  # padded
    day: str  # UTC date of the record
    totals: Counter[str]
    daily: Counter[str]

    @property
    def counts(self) -> bool:
        return bool(self.totals or self.daily)


def _day(created: Any) -> str:
    """The UTC date of a record's ``ApproximateCreationDateTime`` (epoch seconds; milliseconds
    when the mapping asks for that precision)."""
    seconds = float(created) if isinstance(created, int | float | str) and str(created) else clock.epoch()
    if seconds > 1e11:
        seconds /= 1000
    return datetime.fromtimestamp(seconds, UTC).date().isoformat()


def change_of(record: Mapping[str, Any]) -> Change | None:
    """The change a stream record (Lambda's event format) makes to the list; None for a record
    that is no profile's."""
    body = record.get("dynamodb") or {}
    item_keys = body.get("Keys") or {}
    pk, sk = item_keys.get("PK", {}).get("S", ""), item_keys.get("SK", {}).get("S", "")
    if not pk.startswith(f"{keys.SUB}{keys.SEP}") or sk != keys.PROFILE:
        return None
    totals, daily = effect(state_of(body.get("OldImage")), state_of(body.get("NewImage")))
    return Change(
        item=(pk, sk),
        sequence=padded(str(body.get("SequenceNumber", ""))),
        day=_day(body.get("ApproximateCreationDateTime")),
        totals=totals,
        daily=daily,
    )


@dataclass
class FoldResult:
    counted: int = 0  # records whose counts were added now
    skipped: int = 0  # records counted before (at or below their item's mark)
    unchanged: int = 0  # records that change no count
    transactions: int = 0  # TransactWriteItems sent, refused ones included
    refused: list[str] = field(default_factory=list)  # why each refused one was


class ListHealthStore(TableAdapter):
    """The fold's writes (its transactions on busy counters shards pause with ``pause``)."""

    pause: Callable[[float], None] = staticmethod(time.sleep)

    def fold(self, records: Iterable[Mapping[str, Any]]) -> FoldResult:
        """Add the counts of ``records`` (one stream batch, in stream order) exactly once each."""
        result = FoldResult()
        per_item: dict[tuple[str, str], list[Change]] = {}
        for record in records:
            change = change_of(record)
            if change is None:
                continue
            if not change.counts:
                result.unchanged += 1
                continue
            per_item.setdefault(change.item, []).append(change)
        items = list(per_item.items())
        for start in range(0, len(items), MARKS_PER_TRANSACTION):
            self._fold_chunk(dict(items[start : start + MARKS_PER_TRANSACTION]), result)
        return result

    def _fold_chunk(self, pending: dict[tuple[str, str], list[Change]], result: FoldResult) -> None:
        busy = 0
        for _ in range(MAX_ATTEMPTS):
            pending = {item: changes for item, changes in pending.items() if changes}
            if not pending:
                return
            marks = {item: self._mark(item, changes) for item, changes in pending.items()}
            actions = [*marks.values(), *self._adds(c for changes in pending.values() for c in changes)]
            result.transactions += 1
            cancellation = try_transact(self.client, actions)
            if cancellation is None:
                result.counted += sum(len(changes) for changes in pending.values())
                return
            result.refused.append(",".join(sorted(set(cancellation.codes))) or "unknown")
            refused = [
                item for item, action in marks.items() if cancellation.code_of(action) == CONDITION_FAILED
            ]
            for item in refused:
                found = cancellation.item_of(marks[item]) or {}
                mark = str(found.get("seq", {}).get("S", ""))
                kept = [c for c in pending[item] if c.sequence > mark]
                result.skipped += len(pending[item]) - len(kept)
                pending[item] = kept
            if not refused:
                if not cancellation.known or not set(cancellation.codes) - {NO_REASON} <= BUSY_REASONS:
                    raise RuntimeError(f"list-health fold refused: {cancellation.codes}")
                self.pause(CONTENDED_RETRY.pause(min(busy, CONTENDED_RETRY.attempts)))
                busy += 1
        raise RuntimeError("list-health fold: the counts stayed contended")

    def _mark(self, item: tuple[str, str], changes: Sequence[Change]) -> Action:
        first, last = changes[0], changes[-1]
        return Action(
            "mark",
            {
                "Update": {
                    "TableName": self.table,
                    "Key": key(*keys.fold_mark_key(*item)),
                    "UpdateExpression": "SET seq = :last, #ttl = :ttl",
                    "ConditionExpression": "attribute_not_exists(seq) OR seq < :first",
                    "ExpressionAttributeNames": {"#ttl": "ttl"},
                    "ExpressionAttributeValues": values(
                        last=last.sequence, first=first.sequence, ttl=clock.ttl_after(MARK_TTL_DAYS)
                    ),
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            },
        )

    def _adds(self, changes: Iterable[Change]) -> list[Action]:
        totals: Counter[str] = Counter()
        days: dict[str, Counter[str]] = {}
        for change in changes:
            totals.update(change.totals)
            days.setdefault(change.day, Counter()).update(change.daily)
        at = clock.iso()
        adds = [(total_key(), totals)] + [
            (day_key(f"{day}T00:00:00Z"), counts) for day, counts in days.items()
        ]
        return [
            Action("counts", counter_adds(self.table, pk, sk, counts, at=at))
            for (pk, sk), counts in adds
            if any(counts.values())
        ]


class AlreadyBackfilled(RuntimeError):
    """The totals were backfilled once already (``STATS#~list`` / ``BACKFILL`` exists)."""


def backfill_key() -> tuple[str, str]:
    return keys.stats_pk(LIST_SCOPE), BACKFILL


def backfill(store: ListHealthStore, states: Iterable[State], *, at: str | None = None) -> dict[str, int]:
    """Add the subscribers ``states`` (every profile, read once) to the totals, once per
    deployment: the ADD and the ``BACKFILL`` record in one transaction, conditioned on no record.
    For a stack that had subscribers before the fold counted their changes."""
    counted: Counter[str] = Counter()
    for state in states:
        counted.update(effect(None, state)[0])
    at = at or clock.iso()
    totals = {name: counted.get(name, 0) for name in TOTALS}
    record: TransactWriteItemTypeDef = {
        "Put": {
            "TableName": store.table,
            "Item": {
                **key(*backfill_key()),
                "at": {"S": at},
                **{n: {"N": str(v)} for n, v in totals.items()},
            },
            "ConditionExpression": "attribute_not_exists(PK)",
        }
    }
    actions = [Action("backfill", record)]
    if any(totals.values()):
        actions.append(Action("counts", counter_adds(store.table, *total_key(), totals, at=at)))
    cancellation = try_transact(store.client, actions)
    if cancellation is not None:
        if cancellation.code_of(actions[0]) == CONDITION_FAILED:
            raise AlreadyBackfilled("the subscriber totals were backfilled already")
        raise RuntimeError(f"backfill refused: {cancellation.codes}")
    return totals


def totals_of(summed: Mapping[str, Any] | None) -> dict[str, int]:
    """The totals from ``STATS#~list`` / ``TOTAL`` summed over its shards (``StatsStore.summed``
    reads it in the same requests as the overview's other counters)."""
    return {name: int((summed or {}).get(name, 0)) for name in TOTALS}
