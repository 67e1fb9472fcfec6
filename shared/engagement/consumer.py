"""The engagement consumer: SES event records -> events table, counters, suppression.

    SQS batch -> per record: parse (SNS envelope or raw) -> per recipient: correlate
              -> side effects -> an EventWrite (the event item + the counters it feeds)
    then, once for the batch: ONE TransactWriteItems (chunked at 100 actions) holding every
    event item (deduplicating) + ONE aggregated ADD per counters item + the new unique markers

- Correlation: the EmailTags the send pipeline sets (``template``, ``source``, ``step``,
  ``send_id``, encoded by ``shared.sending.sender.encode_tag_value``); when they are missing or
  invalid, the ``SENT#`` item of the recipient whose ``ses_message_id`` is the event's
  ``mail.messageId``. Uncorrelated events are still recorded (no GSI keys, no counters).
- Deduplication: the event item's key is derived from the SES event itself
  (``SesEvent.identity``: type, SES message id, recipient, the type object), and is put
  with ``attribute_not_exists``. A transaction's counter ADDs are exactly those of its own
  event items, so a redelivered record (by SQS, or by SNS under a new MessageId) changes
  nothing: its Put is cancelled by the condition, the writer drops it (a duplicate) and
  commits the others with the amounts recomputed without it. Two records of one batch that
  carry the same SES event (same key: DynamoDB refuses two actions on one item) are
  written once; the copies are duplicates.
- Counters: the events of a transaction that feed one counters item
  (``STATS#<source>``/``COUNTERS``, ``STATS#<template>``/``TEMPLATE_COUNTERS``) become one
  ``Update`` (``shared.store.stats.counter_adds``) ADDing every metric's amount.
- Uniques: the first open/click of a subscriber per source and per template puts a marker
  (``UNIQ#...``, ``attribute_not_exists``) and ADDs ``open_unique``/``click_unique`` in that
  same transaction; the batch's markers are read first (one BatchGetItem), a marker is put
  once per transaction however many opens share it, and a lost race (the marker appeared
  in between) reads the markers again and retries without that unique ADD.
- Other cancellations (``TransactionConflict``: a concurrent transaction on a counters
  item) are retried with a short backoff, ``MAX_ATTEMPTS`` times; then the records fail
  and SQS delivers them again (harmless: the writes are idempotent). A rejection one item
  can cause (``ValidationException``) makes the writer retry that chunk one event per
  transaction, so only the records of the bad items fail.
- Permanent bounce / complaint: suppression (``shared.engagement.suppression``: flag, SUPPRESSION item,
  stop every execution) runs BEFORE the deduplicating transaction, so a crash in between is
  repaired by the redelivery. Transient/undetermined bounces and delays are only counted.
- Transient bounces: after the batch is written, each one written (or found written: a
  redelivery) runs the soft-bounce escalation (``shared.engagement.soft_bounces``): the
  address is suppressed once it soft-bounced ``limit`` mails within ``window_days``. A
  failure there fails the record (redelivered: the check runs again).
- SES ``Subscription`` with ``unsubscribeAll``: the subscriber is unsubscribed and their
  marketing executions stopped, like mailstep's own unsubscribe link.
- Send recovery: an event that proves SES accepted a message (Send, Delivery, Bounce,
  Complaint, DeliveryDelay) and carries mailstep's tags is evidence for that send. Before
  the events are written, the batch's evidence goes to ``SendLog.record_evidence`` (one
  BatchGetItem of the claims and log keys): a claim still ``sending`` for that send id
  with no ``SENT#`` (its worker died between SES and the log) gets its ``SENT#`` written
  from the event, so the takeover after the claim's lease answers ``already_sent`` instead
  of sending again. A failure there fails the records that carried evidence (redelivered).

Entry points: :class:`EngagementBatch` (the Lambda: ``add`` each SQS record, then ``flush``
once) and :func:`process_body` / :func:`process_event` (one body written alone: a batch of
one).

Record policy (docs/engagement.md): a record that is not an SES event (bad JSON, no
``mail``, malformed type object) raises :class:`~shared.engagement.ses_events.MalformedEvent`: the
handler reports it in ``batchItemFailures``, SQS retries it ``maxReceiveCount`` times and
moves it to the dead-letter queue, whose alarm tells an operator (redrive after a fix).
An event type this code does not know is acknowledged and logged (SES adds types). A
record whose write fails is reported the same way, alone or with the records of its
transaction.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from shared.core import clock
from shared.core.models import normalise_email, validate_name, validate_template_key
from shared.core.observability import logger, redact_email
from shared.core.retry import Backoff
from shared.core.settings import Settings
from shared.engagement.machine import (
    SCANNER_WINDOW_S,
    Neighbour,
    click_timing_verdict,
    machine_verdict,
)
from shared.engagement.ses_events import (
    Bounce,
    Click,
    Complaint,
    DeliveryDelay,
    MalformedEvent,
    Open,
    SesEvent,
    Subscription,
    iso_timestamp,
    parse_body,
)
from shared.engagement.soft_bounces import (
    SOFT_BOUNCE_ESCALATION,
    SoftBouncePolicy,
    escalates,
    events_around,
    soft_bounces_around,
)
from shared.engagement.sunset import touch
from shared.engagement.suppression import BOUNCE, COMPLAINT, ExecutionStopper, Suppression, Suppressions
from shared.sending.sender import decode_tag_value
from shared.store import keys
from shared.store.dynamo import (
    NO_REASON,
    TRANSACTION_LIMIT,
    Action,
    Cancellation,
    serialize,
)
from shared.store.events import event_record
from shared.store.send_log import SendEvidence
from shared.store.stats import (
    SOURCE_SCOPE,
    STEP_SCOPE,
    TEMPLATE_SCOPE,
    UNIQUE_METRICS,
    counter_adds,
    day_key,
    event_adds,
    metric_of,
    sequence_step,
    step_attribute,
    unique_name,
)
from shared.store.stream_counts import FOLD_COUNT
from shared.store.subscribers import SubscriberStore

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

ORIGIN = "ses"
SUFFIX_LEN = 24
MAX_ATTEMPTS = 4  # transactions of one chunk cancelled without progress (conflicts, markers)
BACKOFF_S = 0.05  # first backoff ceiling after a conflict; doubles per attempt (full jitter)
BACKOFF_CAP_S = 1.0
RECORDED, DUPLICATE = "recorded", "duplicate"
EVENT_PUT, SHARED = "event", "counters_or_marker"  # roles of a transaction's actions
# Event kinds written alone (a conditional PutItem each) and counted by the stats fold from the
# events table's stream (shared.store.stream_counts): a Delivery has no unique marker to claim,
# so it needs no transaction. One per mail: 1 write unit instead of 2 (docs/engagement.md).
FOLDED_KINDS = frozenset({"delivery"})
PUTS_AT_ONCE = 8
# Event kinds that prove SES accepted the message (evidence for a send whose log is missing).
ACCEPTED_KINDS = frozenset({"send", "delivery", "bounce", "complaint", "delivery_delay"})
CONDITION_FAILED = "ConditionalCheckFailed"
# Codes that name something wrong with an item, not a passing conflict: the chunk is
# written again one event per transaction so that only the bad item's record fails.
ITEM_ERRORS = frozenset(
    {
        "ValidationException",
        "ValidationError",
        "ItemCollectionSizeLimitExceeded",
        "ItemCollectionSizeLimitExceededException",
    }
)

ItemKey = tuple[str, str]
# (scope, source or template or "<step code>:<sequence>", key of its counters item); a step's
# counts are attributes of its sequence's counters item (``stats.step_attribute``)
Scope = tuple[str, str, ItemKey]
WriteResult = str | BaseException  # RECORDED | DUPLICATE | why it failed


class WriteConflict(RuntimeError):
    """A chunk's transaction kept being cancelled without progress: its records fail and
    SQS delivers them again."""


class ItemRejected(Exception):
    """DynamoDB refused a transaction for a reason one item can cause (``code``)."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


