"""Send counts folded from the main table's change stream (docs/sending.md, "Counters are off
the critical path").

A single send (a sequence's mail, a transactional mail, a sign-up's confirmation, a test send)
writes its ``SENT#`` entry alone, marked ``fold_count``; the stats-fold function reads the entry's
INSERT record and adds one ``send`` to the counters of its source (and its step's ``sent`` for a
sequence mail), of its template and of its UTC day: the ADDs a send used to make in a transaction
with its entry, now made once per stream batch. A broadcast's entries carry no mark: its worker
counts a batch at once (``shared.broadcasts.records``).

Exactly once. A ``SENT#`` entry is inserted once (its Put is conditional), so it has one INSERT
record. Lambda may hand a record again: a batch that failed is retried from the same first record,
whole (the mapping does not bisect a failed batch: ``specs.STATS_FOLD_FUNCTION``), possibly with
more records after it, or fewer. The fold cuts a batch's entries into runs (consecutive entries,
cut only by what one transaction holds, so a retried batch's runs start where the first attempt's
did) and writes each run's counts in ONE TransactWriteItems with the run's mark:
``FOLD#sent#<event id of the run's first record>`` / ``RUN``, created only if it does not exist,
holding the sequence number of the run's last record. A refused mark comes back with the item:
the entries up to its sequence number were counted, the next run starts after them (and its own
mark says whether it was counted too). Sequence numbers are compared within one batch, which is
one shard's. A mark outlives the stream's 24 hours by a day (``ttl``).
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
from shared.store.stats import BUSY_REASONS, CONTENDED_RETRY, day_key, grouped_send_counters

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

FOLD_COUNT = "fold_count"  # on a SENT# entry: the stats fold counts it from the stream
MARK_PREFIX = f"FOLD{keys.SEP}sent{keys.SEP}"
MARK_SK = "RUN"
# counters items per transaction: TransactWriteItems takes 100 actions, one is the run's mark
ITEMS_PER_RUN = 99
# refused transactions per batch: a refused mark moves past what it counted, busy shards back off
MAX_ATTEMPTS = 32


@dataclass(frozen=True)
class Entry:
    """One counted send: the INSERT record of a ``SENT#`` entry marked ``fold_count``."""

    event_id: str
    sequence: str  # padded
    source: str
    template: str
    step: str
    sent_at: str


def entry_of(record: Mapping[str, Any]) -> Entry | None:
    """The send a stream record (Lambda's event format) counts; None for any other record."""
    body = record.get("dynamodb") or {}
    sort_key = (body.get("Keys") or {}).get("SK", {}).get("S", "")
    if record.get("eventName") != "INSERT" or not sort_key.startswith(keys.SENT_PREFIX):
        return None
    item = deserialize(dict(body.get("NewImage") or {}))
    if not item.get(FOLD_COUNT):
        return None
    return Entry(
        event_id=str(record.get("eventID") or ""),
        sequence=padded(str(body.get("SequenceNumber", ""))),
        source=str(item["source"]),
        template=str(item["template"]),
        step=str(item.get("step") or ""),
        sent_at=str(item["sent_at"]),
    )


@dataclass
class SendFoldResult:
    counted: int = 0  # entries whose send was added now
    skipped: int = 0  # entries a run's mark says were counted before
    transactions: int = 0  # TransactWriteItems sent, refused ones included
    refused: list[str] = field(default_factory=list)  # why each refused one was


class SendCountFold(TableAdapter):
    """The fold's writes (a transaction on busy counters shards pauses with ``pause``)."""

    pause: Callable[[float], None] = staticmethod(time.sleep)

    def fold(self, records: Iterable[Mapping[str, Any]]) -> SendFoldResult:
        """Add the sends of ``records`` (one stream batch, in stream order) exactly once each."""
        result = SendFoldResult()
        entries = [entry for entry in map(entry_of, records) if entry is not None]
        busy = 0
        while entries:
            if len(result.refused) >= MAX_ATTEMPTS:
                raise RuntimeError("send-count fold: the counts stayed contended")
            run = _run(entries)
            mark = self._mark(run[0], run[-1])
            actions = [mark, *(Action("counts", update) for update in self._counts(run))]
            result.transactions += 1
            cancellation = try_transact(self.client, actions)
            if cancellation is None:
                result.counted += len(run)
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
                raise RuntimeError(f"send-count fold refused: {cancellation.codes}")
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
        sends = Counter((e.source, e.template, e.step or None, e.sent_at) for e in run)
        return grouped_send_counters(self.table, sends, at=clock.iso())


def mark_key(event_id: str) -> tuple[str, str]:
    """(PK, SK) of the mark of the run that starts at the stream record ``event_id``."""
    if not event_id:
        raise ValueError("a stream record without an eventID")
    return f"{MARK_PREFIX}{event_id}", MARK_SK


def counter_items(entry: Entry) -> set[tuple[str, str]]:
    """The counters items one entry's send ADDs to (its source's, its template's, its day's)."""
    return {
        (keys.stats_pk(entry.source), keys.COUNTERS),
        keys.template_stats_key(entry.template),
        day_key(entry.sent_at),
    }


def _run(entries: Sequence[Entry]) -> list[Entry]:
    """The longest prefix of ``entries`` whose counters items fit one transaction beside the mark:
    it depends only on the entries themselves, so a retried batch cuts the same runs."""
    items: set[tuple[str, str]] = set()
    for index, entry in enumerate(entries):
        wanted = items | counter_items(entry)
        if len(wanted) > ITEMS_PER_RUN:
            return list(entries[:index])
        items = wanted
    return list(entries)
