"""Counts folded from the main table's change stream: a single send's ``send`` and a sequence's
executions (docs/sending.md, "Counters are off the critical path"; docs/data-model.md).

- A single send (a sequence's mail, a transactional mail, a sign-up's confirmation, a test send)
  writes its ``SENT#`` entry alone, marked ``fold_count``; its INSERT record adds one ``send`` to
  the counters of its source (and its step's ``sent`` for a sequence mail), of its template and of
  its UTC day. A broadcast's entries carry no mark: its worker counts a batch at once
  (``shared.broadcasts.records``).
- An execution's pair is written and deleted without its sequence's count; the INSERT record of
  the subscriber's ``EXEC#`` item adds ``active`` +1 and ``started`` +1 to the sequence's
  ``ACTIVE`` item, its REMOVE record ``active`` -1, and ``completed`` +1 when the item left says
  the execution ran to its end (``ended``, ``SubscriberStore.mark_execution_ended``).

- A Delivery (the one SES event every mail has) is written by the engagement consumer alone, a
  conditional PutItem marked ``fold_count`` (``shared.engagement.consumer.FOLDED_KINDS``); its
  INSERT record in the events table's stream adds one ``delivery`` to its source's, template's
  and day's counters, as the consumer's transaction did.

The ADDs a write used to make in a transaction with its item are made once per run of records.

Exactly once. Each such item is inserted once (its Put is conditional) and deleted once, so it has
one INSERT and at most one REMOVE record. Lambda may hand a record again: a batch that failed is
retried from the same first record, whole (the mapping does not bisect a failed batch:
``specs.STATS_FOLD_FUNCTION``), possibly with more records after it, or fewer. The fold cuts a
batch's entries into runs (consecutive entries, cut only by what one transaction holds, so a
retried batch's runs start where the first attempt's did) and writes each run's counts in ONE
TransactWriteItems with the run's mark: ``FOLD#sent#<event id of the run's first record>`` /
``RUN``, created only if it does not exist, holding the sequence number of the run's last record.
A refused mark comes back with the item: the entries up to its sequence number were counted, the
next run starts after them (and its own mark says whether it was counted too). Sequence numbers
are compared within one batch, which is one shard's. A mark outlives the stream's 24 hours by a
day (``ttl``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shared.core import clock
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
from shared.store.list_health import MARK_TTL_DAYS, padded
from shared.store.stats import BUSY_REASONS, CONTENDED_RETRY, event_adds, item_adds, metric_of, send_adds

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

FOLD_COUNT = "fold_count"  # on a SENT# entry: the stats fold counts it from the stream
MARK_PREFIX = f"FOLD{keys.SEP}sent{keys.SEP}"
MARK_SK = "RUN"
# counters items per transaction: TransactWriteItems takes 100 actions, one is the run's mark
ITEMS_PER_RUN = 99
# refused transactions per batch: a refused mark moves past what it counted, busy shards back off
MAX_ATTEMPTS = 32


SEND, EXECUTION, EVENT = "send", "execution", "event"  # what an entry counts
EVENT_PREFIX = f"{keys.EVT}{keys.SEP}"


@dataclass(frozen=True)
class Entry:
    """One counted record: a single send's ``SENT#`` INSERT, an ``EXEC#`` item's INSERT or
    REMOVE, or an SES event's INSERT in the events table (a Delivery); ``adds`` is what it adds
    to each counters item (``{(PK, SK): {name: n}}``)."""

    event_id: str
    sequence: str  # padded
    kind: str  # SEND, EXECUTION or EVENT
    adds: Mapping[tuple[str, str], Mapping[str, int]] = field(hash=False)


def entry_of(record: Mapping[str, Any]) -> Entry | None:
    """What a stream record (Lambda's event format) counts; None for any other record."""
    body = record.get("dynamodb") or {}
    sort_key = (body.get("Keys") or {}).get("SK", {}).get("S", "")
    event = record.get("eventName")
    identity = (str(record.get("eventID") or ""), padded(str(body.get("SequenceNumber", ""))))
    if event == "INSERT" and sort_key.startswith(keys.SENT_PREFIX):
        item = deserialize(dict(body.get("NewImage") or {}))
        if not item.get(FOLD_COUNT):
            return None
        step = str(item.get("step") or "") or None
        adds = send_adds(str(item["source"]), str(item["template"]), step, str(item["sent_at"]))
        return Entry(*identity, SEND, adds)
    if event == "INSERT" and sort_key.startswith(EVENT_PREFIX):
        item = deserialize(dict(body.get("NewImage") or {}))
        metric = metric_of(item)
        if not item.get(FOLD_COUNT) or metric is None:
            return None
        return Entry(
            *identity, EVENT, event_adds(metric, item.get("source"), item.get("template"), item["at"])
        )
    if event in ("INSERT", "REMOVE") and sort_key.startswith(keys.EXEC_PREFIX):
        sequence_id = keys.sequence_from_exec(sort_key)
        if event == "INSERT":
            counts = {"active": 1, "started": 1}
        else:
            left = deserialize(dict(body.get("OldImage") or {}))
            counts = {"active": -1, "completed": int(left.get("ended") == keys.EXECUTION_COMPLETED)}
        return Entry(*identity, EXECUTION, {keys.active_key(sequence_id): counts})
    return None


@dataclass
class StreamFoldResult:
    sends: int = 0  # single sends counted now
    executions: int = 0  # execution starts and ends counted now
    events: int = 0  # SES events (Deliveries) counted now
    skipped: int = 0  # entries a run's mark says were counted before
    transactions: int = 0  # TransactWriteItems sent, refused ones included
    refused: list[str] = field(default_factory=list)  # why each refused one was


class StreamCountFold(TableAdapter):
    """The fold's writes (a transaction on busy counters shards pauses with ``pause``)."""

    pause: Callable[[float], None] = staticmethod(time.sleep)

    def fold(self, records: Iterable[Mapping[str, Any]]) -> StreamFoldResult:
        """Add what ``records`` (one stream batch, in stream order) count, exactly once each."""
        result = StreamFoldResult()
        entries = [entry for entry in map(entry_of, records) if entry is not None]
        busy = 0
        while entries:
            if len(result.refused) >= MAX_ATTEMPTS:
                raise RuntimeError("stream count fold: the counts stayed contended")
            run = _run(entries)
            mark = self._mark(run[0], run[-1])
            actions = [mark, *(Action("counts", update) for update in self._counts(run))]
            result.transactions += 1
            cancellation = try_transact(self.client, actions)
            if cancellation is None:
                result.sends += sum(e.kind == SEND for e in run)
                result.executions += sum(e.kind == EXECUTION for e in run)
                result.events += sum(e.kind == EVENT for e in run)
                entries = entries[len(run) :]
                continue
            result.refused.append(",".join(sorted(set(cancellation.codes))) or "unknown")
            if cancellation.code_of(mark) == CONDITION_FAILED:
                found = deserialize(cancellation.item_of(mark) or {})
                through = str(found.get("through", ""))
                left = [e for e in entries if e.sequence > through]
                result.skipped += len(entries) - len(left)
                entries = left
                continue
            if not cancellation.known or not set(cancellation.codes) - {NO_REASON} <= BUSY_REASONS:
                raise RuntimeError(f"stream count fold refused: {cancellation.codes}")
            self.pause(CONTENDED_RETRY.pause(min(busy, CONTENDED_RETRY.attempts)))
            busy += 1
        return result

    def _mark(self, first: Entry, last: Entry) -> Action:
        return Action(
            "mark",
            {
                "Update": {
                    "TableName": self.table,
                    "Key": key(*mark_key(first.event_id)),
                    "UpdateExpression": "SET through = :through, #ttl = :ttl",
                    "ConditionExpression": "attribute_not_exists(PK)",
                    "ExpressionAttributeNames": {"#ttl": "ttl"},
                    "ExpressionAttributeValues": values(
                        through=last.sequence, ttl=clock.ttl_after(MARK_TTL_DAYS)
                    ),
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            },
        )

    def _counts(self, run: Sequence[Entry]) -> list[TransactWriteItemTypeDef]:
        per_item: dict[tuple[str, str], Counter[str]] = {}
        for entry in run:
            for item, adds in entry.adds.items():
                per_item.setdefault(item, Counter()).update(adds)
        return item_adds(self.table, per_item, at=clock.iso())


def mark_key(event_id: str) -> tuple[str, str]:
    """(PK, SK) of the mark of the run that starts at the stream record ``event_id``."""
    if not event_id:
        raise ValueError("a stream record without an eventID")
    return f"{MARK_PREFIX}{event_id}", MARK_SK


def _run(entries: Sequence[Entry]) -> list[Entry]:
    """The longest prefix of ``entries`` whose counters items fit one transaction beside the mark:
    it depends only on the entries themselves, so a retried batch cuts the same runs."""
    items: set[tuple[str, str]] = set()
    for index, entry in enumerate(entries):
        wanted = items | set(entry.adds)
        if len(wanted) > ITEMS_PER_RUN:
            return list(entries[:index])
        items = wanted
    return list(entries)