@dataclass(frozen=True)
class Correlation:
    template: str | None = None
    source: str | None = None  # the send's source (sequence id, broadcast id, ...), with step
    step: str | None = None
    send_id: str | None = None
    via: str | None = None  # tags | sent_log | None (uncorrelated)


@dataclass
class Outcome:
    event_type: str
    kind: str | None
    recorded: int = 0
    duplicates: int = 0
    suppressed: int = 0
    unsubscribed: int = 0
    skipped_recipients: int = 0
    recovered_sends: int = 0  # SENT# entries written from this event (see record_evidence)
    correlated_via: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        if self.kind is None:
            return "ignored"
        return "recorded" if self.recorded else "duplicate" if self.duplicates else "nothing"


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: one write of one batch
class EventWrite:
    """One recipient's event item and the counters it feeds, ready to be written."""

    item: dict[str, Any]
    email: str
    metric: str | None
    scopes: tuple[Scope, ...]
    put: dict[str, Any]  # the item, serialised

    @property
    def key(self) -> ItemKey:
        return str(self.item["PK"]), str(self.item["SK"])

    @property
    def at(self) -> str:
        return str(self.item["at"])

    def counters(self) -> list[ItemKey]:
        """The counters items this write ADDs to: its scopes', and the day's when it has a
        source (``stats.day_key``: the day counters repeat the sources' counts)."""
        if self.metric is None:
            return []
        return list(event_adds(self.metric, self.item.get("source"), self.item.get("template"), self.at))

    @property
    def alone(self) -> bool:
        """Written by its own conditional PutItem, outside the batch's transaction: a Delivery
        (its counts, if any, are the stats fold's: ``FOLD_COUNT``)."""
        return self.item["type"] in FOLDED_KINDS

    def markers(self) -> list[ItemKey]:
        """Keys of the unique markers this write would claim (open/click), one per scope."""
        if self.metric not in UNIQUE_METRICS:
            return []
        assert self.metric is not None
        pk = keys.sub_pk(self.email)
        return [(pk, keys.unique_marker_sk(self.metric, scope, value)) for scope, value, _ in self.scopes]


