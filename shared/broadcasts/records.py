"""The broadcast record and its helper items (main table), the only code that writes them.

    BROADCAST          / <iso ts>#<id>          the record (definition, status, checkpoint, counters)
    BROADCAST#<id>     / POINTER                its SK; written with the record in one transaction,
                                                conditioned on not existing: the --id guard
    BROADCAST#<id>     / RESEND                 its resend to non-openers or its A/B test's rest
                                                (``resend_id``, ``created_at``): written with the
                                                follow-up's record,
                                                conditioned on not existing (one per broadcast)
    BROADCAST#<id>     / PAGE#<round>#<page>    one resolved page (its recipients), written once;
                                                ``handed_off`` once its batches went out and the
                                                chain went on (shared.broadcasts.fanout)
    BROADCAST#<id>     / BATCH#<round>#<p>#<i>  "this batch was counted" marker
    BROADCAST#<id>     / DEAD#<round>#<p>#<i>   "this batch went to the dead-letter queue"
                                                marker (removed when the batch is counted)
    STATS#<id>         / UNCOUNTED#<template>   sends whose ``send`` counts wait for busy
                                                counters items (``shared.store.stats``)

Every counter change is an atomic ADD; every status change is conditioned on the status it
leaves, so concurrent workers, the resolver and the CLI never overwrite each other.

The send window: a broadcast sends, resolves and resumes only during :data:`SEND_WINDOW_DAYS`
from its start (``at``, or its creation). After it, a batch or a page message that still
arrives (SQS retention, a dead-letter redrive: a redriven message is a new message with a
retention of its own) sends nothing, and an unfinished broadcast is marked ``failed``
(:meth:`BroadcastStore.close_window`). So its send-once claims and its ``PAGE#``, ``BATCH#``
and ``DEAD#`` items protect nothing after the window: they expire a margin later
(:func:`items_until`, docs/data-model.md "What expires, and when"). The record, its pointer
and its counters never expire.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from botocore.exceptions import ClientError

from shared.broadcasts.abtest import Decision, Variant
from shared.broadcasts.model import (
    ACTIVE,
    CANCELLED,
    DONE,
    FAILED,
    HELD,
    PAUSED_REPUTATION,
    RESOLVING,
    SCHEDULED,
    SENDING,
    SKIP_REASONS,
    Broadcast,
    BroadcastRequest,
)
from shared.core import clock
from shared.core.errors import Conflict, NotFound
from shared.core.observability import logger
from shared.core.specs import TTL_ATTRIBUTE
from shared.store import keys
from shared.store.dynamo import (
    Action,
    TableAdapter,
    TransactionConflict,
    deserialize,
    key,
    serialize,
    transact,
    values,
)
from shared.store.stats import (
    busy,
    retry_contended,
    send_counters,
    settle_soon,
    settle_uncounted,
    uncounted_add,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef, UpdateTypeDef


LIST_LIMIT = 50
# A broadcast sends, resolves and resumes only this long after its start: time to send a
# large audience, to inspect and redrive a dead-lettered batch (the dead-letter queues keep
# 14 days, the SQS maximum) and to resume a cancelled or failed broadcast.
SEND_WINDOW_DAYS = 30
# Its claims and markers outlive the window by this much: a worker that started a batch just
# before the window's end (300 s at most) and clock skew between writers.
EXPIRY_MARGIN_DAYS = 1


NAMES = {
    f"#{n}": n
    for n in (
        "status",
        "round",
        "page",
        "cursor",
        "error",
        "resolved",
        "processed",
        "audience_size",
        "sent",
        "failed",
        "updated_at",
        "finished_at",
        "execution_arn",
        "send_rate",
        "dead_lettered_batches",
        "dead_lettered_recipients",
        "hold_reason",
        "resume_at",
    )
}


class BroadcastNotFound(NotFound):
    pass


class StoredPage(NamedTuple):
    """A resolved page as checkpointed: its recipients, whether it was the last, and whether
    its hand-off (its batches, and the chain gone on from it) completed."""

    emails: builtins.list[str]
    exhausted: bool
    handed_off: bool = False


def dead_letter_sk(round_: int, page: int, index: int) -> str:
    """Marker: this batch was marked dead-lettered on its final receive."""
    return "DEAD" + keys.broadcast_batch_sk(round_, page, index).removeprefix("BATCH")


class ResendExists(Conflict):
    """The broadcast has its resend already (one per broadcast)."""


def followed(request: BroadcastRequest) -> str | None:
    """The broadcast that ``request`` follows up (``RESEND`` link, one per broadcast): a resend's
    original, or the test broadcast of an A/B test's rest."""
    split = request.audience.split
    if split is not None and split.side == "rest":
        return split.test_of
    return request.audience.recipients_of