@dataclass
class PreparedEvent:
    """One SES event after correlation and side effects; its writes are not written yet."""

    event: SesEvent
    outcome: Outcome
    writes: list[EventWrite] = field(default_factory=list)
    evidence: list[SendEvidence] = field(default_factory=list)  # sends this event proves


@dataclass
class BatchRecord:
    record_id: str
    prepared: PreparedEvent
    error: BaseException | None = None  # set by EngagementBatch.flush: the write failed

    @property
    def outcome(self) -> Outcome:
        return self.prepared.outcome


@dataclass(frozen=True)
class EngagementContext:
    store: SubscriberStore
    suppressions: Suppressions
    data_ttl_days: int = 180
    stopper: ExecutionStopper | None = None  # marketing stops on an SES unsubscribe
    soft_bounces: SoftBouncePolicy = field(default_factory=SoftBouncePolicy)

    @classmethod
    def from_settings(cls, settings: Settings, store: SubscriberStore | None = None) -> EngagementContext:
        from shared.sequences.engine import SequenceEngine
        from shared.sequences.validate import Catalog

        store = store or SubscriberStore(settings.table_name, settings.events_table_name)
        # Stopping needs no catalog: the EXEC pairs name the executions.
        engine = SequenceEngine(catalog=Catalog(), arn_prefix=settings.state_machine_arn_prefix, store=store)
        return cls(
            store=store,
            suppressions=Suppressions(store, engine),
            data_ttl_days=settings.data_ttl_days,
            stopper=engine,
            soft_bounces=SoftBouncePolicy(settings.soft_bounce_limit, settings.soft_bounce_window_days),
        )


class EngagementBatch:
    """The records of one SQS batch. :meth:`add` parses a record, correlates it and runs its
    side effects (raising for that record alone); :meth:`flush` then writes every added
    record in as few transactions as possible and says which records failed."""

    def __init__(self, ctx: EngagementContext) -> None:
        self.ctx = ctx
        self.records: list[BatchRecord] = []
        self.erased: set[str] | None = None  # addresses erased (see preload); None: look up per event

    def preload(self, bodies: Iterable[str | bytes | dict[str, Any]]) -> None:
        """Read, for every recipient of the batch at once, whether the address was erased:
        one BatchGetItem instead of a lookup per event. Bodies that do not parse are left to
        :meth:`add`, which reports them."""
        recipients: set[str] = set()
        for body in bodies:
            try:
                event = parse_body(body)
            except MalformedEvent:
                continue
            recipients |= _normalised(event)
        self.erased = self.ctx.store.erased_among(recipients)

    def add(self, record_id: str, body: str | bytes | dict[str, Any]) -> Outcome:
        prepared = prepare(parse(body), self.ctx, erased=self.erased)
        self.records.append(BatchRecord(record_id=record_id, prepared=prepared))
        return prepared.outcome

    def flush(self) -> list[BatchRecord]:
        done, self.records = self.records, []
        for record, error in zip(done, write_events([r.prepared for r in done], self.ctx), strict=True):
            record.error = error
        return done


def parse(body: str | bytes | dict[str, Any]) -> SesEvent:
    try:
        return parse_body(body)
    except MalformedEvent as exc:
        logger.warning("malformed SES event record", error=str(exc)[:300])
        raise


def process_body(body: str | bytes | dict[str, Any], ctx: EngagementContext) -> Outcome:
    """One SQS body, written alone. Raises MalformedEvent for a record that is not an SES event."""
    return process_event(parse(body), ctx)


def process_event(event: SesEvent, ctx: EngagementContext) -> Outcome:
    """One SES event, written alone (a batch of one); raises when it could not be written."""
    prepared = prepare(event, ctx, erased=None)
    (error,) = write_events([prepared], ctx)
    if error is not None:
        raise error
    return prepared.outcome


def _normalised(event: SesEvent) -> set[str]:
    found = set()
    for raw in event.recipients():
        try:
            found.add(normalise_email(raw))
        except ValueError:
            continue
    return found


def prepare(event: SesEvent, ctx: EngagementContext, erased: set[str] | None = None) -> PreparedEvent:
    """Correlate each recipient and run the side effects; the writes come back unwritten.

    A recipient whose address was erased (``erased``; None: looked up here) is dropped: no
    event item, counter, marker, suppression or unsubscribe is written for it, so an SES
    event that arrives after an erase leaves nothing that names the address."""
    prepared = PreparedEvent(event=event, outcome=Outcome(event_type=event.event_type, kind=event.kind))
    outcome = prepared.outcome
    if event.kind is None:
        logger.warning(
            "unknown SES event type acknowledged",
            event_type=event.event_type[:60],
            ses_message_id=event.mail.message_id,
        )
        return prepared
    if erased is None:
        erased = ctx.store.erased_among(_normalised(event))
    for raw in event.recipients():
        try:
            email = normalise_email(raw)
        except ValueError:
            outcome.skipped_recipients += 1
            logger.warning("SES event names an invalid recipient", event_type=event.event_type)
            continue
        if email in erased:
            outcome.skipped_recipients += 1
            logger.info("SES event for an erased address dropped", event_type=event.event_type)
            continue
        correlation = correlate(event, email, ctx.store)
        outcome.correlated_via.append(correlation.via or "none")
        found = send_evidence(event, email, correlation)
        if found is not None:
            prepared.evidence.append(found)
        if event.permanent_bounce or event.kind == "complaint":
            ctx.suppressions.suppress(_suppression(event, email, correlation))
            outcome.suppressed += 1
        if _unsubscribes(event):
            _unsubscribe(email, ctx)
            outcome.unsubscribed += 1
        prepared.writes.append(event_write(event, email, correlation, ctx.data_ttl_days))
    return prepared


def write_events(batch: Sequence[PreparedEvent], ctx: EngagementContext) -> list[BaseException | None]:
    """Write the events of a batch once each (see the module docstring) and count them in the
    outcomes. Returns, per prepared event, why it could not be written (None: written).
    The batch's send evidence is recorded first (:func:`recover_sends`)."""
    unrecovered = recover_sends(batch, ctx)
    unjudged = judge_clicks(batch, ctx)
    unrecovered |= unjudged
    results = write_all(
        [w for prepared in batch if id(prepared) not in unrecovered for w in prepared.writes], ctx.store
    )
    untouched = touch_engagement(batch, results, unrecovered, ctx)
    errors: list[BaseException | None] = []
    for prepared in batch:
        error: BaseException | None = unrecovered.get(id(prepared))
        if error is not None:
            errors.append(error)
            continue
        for write in prepared.writes:
            result = results[write]
            if isinstance(result, BaseException):
                error = error or result
            elif result == RECORDED:
                prepared.outcome.recorded += 1
            else:
                prepared.outcome.duplicates += 1
        if error is None and prepared.event.transient_bounce:
            error = escalate_soft_bounces(prepared, ctx)
        error = error or untouched.get(id(prepared))
        errors.append(error)
        event = prepared.event
        if error is not None:
            logger.warning(
                "SES event not written",
                event_type=event.event_type,
                ses_message_id=event.mail.message_id,
                error=f"{type(error).__name__}: {str(error)[:200]}",
            )
            continue
        logger.info(
            "SES event processed",
            event_type=event.event_type,
            ses_message_id=event.mail.message_id,
            status=prepared.outcome.status,
            correlated_via=",".join(sorted(set(prepared.outcome.correlated_via))),
        )
    return errors


def send_evidence(event: SesEvent, email: str, correlation: Correlation) -> SendEvidence | None:
    """The send this event proves SES accepted, when its tags name one (source, step, id)."""
    if event.kind not in ACCEPTED_KINDS or correlation.via != "tags":
        return None
    if not (correlation.source and correlation.step and correlation.send_id and correlation.template):
        return None
    subject = event.mail.common_headers.subject if event.mail.common_headers else None
    return SendEvidence(
        email=email,
        source=correlation.source,
        step=correlation.step,
        send_id=correlation.send_id,
        template=correlation.template,
        ses_message_id=event.mail.message_id,
        subject=(subject or "")[:500],
        transactional=_decoded(event.mail.tag("kind")) == "transactional",
        at=iso_timestamp(event.mail.timestamp),
        sent_at=_sent_at_tag(event),
    )


def _sent_at_tag(event: SesEvent) -> str:
    """The ``sent_at`` the sender tagged the mail with (the key of its ``SENT#`` entry), when
    the tag is one exactly as ``clock.iso`` writes it; else "" (the claim names it)."""
    try:
        value = _decoded(event.mail.tag("sent_at")) or ""
        return value if value and clock.iso(clock.parse_iso(value)) == value else ""
    except ValueError:
        return ""


def recover_sends(batch: Sequence[PreparedEvent], ctx: EngagementContext) -> dict[int, BaseException]:
    """Write the ``SENT#`` entries the batch's events prove (``SendLog.record_evidence``).
    Returns, by ``id`` of the prepared event, why its evidence could not be recorded: those
    events are not written now, so that SQS delivers them again."""
    evidence = [found for prepared in batch for found in prepared.evidence]
    if not evidence:
        return {}
    try:
        written = ctx.store.send_log.record_evidence(evidence, ttl_days=ctx.data_ttl_days)
    except Exception as exc:  # reported per record: SQS delivers them again
        logger.warning("send evidence not recorded", error=f"{type(exc).__name__}: {str(exc)[:200]}")
        return {id(prepared): exc for prepared in batch if prepared.evidence}
    recovered = {id(found) for found in written}
    for prepared in batch:
        for found in prepared.evidence:
            if id(found) in recovered:
                prepared.outcome.recovered_sends += 1
                logger.info(
                    "send log written from an SES event",
                    source=found.source,
                    step=found.step,  # with source: the claim whose worker died between SES and the log
                    send_id=found.send_id,
                    ses_message_id=found.ses_message_id,
                    event_type=prepared.event.event_type,
                )
    return {}


# ----- correlation -------------------------------------------------------------------------
def correlate(event: SesEvent, email: str, store: SubscriberStore) -> Correlation:
    tags = _from_tags(event)
    if tags is not None:
        return tags
    return _from_sent_log(event.mail.message_id, email, store) or Correlation()