class SendWindowClosed(Conflict):
    """The broadcast's send window ended: it can no longer resume."""


def window_end(record: Broadcast) -> datetime:
    """The end of ``record``'s send window: :data:`SEND_WINDOW_DAYS` after its start (its
    ``at`` when scheduled, else its creation)."""
    start = clock.parse_iso(record.created_at)
    if record.at:
        start = max(start, clock.parse_iso(record.at))
    return start + timedelta(days=SEND_WINDOW_DAYS)


def window_closed(record: Broadcast, now: datetime | None = None) -> bool:
    return (now or clock.utc_now()) >= window_end(record)


def items_until(record: Broadcast) -> int:
    """The ``ttl`` of ``record``'s send-once claims and its ``PAGE#``/``BATCH#``/``DEAD#``
    items: the end of its send window plus :data:`EXPIRY_MARGIN_DAYS`."""
    return clock.ttl_after(EXPIRY_MARGIN_DAYS, window_end(record))


def _used(names: dict[str, str], *expressions: str | None) -> dict[str, str]:
    """DynamoDB rejects attribute-name placeholders an expression does not use."""
    text = " ".join(e for e in expressions if e)
    return {k: v for k, v in names.items() if k in text}


def _now() -> str:
    return clock.iso()


class BroadcastStore(TableAdapter):
    def __init__(self, table_name: str, client: DynamoDBClient | None = None) -> None:
        super().__init__(table_name, client)
        self._sks: dict[str, str] = {}  # id -> record SK (immutable once written)

    # ----- create and read -------------------------------------------------------------------
    def create(
        self, request: BroadcastRequest, *, send_rate: float, now: datetime | None = None
    ) -> tuple[Broadcast, bool]:
        """Write the record (status scheduled or resolving). ``(record, False)`` when the id
        exists already: nothing is written then."""
        moment = now or clock.utc_now()
        created_at = clock.iso(moment)
        sk = keys.broadcast_sk(created_at, request.id)
        item: dict[str, Any] = {
            "PK": keys.BROADCAST,
            "SK": sk,
            "id": request.id,
            "template": request.template,
            "filters": request.audience.model_dump_json(),
            "status": SCHEDULED if request.at else RESOLVING,
            "created_at": created_at,
            "updated_at": created_at,
            "round": 1,
            "page": 0,
            "resolved": False,
            "audience_size": 0,
            "processed": 0,
            "sent": 0,
            "failed": 0,
            "send_rate": round(send_rate, 3),
        }
        if request.subject is not None:
            item["subject"] = request.subject
        if request.at is not None:
            item["at"] = clock.iso(request.at)
        if request.ab is not None:
            item["ab"] = request.ab.model_dump_json()
        pointer = {"PK": keys.broadcast_pk(request.id), "SK": keys.BROADCAST_POINTER, "record_sk": sk}
        actions = [
            Action(
                "pointer",
                {
                    "Put": {
                        "TableName": self.table,
                        "Item": serialize(pointer),
                        "ConditionExpression": "attribute_not_exists(PK)",
                    }
                },
            ),
            Action("record", {"Put": {"TableName": self.table, "Item": serialize(item)}}),
        ]
        original = followed(request)
        if original is not None:  # a resend or an A/B test's rest: one per broadcast, on the original
            link = {
                "PK": keys.broadcast_pk(original),
                "SK": keys.BROADCAST_RESEND,
                "resend_id": request.id,
                "created_at": created_at,
            }
            put: TransactWriteItemTypeDef = {
                "Put": {
                    "TableName": self.table,
                    "Item": serialize(link),
                    "ConditionExpression": "attribute_not_exists(PK)",
                }
            }
            actions.append(Action("resend", put))
        try:
            transact(self.client, actions)
        except TransactionConflict as exc:
            existing = self.get(request.id)
            if existing is None and original is not None and exc.failed("resend"):
                found = self.resend_of(original)
                raise ResendExists(f"broadcast {original!r} has a resend already: {found!r}") from None
            if existing is None:  # pragma: no cover - a pointer without a record cannot be written
                raise
            return existing, False
        self._sks[request.id] = sk
        return Broadcast.from_item(item), True

    def record_decision(self, test: Broadcast, decision: Decision) -> Broadcast | None:
        """Store the A/B test's decision on its record, once: None when it had one already
        (a redelivered or concurrent decision changes nothing, and the stream sees one change:
        one ``broadcast.ab_decided`` event)."""
        return self._update(
            test,
            "SET #ab_decision = :decision, #updated_at = :now",
            condition="attribute_not_exists(#ab_decision)",
            names={"#ab_decision": "ab_decision"},
            decision=decision.model_dump_json(),
            now=_now(),
        )

    def apply_winner(self, rest: Broadcast, winner: Variant) -> Broadcast | None:
        """The A/B test's rest takes the winning variant, while it is still scheduled (it starts
        resolving only after this: its batches read the record)."""
        subject = "#subject = :subject, " if winner.subject is not None else ""
        remove = "" if winner.subject is not None else " REMOVE #subject"
        extra = {"subject": winner.subject} if winner.subject is not None else {}
        return self._update(
            rest,
            f"SET {subject}#template = :template, #updated_at = :now{remove}",
            condition="#status = :scheduled",
            names={"#subject": "subject", "#template": "template"},
            template=winner.template,
            scheduled=SCHEDULED,
            now=_now(),
            **extra,
        )

    def resend_of(self, broadcast_id: str) -> str | None:
        """The id of ``broadcast_id``'s resend to non-openers (None: it has none)."""
        response = self.client.get_item(
            TableName=self.table,
            Key=key(keys.broadcast_pk(broadcast_id), keys.BROADCAST_RESEND),
            ConsistentRead=True,
        )
        item = response.get("Item")
        return item["resend_id"]["S"] if item else None

    def record_sk(self, broadcast_id: str) -> str | None:
        if broadcast_id in self._sks:
            return self._sks[broadcast_id]
        response = self.client.get_item(
            TableName=self.table, Key=key(keys.broadcast_pk(broadcast_id), keys.BROADCAST_POINTER)
        )
        item = response.get("Item")
        if not item:
            return None
        self._sks[broadcast_id] = item["record_sk"]["S"]
        return self._sks[broadcast_id]

    def get(self, broadcast_id: str) -> Broadcast | None:
        sk = self.record_sk(broadcast_id)
        if sk is None:
            return None
        response = self.client.get_item(
            TableName=self.table, Key=key(keys.BROADCAST, sk), ConsistentRead=True
        )
        item = response.get("Item")
        return Broadcast.from_item(deserialize(item)) if item else None

    def list(self, limit: int = LIST_LIMIT) -> list[Broadcast]:
        """Newest first."""
        response = self.client.query(
            TableName=self.table,
            KeyConditionExpression="PK = :pk",
            ExpressionAttributeValues=values(pk=keys.BROADCAST),
            ScanIndexForward=False,
            Limit=limit,
        )
        return [Broadcast.from_item(deserialize(i)) for i in response.get("Items", [])]

    # ----- status ---------------------------------------------------------------------------
    def _update(
        self,
        record: Broadcast,
        expression: str,
        *,
        condition: str | None = None,
        names: Mapping[str, str] | None = None,
        **vals: Any,
    ) -> Broadcast | None:
        """One UpdateItem on the record; None when ``condition`` failed."""
        request: dict[str, Any] = {
            "TableName": self.table,
            "Key": key(keys.BROADCAST, record.sk),
            "UpdateExpression": expression,
            "ExpressionAttributeNames": _used({**NAMES, **(names or {})}, expression, condition),
            "ExpressionAttributeValues": values(**vals),
            "ReturnValues": "ALL_NEW",
        }
        if condition:
            request["ConditionExpression"] = condition
        if not request["ExpressionAttributeNames"]:
            del request["ExpressionAttributeNames"]
        try:
            response = self.client.update_item(**request)
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return None
            raise
        return Broadcast.from_item(deserialize(response["Attributes"]))

    def set_status(
        self,
        record: Broadcast,
        new: str,
        *,
        leaving: frozenset[str],
        error: str | None = None,
        same_round: bool = False,
    ) -> Broadcast | None:
        """Move to ``new`` if the record is in one of ``leaving`` (and, with ``same_round``, still
        in ``record``'s round); None otherwise."""
        allowed = sorted(leaving)
        placeholders = ", ".join(f":from{i}" for i in range(len(allowed)))
        extra: dict[str, Any] = {f"from{i}": s for i, s in enumerate(allowed)}
        expression = "SET #status = :new, #updated_at = :now"
        if new in (DONE, CANCELLED, FAILED):
            expression += ", #finished_at = :now"
        if error is not None:
            expression += ", #error = :error"
            extra["error"] = error[:500]
        condition = f"#status IN ({placeholders})"
        if same_round:
            condition += " AND #round = :round"
            extra["round"] = record.round
        return self._update(
            record,
            expression,
            condition=condition,
            names={"#error": "error"} if error is not None else None,
            new=new,
            now=_now(),
            **extra,
        )

    def cancel(self, record: Broadcast) -> Broadcast | None:
        return self.set_status(record, CANCELLED, leaving=ACTIVE | {PAUSED_REPUTATION, HELD})

    def hold(self, record: Broadcast, reason: str, resume_at: str) -> Broadcast | None:
        """resolving/sending -> ``held`` until ``resume_at`` (model.HELD); None when it was not in
        progress (another worker held it first, or it was cancelled or paused meanwhile)."""
        return self._update(
            record,
            "SET #status = :held, #hold_reason = :reason, #resume_at = :resume, #updated_at = :now",
            condition="#status IN (:resolving, :sending) AND #round = :round",
            held=HELD,
            reason=reason,
            resume=resume_at,
            now=_now(),
            resolving=RESOLVING,
            sending=SENDING,
            round=record.round,
        )

    def pause_for_reputation(self, record: Broadcast) -> Broadcast | None:
        """resolving/sending -> ``paused_reputation`` (docs/reputation.md); None when it was not
        in progress (done, cancelled, failed, scheduled, held, or paused already) or is in another
        round than ``record`` (a batch of an earlier round never pauses the resumed one)."""
        return self.set_status(
            record, PAUSED_REPUTATION, leaving=frozenset({RESOLVING, SENDING}), same_round=True
        )

    def close_window(self, record: Broadcast) -> Broadcast | None:
        """An active broadcast whose send window ended -> ``failed``, naming why; None when it
        was not active (done, cancelled, failed: nothing to change)."""
        return self.set_status(
            record,
            FAILED,
            leaving=ACTIVE | {HELD},
            error=f"send window ended {clock.iso(window_end(record))}: "
            f"what was not sent by then is not sent ({SEND_WINDOW_DAYS} days after its start)",
        )

    def start_resolving(self, record: Broadcast) -> Broadcast | None:
        """scheduled -> resolving (the schedule fired); a resolving record is returned as is."""
        if record.status == RESOLVING:
            return record
        return self.set_status(record, RESOLVING, leaving=frozenset({SCHEDULED}))

    def set_execution(self, record: Broadcast, execution_arn: str) -> None:
        self._update(record, "SET #execution_arn = :arn", arn=execution_arn)

    def new_round(self, record: Broadcast, send_rate: float) -> Broadcast | None:
        """Resume (a cancelled, failed, ``paused_reputation`` or ``held`` broadcast): a fresh resolution of
        the whole audience in round ``round + 1`` with the
        counters of the new round at zero. Mails sent in earlier rounds are not sent again
        (send-once) and are counted as sent when their recipient comes up again. Raises
        :class:`SendWindowClosed` after the send window: those claims are expiring."""
        if window_closed(record):
            raise SendWindowClosed(
                f"broadcast {record.id!r} can no longer resume: its send window ended "
                f"{clock.iso(window_end(record))} ({SEND_WINDOW_DAYS} days after its start)"
            )
        resets = ", ".join(f"skipped_{r} = :zero" for r in SKIP_REASONS)
        return self._update(
            record,
            "SET #status = :resolving, #round = :next, #page = :zero, #resolved = :false, "
            "#audience_size = :zero, #processed = :zero, #sent = :zero, #failed = :zero, "
            "#dead_lettered_batches = :zero, #dead_lettered_recipients = :zero, "
            f"{resets}, #updated_at = :now, #send_rate = :rate "
            "REMOVE #cursor, #finished_at, #error, #hold_reason, #resume_at",
            condition="#status IN (:cancelled, :failed, :paused, :held) AND #round = :round",
            names={"#cursor": "cursor", "#error": "error"},
            held=HELD,
            resolving=RESOLVING,
            next=record.round + 1,  # messages of the old round are stale from now on
            zero=0,  # page 0 and the new round's counters
            false=False,
            now=_now(),
            cancelled=CANCELLED,
            failed=FAILED,
            paused=PAUSED_REPUTATION,
            round=record.round,  # of two resumes at once, one starts the new round
            rate=round(send_rate, 3),
        )

    # ----- resolution checkpoint ------------------------------------------------------------
    def get_page(self, broadcast_id: str, round_: int, page: int) -> StoredPage | None:
        response = self.client.get_item(
            TableName=self.table,
            Key=key(keys.broadcast_pk(broadcast_id), keys.broadcast_page_sk(round_, page)),
            ConsistentRead=True,
        )
        item = response.get("Item")
        if not item:
            return None
        data = deserialize(item)
        return StoredPage(
            list(json.loads(data["emails"])), bool(data["exhausted"]), bool(data.get("handed_off", False))
        )

    def mark_handed_off(self, record: Broadcast, page: int) -> None:
        """The page's batches were sent and the chain went on from it (the same invocation
        resolving the next page, the next page's message, or ``resolved``): a later delivery
        of its message has nothing left to do."""
        self.client.update_item(
            TableName=self.table,
            Key=key(keys.broadcast_pk(record.id), keys.broadcast_page_sk(record.round, page)),
            UpdateExpression="SET handed_off = :true",
            ConditionExpression="attribute_exists(PK)",
            ExpressionAttributeValues=values(true=True),
        )

    def save_page(
        self,
        record: Broadcast,
        page: int,
        emails: builtins.list[str],
        next_cursor: str | None,
        exhausted: bool,
        excluded: Mapping[str, int] | None = None,
    ) -> bool:
        """Checkpoint one page: the PAGE item, and the record's next page, cursor, audience
        size and ``skipped_<reason>`` for matched subscribers who may not be mailed
        (``excluded``), in one transaction conditioned on the record still expecting this page."""
        page_item = {
            "PK": keys.broadcast_pk(record.id),
            "SK": keys.broadcast_page_sk(record.round, page),
            "emails": json.dumps(emails, separators=(",", ":")),
            "exhausted": exhausted,
            TTL_ATTRIBUTE: items_until(record),
        }
        vals: dict[str, Any] = {
            "next": page + 1,
            "now": _now(),
            "size": len(emails),
            "round": record.round,
            "page": page,
        }
        adds = "#audience_size :size"
        extra_names: dict[str, str] = {}
        for i, (reason, count) in enumerate(sorted((excluded or {}).items())):
            if count and reason in SKIP_REASONS:
                adds += f", #x{i} :x{i}"
                extra_names[f"#x{i}"] = f"skipped_{reason}"
                vals[f"x{i}"] = int(count)
        if next_cursor is None:
            expression = f"SET #page = :next, #updated_at = :now REMOVE #cursor ADD {adds}"
        else:
            expression = f"SET #page = :next, #updated_at = :now, #cursor = :cursor ADD {adds}"
            vals["cursor"] = next_cursor
        names = {**_used(NAMES, expression, "#round #page"), **extra_names}
        actions = [
            Action(
                "page",
                {
                    "Put": {
                        "TableName": self.table,
                        "Item": serialize(page_item),
                        "ConditionExpression": "attribute_not_exists(PK)",
                    }
                },
            ),
            Action(
                "record",
                {
                    "Update": {
                        "TableName": self.table,
                        "Key": key(keys.BROADCAST, record.sk),
                        "UpdateExpression": expression,
                        "ConditionExpression": "#round = :round AND #page = :page",
                        "ExpressionAttributeNames": names,
                        "ExpressionAttributeValues": values(**vals),
                    }
                },
            ),
        ]
        try:
            transact(self.client, actions)
        except TransactionConflict:
            return False
        return True

    def mark_resolved(self, record: Broadcast) -> Broadcast | None:
        """The whole audience is known: resolving -> sending (or done when nothing is left)."""
        updated = self._update(
            record,
            "SET #resolved = :true, #updated_at = :now",
            condition="#round = :round",
            true=True,
            now=_now(),
            round=record.round,
        )
        if updated is None:
            return None
        moved = self.set_status(updated, SENDING, leaving=frozenset({RESOLVING})) or updated
        return self.finish_if_done(moved) or moved

    # ----- counting -------------------------------------------------------------------------
    def count_batch(self, record: Broadcast, page: int, index: int, counts: Mapping[str, int]) -> bool:
        """Add one batch's outcomes (``processed``, ``sent``, ``failed``, ``skipped_<reason>``)
        exactly once: the batch marker and the ADDs (the record's counts, and ``send`` of the
        broadcast's and its template's engagement counters) are one transaction. False: counted before
        (a redelivered batch) or the round moved on (resumed). Engagement counters that are
        busy do not fail it: the batch is recorded with its sends in a ledger, counted from
        there (:meth:`_count_uncounted`)."""
        adds = {name: int(n) for name, n in counts.items() if n}
        marker = {
            "PK": keys.broadcast_pk(record.id),
            "SK": keys.broadcast_batch_sk(record.round, page, index),
            "counted_at": _now(),
            TTL_ATTRIBUTE: items_until(record),
            **adds,
        }
        names = {
            "#round": "round",
            "#updated_at": "updated_at",
            **{f"#c{i}": name for i, name in enumerate(adds)},
        }
        add_expr = ", ".join(f"#c{i} :c{i}" for i in range(len(adds)))
        vals = {f"c{i}": n for i, n in enumerate(adds.values())}
        update: UpdateTypeDef = {
            "TableName": self.table,
            "Key": key(keys.BROADCAST, record.sk),
            "UpdateExpression": f"SET #updated_at = :now ADD {add_expr}"
            if adds
            else "SET #updated_at = :now",
            "ConditionExpression": "#round = :round",
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values(now=_now(), round=record.round, **vals),
        }
        # the engagement counters' ``send`` (SES Send events are not published)
        counters = send_counters(self.table, {(record.id, record.template): adds.get("sent", 0)}, at=_now())
        actions = [
            Action(
                "marker",
                {
                    "Put": {
                        "TableName": self.table,
                        "Item": serialize(marker),
                        "ConditionExpression": "attribute_not_exists(PK)",
                    }
                },
            ),
            Action("record", {"Update": update}),
            *(Action("counters", request) for request in counters),
        ]
        try:
            transact(self.client, actions)
        except TransactionConflict:
            return False
        except ClientError as exc:
            if not counters or not busy(exc):
                raise
            # A counters item is busy (engagement writes, sequence sends): the batch is recorded
            # with its sends in the (source, template) ledger instead, then counted from there.
            return self._count_uncounted(record, actions[:2], adds["sent"])
        return True

    def _count_uncounted(self, record: Broadcast, recorded: builtins.list[Action], sent: int) -> bool:
        """The batch's marker and record update with ``sent`` ADDed to its ledger of sends
        still to be counted, in one transaction (retried while the record is busy with other
        workers' batches); then those sends move to the counters (:func:`settle_uncounted`,
        retried). A move still busy after the retries is made by the engagement consumer when
        these mails' SES events arrive (``SendLog.record_evidence``)."""
        at = _now()
        ledger = Action("uncounted", uncounted_add(self.table, record.id, record.template, sent, at=at))
        try:
            retry_contended(lambda: transact(self.client, [*recorded, ledger]), retryable=busy)
        except TransactionConflict:
            return False
        moved = settle_soon(
            lambda: settle_uncounted(self.client, self.table, record.id, record.template, sent, at=at)
        )
        if moved is None:
            logger.warning("broadcast sends left uncounted: counters busy", broadcast=record.id, sends=sent)
        return True

    def mark_dead_lettered(self, record: Broadcast, page: int, index: int, recipients: int) -> bool:
        """The batch's final receive failed: SQS moves it to the dead-letter queue. Put its
        ``DEAD#`` marker and ADD it to ``dead_lettered_batches``/``_recipients`` in one
        transaction, once (a second final receive, e.g. after a redrive, adds nothing).
        False: marked before, or the round moved on."""
        marker = {
            "PK": keys.broadcast_pk(record.id),
            "SK": dead_letter_sk(record.round, page, index),
            "recipients": recipients,
            "marked_at": _now(),
            TTL_ATTRIBUTE: items_until(record),
        }
        return self._dead_letter(record, marker, +1, recipients, "attribute_not_exists(PK)", put=True)

    def clear_dead_lettered(self, record: Broadcast, page: int, index: int, recipients: int) -> bool:
        """A batch marked dead-lettered was counted after all (redriven): remove its marker
        and take it out of the dead-lettered counts, once. False: it was not marked."""
        marker = {"PK": keys.broadcast_pk(record.id), "SK": dead_letter_sk(record.round, page, index)}
        return self._dead_letter(record, marker, -1, -recipients, "attribute_exists(PK)", put=False)

    def _dead_letter(
        self,
        record: Broadcast,
        marker: dict[str, Any],
        batches: int,
        recipients: int,
        condition: str,
        *,
        put: bool,
    ) -> bool:
        write: TransactWriteItemTypeDef = (
            {"Put": {"TableName": self.table, "Item": serialize(marker), "ConditionExpression": condition}}
            if put
            else {
                "Delete": {
                    "TableName": self.table,
                    "Key": key(marker["PK"], marker["SK"]),
                    "ConditionExpression": condition,
                }
            }
        )
        update: UpdateTypeDef = {
            "TableName": self.table,
            "Key": key(keys.BROADCAST, record.sk),
            "UpdateExpression": "SET #updated_at = :now ADD #dead_lettered_batches :b, "
            "#dead_lettered_recipients :r",
            "ConditionExpression": "#round = :round",
            "ExpressionAttributeNames": _used(
                NAMES, "#updated_at #dead_lettered_batches #dead_lettered_recipients #round"
            ),
            "ExpressionAttributeValues": values(now=_now(), b=batches, r=recipients, round=record.round),
        }
        try:
            transact(self.client, [Action("marker", write), Action("record", {"Update": update})])
        except TransactionConflict:
            return False
        return True

    def finish_if_done(self, record: Broadcast) -> Broadcast | None:
        """sending/resolving -> done once resolved and every resolved recipient was counted."""
        return self._update(
            record,
            "SET #status = :done, #finished_at = :now, #updated_at = :now",
            condition="#resolved = :true AND #processed >= #audience_size "
            "AND #status IN (:resolving, :sending) AND #round = :round",
            done=DONE,
            now=_now(),
            true=True,
            resolving=RESOLVING,
            sending=SENDING,
            round=record.round,  # after a resume, an old round's last batch finishes nothing
        )