def _from_tags(event: SesEvent) -> Correlation | None:
    try:
        template = _decoded(event.mail.tag("template"))
        source = _decoded(event.mail.tag("source"))
        if not template or not source:
            return None
        validate_template_key(template, "template tag")
        validate_name(source, "source")
        step = _decoded(event.mail.tag("step"))
        send_id = _decoded(event.mail.tag("send_id"))
    except ValueError:
        logger.info("SES event tags are not mailstep's", ses_message_id=event.mail.message_id)
        return None
    return Correlation(template=template, source=source, step=step, send_id=send_id, via="tags")


def _decoded(value: str | None) -> str | None:
    return decode_tag_value(value) if value else None


def _from_sent_log(message_id: str, email: str, store: SubscriberStore) -> Correlation | None:
    item = next(store.send_log.entries(email, ses_message_id=message_id), None)
    if item is None:
        return None
    return Correlation(
        template=item.get("template"),
        source=item.get("source"),
        step=item.get("step"),
        send_id=item.get("send_id"),
        via="sent_log",
    )


# ----- the deduplicating write ---------------------------------------------------------------
def event_item(event: SesEvent, email: str, correlation: Correlation, data_ttl_days: int) -> dict[str, Any]:
    identity = event.identity(email)
    assert event.kind is not None
    subject = event.mail.common_headers.subject if event.mail.common_headers else None
    optional = {
        "template": correlation.template,
        "source": correlation.source,
        "step": correlation.step,
        "send_id": correlation.send_id,
        "subject": subject[:500] if subject else None,
        "sns_message_id": event.sns_message_id,
        **_details(event, email),
    }
    return event_record(
        email,
        event.kind,
        at=event.timestamp,
        ttl_days=data_ttl_days,
        suffix=identity[:SUFFIX_LEN],
        origin=ORIGIN,
        event_id=identity,
        ses_message_id=event.mail.message_id,
        **{k: v for k, v in optional.items() if v not in (None, "")},
    )


def _details(event: SesEvent, email: str) -> dict[str, Any]:
    detail = event.detail
    if isinstance(detail, Bounce):
        mine = next((r for r in detail.bounced_recipients if r.email_address.lower() == email.lower()), None)
        return {
            "bounce_type": detail.bounce_type,
            "bounce_sub_type": detail.bounce_sub_type,
            "diagnostic": (mine.diagnostic_code or mine.status) if mine else None,
        }
    if isinstance(detail, Complaint):
        return {"feedback_type": detail.complaint_feedback_type}
    if isinstance(detail, Open):
        return {"machine": machine_verdict(event)}
    if isinstance(detail, Click):
        return {"link": detail.link[:2000], "machine": machine_verdict(event)}
    if isinstance(detail, DeliveryDelay):
        return {"delay_type": detail.delay_type}
    if event.kind == "reject":
        return {"reason": getattr(detail, "reason", "")}
    if event.kind == "rendering_failure":
        return {"error": getattr(detail, "error_message", "")[:500]}
    if isinstance(detail, Subscription) and detail.new_topic_preferences is not None:
        return {"unsubscribe_all": detail.new_topic_preferences.unsubscribe_all}
    return {}


def event_write(event: SesEvent, email: str, correlation: Correlation, data_ttl_days: int) -> EventWrite:
    item = event_item(event, email, correlation, data_ttl_days)
    metric = metric_of(item)
    scopes: list[Scope] = []
    if metric is not None and correlation.source:
        scopes.append((SOURCE_SCOPE, correlation.source, (keys.stats_pk(correlation.source), keys.COUNTERS)))
    if metric is not None and correlation.template:
        scopes.append((TEMPLATE_SCOPE, correlation.template, keys.template_stats_key(correlation.template)))
    code = sequence_step(correlation.step)
    if metric in UNIQUE_METRICS and correlation.source and code is not None:  # who opened this step's mail
        scopes.append(
            (STEP_SCOPE, f"{code}:{correlation.source}", (keys.stats_pk(correlation.source), keys.COUNTERS))
        )
    if item["type"] in FOLDED_KINDS and metric is not None and scopes:
        item[FOLD_COUNT] = True  # the stats fold counts it from the events table's stream
    return EventWrite(item=item, email=email, metric=metric, scopes=tuple(scopes), put=serialize(item))


def write_all(writes: Sequence[EventWrite], store: SubscriberStore) -> dict[EventWrite, WriteResult]:
    """Each write's result: RECORDED, DUPLICATE (written before, or a copy of another write of
    this batch) or the exception that kept it from being written."""
    results: dict[EventWrite, WriteResult] = {}
    first: dict[ItemKey, EventWrite] = {}
    copies: list[tuple[EventWrite, EventWrite]] = []
    for write in writes:  # one action per item: copies of one SES event are written once
        if write.key in first:
            copies.append((write, first[write.key]))
        else:
            first[write.key] = write
    alone = [w for w in first.values() if w.alone]
    distinct = [w for w in first.values() if not w.alone]
    try:
        present = markers_present(store, [m for w in distinct for m in w.markers()])
    except Exception as exc:  # reported per record: SQS delivers them again
        return {w: exc for w in writes}
    results.update(put_each(alone, store))
    for chunk in chunks(distinct, present):
        _write_chunk_or_each(chunk, present, store, results)
    for copy, original in copies:
        result = results[original]
        results[copy] = result if isinstance(result, BaseException) else DUPLICATE
        if results[copy] == DUPLICATE:
            _log_duplicate(copy, "in this batch")
    return results


def put_each(writes: Sequence[EventWrite], store: SubscriberStore) -> dict[EventWrite, WriteResult]:
    """The writes that need no transaction (Deliveries), each its own conditional PutItem, at
    most :data:`PUTS_AT_ONCE` at a time: 1 write unit each, where a Put in a transaction costs
    2. Their counts are added by the stats fold from the item's INSERT record, once."""
    if not writes:
        return {}
    with ThreadPoolExecutor(max_workers=min(PUTS_AT_ONCE, len(writes)), thread_name_prefix="put") as pool:
        return dict(zip(writes, pool.map(lambda write: _put_alone(write, store), writes), strict=True))


def _put_alone(write: EventWrite, store: SubscriberStore) -> WriteResult:
    try:
        store.client.put_item(
            TableName=store.events_table, Item=write.put, ConditionExpression="attribute_not_exists(PK)"
        )
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code == "ConditionalCheckFailedException":
            _log_duplicate(write, "recorded before")
            return DUPLICATE
        return ItemRejected(code) if code in ITEM_ERRORS else exc
    except Exception as exc:  # reported per record: SQS delivers it again
        return exc
    return RECORDED


def chunks(
    writes: Iterable[EventWrite], present: set[ItemKey], limit: int | None = None
) -> list[list[EventWrite]]:
    """Consecutive writes grouped so that each group's transaction holds at most ``limit``
    actions (an event Put each, plus its counters items and the markers not ``present``)."""
    limit = limit or TRANSACTION_LIMIT
    groups: list[list[EventWrite]] = []
    current: list[EventWrite] = []
    touched: set[ItemKey] = set()  # counters items and markers of the current group
    for write in writes:
        needs = {*write.counters(), *(m for m in write.markers() if m not in present)}
        if current and len(current) + 1 + len(touched | needs) > limit:
            groups.append(current)
            current, touched = [], set()
        current.append(write)
        touched |= needs
    if current:
        groups.append(current)
    return groups


def transaction(
    writes: Sequence[EventWrite], present: set[ItemKey], table: str, events_table: str
) -> tuple[list[TransactWriteItemTypeDef], list[EventWrite | None], set[ItemKey]]:
    """The TransactWriteItems of ``writes``: the actions; per action the write whose event
    Put it is (None: a marker or a counters update); the markers it claims."""
    actions: list[TransactWriteItemTypeDef] = []
    owners: list[EventWrite | None] = []
    amounts: dict[ItemKey, Counter[str]] = {}
    latest: dict[ItemKey, str] = {}
    claimed: dict[ItemKey, str] = {}
    for write in writes:
        actions.append(_put(events_table, write.put))
        owners.append(write)
        if write.metric is None:
            continue
        for counters in write.counters():
            amounts.setdefault(counters, Counter())[write.metric] += 1
            latest[counters] = max(latest.get(counters, write.at), write.at)
        for (scope, value, counters), marker in zip(write.scopes, write.markers(), strict=False):
            if marker not in present and marker not in claimed:  # the first open/click
                claimed[marker] = write.at
                if scope == STEP_SCOPE:  # the first of this step's mail: the step's count
                    code = value.partition(":")[0]
                    amounts.setdefault(counters, Counter())[step_attribute(code, write.metric)] += 1
                    continue
                amounts[counters][unique_name(write.metric)] += 1
                if scope == SOURCE_SCOPE:  # the subscribers who opened a source's mail that day
                    amounts[day_key(write.at)][unique_name(write.metric)] += 1
    for (pk, sk), at in claimed.items():
        actions.append(
            _put(
                table,
                serialize(
                    {
                        "PK": pk,
                        "SK": sk,
                        "at": at,
                        "ttl": next(w.item["ttl"] for w in writes if (pk, sk) in w.markers()),
                    }
                ),
            )
        )
        owners.append(None)
    for (pk, sk), adds in amounts.items():
        actions.append(counter_adds(table, pk, sk, adds, at=latest[(pk, sk)]))
        owners.append(None)
    return actions, owners, set(claimed)


def _put(table: str, item: dict[str, Any]) -> TransactWriteItemTypeDef:
    return {"Put": {"TableName": table, "Item": item, "ConditionExpression": "attribute_not_exists(PK)"}}


def _write_chunk_or_each(
    chunk: list[EventWrite],
    present: set[ItemKey],
    store: SubscriberStore,
    results: dict[EventWrite, WriteResult],
) -> None:
    try:
        _write_chunk(chunk, present, store, results)
    except ItemRejected as exc:
        if len(chunk) == 1:
            results[chunk[0]] = exc
            return
        logger.warning(
            "transaction rejected: writing its events one by one", code=exc.code, events=len(chunk)
        )
        for write in chunk:
            if write not in results:  # not already found to be a duplicate
                _write_chunk_or_each([write], present, store, results)
    except Exception as exc:  # reported per record: SQS delivers them again
        for write in chunk:
            results.setdefault(write, exc)


def _write_retry() -> Backoff:
    """Transactions of one chunk cancelled without progress: MAX_ATTEMPTS tries, full jitter."""
    return Backoff(attempts=MAX_ATTEMPTS, base=BACKOFF_S, cap=BACKOFF_CAP_S)


def _write_chunk(
    chunk: list[EventWrite],
    present: set[ItemKey],
    store: SubscriberStore,
    results: dict[EventWrite, WriteResult],
) -> None:
    """One transaction for ``chunk``, retried until every write is recorded or a duplicate.
    A cancellation that settles some writes (duplicates) is retried at once with the others;
    one without progress costs a try and backs off (:func:`_write_retry`)."""
    live = list(chunk)
    codes: list[str] = []
    for _ in _write_retry().tries():
        while live:
            requests, owners, claimed = transaction(live, present, store.table, store.events_table)
            actions = [
                Action(EVENT_PUT if owner is not None else SHARED, request)
                for request, owner in zip(requests, owners, strict=True)
            ]
            owner_of = {a: o for a, o in zip(actions, owners, strict=True) if o is not None}
            cancellation = _transact(store, actions)
            if cancellation is None:
                results.update(dict.fromkeys(live, RECORDED))
                present |= claimed
                return
            codes = cancellation.codes
            failed = cancellation.failed()
            duplicates = {owner_of[a] for a in failed if a in owner_of}
            for write in duplicates:
                results[write] = DUPLICATE
                _log_duplicate(write, "recorded before")
            live = [w for w in live if w not in duplicates]
            if len(duplicates) < len(failed):  # a unique marker appeared meanwhile
                present |= markers_present(store, [m for w in live for m in w.markers()])
            conflict = not cancellation.known or any(c not in (CONDITION_FAILED, NO_REASON) for c in codes)
            if duplicates and not conflict:
                continue  # progress: retry the rest at once
            break
        else:
            return  # every write settled
    raise WriteConflict(f"transaction still cancelled after {MAX_ATTEMPTS} attempts: {','.join(codes)}")


def _transact(store: SubscriberStore, actions: list[Action]) -> Cancellation | None:
    """None when committed; else why DynamoDB cancelled it, per action (ItemRejected when
    one item's content was the reason)."""
    try:
        cancellation = store.write_transaction(actions)
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code in ITEM_ERRORS:
            raise ItemRejected(code) from exc
        raise
    if cancellation is None:
        return None
    rejected = next((c for c in cancellation.codes if c in ITEM_ERRORS), None)
    if rejected:
        raise ItemRejected(rejected)
    return cancellation


def _log_duplicate(write: EventWrite, why: str) -> None:
    logger.info(
        "duplicate SES event ignored",
        event_type=write.item["type"],
        ses_message_id=write.item["ses_message_id"],
        why=why,
    )


def markers_present(store: SubscriberStore, markers: Iterable[ItemKey]) -> set[ItemKey]:
    """Which of these unique markers exist (strongly consistent reads)."""
    return store.existing(markers)


# ----- machine clicks and the last human engagement (docs/hygiene.md) ------------------------------
def judge_clicks(batch: Sequence[PreparedEvent], ctx: EngagementContext) -> dict[int, BaseException]:
    """Give each click the event alone does not judge (``machine_verdict``: the hidden link) a
    timing verdict (``click_timing_verdict``) from the events of the same mail around it: the
    batch's own, and those already stored, read with ONE Query per click (the subscriber's
    events-table partition, the few seconds around the click, filtered on the SES message id:
    its Delivery event and its other clicks). The write is replaced by one saying ``machine``.
    Returns, by ``id`` of the prepared event, why a click could not be judged (written later:
    SQS delivers it again)."""
    nearby: dict[tuple[str, str], list[Neighbour]] = {}
    for prepared in batch:
        for write in prepared.writes:
            if write.item["type"] in ("delivery", "click"):
                neighbour = Neighbour(str(write.item["type"]), write.at, str(write.item.get("link", "")))
                nearby.setdefault((write.email, str(write.item["ses_message_id"])), []).append(neighbour)
    failed: dict[int, BaseException] = {}
    for prepared in batch:
        if prepared.event.kind != "click":
            continue
        for index, write in enumerate(prepared.writes):
            if write.item.get("machine"):
                continue
            message = str(write.item["ses_message_id"])
            link = str(write.item.get("link", ""))
            try:
                stored = stored_neighbours(ctx.store, write.email, message, write.at)
            except ClientError as exc:
                failed[id(prepared)] = exc
                break
            mine = (write.email, message)
            others = [n for n in nearby.get(mine, []) if n.at != write.at or n.link != link]
            verdict = click_timing_verdict(write.at, link, [*others, *stored])
            if verdict is not None:
                prepared.writes[index] = judged(write, verdict)
    return failed


def stored_neighbours(store: SubscriberStore, email: str, message_id: str, at: str) -> list[Neighbour]:
    """The stored Delivery event and clicks of one mail within ``SCANNER_WINDOW_S`` of ``at``:
    one Query (a few items: 0.5 RRU for most clicks)."""
    found = []
    for item in events_around(
        store,
        email,
        at,
        timedelta(seconds=SCANNER_WINDOW_S),
        condition="ses_message_id = :message AND #type IN (:delivery, :click)",
        projection="#type, #at, link",
        message=message_id,
        delivery="delivery",
        click="click",
    ):
        found.append(Neighbour(str(item["type"]), str(item["at"]), str(item.get("link", ""))))
    return found


def judged(write: EventWrite, verdict: str) -> EventWrite:
    """``write`` as a machine's (``machine: <verdict>``): it feeds ``click_machine``, no unique."""
    item = {**write.item, "machine": verdict}
    return replace(write, item=item, metric=metric_of(item), put=serialize(item))


def touch_engagement(
    batch: Sequence[PreparedEvent],
    results: dict[EventWrite, WriteResult],
    skipped: dict[int, BaseException],
    ctx: EngagementContext,
) -> dict[int, BaseException]:
    """Record each subscriber's latest human open or click of the batch, written now or before (a
    redelivery repairs what a crash left undone), on their list-hygiene item
    (``shared.engagement.sunset.touch``: a write at most once a day). Returns, by ``id`` of the
    prepared event, the error that kept it from being recorded (SQS delivers it again)."""
    engaged: dict[str, str] = {}
    owners: dict[str, list[int]] = {}
    for prepared in batch:
        if id(prepared) in skipped:
            continue
        for write in prepared.writes:
            human = write.item["type"] in ("open", "click") and not write.item.get("machine")
            if not human or isinstance(results.get(write), BaseException):
                continue
            engaged[write.email] = max(engaged.get(write.email, write.at), write.at)
            owners.setdefault(write.email, []).append(id(prepared))
    if not engaged:
        return {}
    try:
        touch(ctx.store, engaged)
    except (ClientError, RuntimeError) as exc:
        logger.warning("last engagement not recorded", error=f"{type(exc).__name__}: {str(exc)[:200]}")
        return {owner: exc for ids in owners.values() for owner in ids}
    return {}


# ----- side effects ---------------------------------------------------------------------------
def escalate_soft_bounces(prepared: PreparedEvent, ctx: EngagementContext) -> BaseException | None:
    """Suppress each recipient of a written transient bounce who soft-bounced ``limit`` mails
    within the policy's window (``shared.engagement.soft_bounces``); the error that kept it from
    deciding (the record then fails and comes again), else None."""
    policy, event = ctx.soft_bounces, prepared.event
    for write in prepared.writes:
        try:
            bounced = soft_bounces_around(ctx.store, write.email, write.at, policy.window)
            if not escalates(bounced.values(), policy):
                continue
            result = ctx.suppressions.suppress(
                Suppression(
                    email=write.email,
                    reason=SOFT_BOUNCE_ESCALATION,
                    detail=f"{len(bounced)} soft-bounced mails around {write.at[:10]} ({policy.describe()})",
                    at=event.timestamp,
                    source=write.item.get("source"),
                    template=write.item.get("template"),
                    ses_message_id=event.mail.message_id,
                )
            )
        except (ClientError, RuntimeError) as exc:
            return exc
        prepared.outcome.suppressed += int(result.newly_suppressed)
    return None


def _suppression(event: SesEvent, email: str, correlation: Correlation) -> Suppression:
    detail = event.detail
    if isinstance(detail, Bounce):
        mine = next((r for r in detail.bounced_recipients if r.email_address.lower() == email.lower()), None)
        diagnostic = (mine.diagnostic_code or mine.status or "") if mine else ""
        text = f"{detail.bounce_type}/{detail.bounce_sub_type}" + (f": {diagnostic}" if diagnostic else "")
        reason = BOUNCE
    else:
        assert isinstance(detail, Complaint)
        text = f"complaint: {detail.complaint_feedback_type or 'unspecified'}"
        reason = COMPLAINT
    return Suppression(
        email=email,
        reason=reason,
        detail=text[:500],
        at=event.timestamp,
        source=correlation.source,
        template=correlation.template,
        ses_message_id=event.mail.message_id,
    )


def _unsubscribes(event: SesEvent) -> bool:
    detail = event.detail
    return (
        isinstance(detail, Subscription)
        and detail.new_topic_preferences is not None
        and detail.new_topic_preferences.unsubscribe_all
    )


def _unsubscribe(email: str, ctx: EngagementContext) -> None:
    ctx.store.unsubscribe(email)
    stopped = (
        ctx.stopper.stop_all(email, reason="unsubscribed (SES)", transactional_too=False)
        if ctx.stopper
        else []
    )
    logger.info(
        "unsubscribed by SES subscription event", subscriber=redact_email(email), stopped=len(stopped)
    )
