"""The engagement consumer: one SES event record -> events table, counters, suppression.

    SQS body -> parse (SNS envelope or raw) -> per recipient: correlate -> side effects
             -> ONE transaction: event item (deduplicating) + counters (+ unique markers)

- Correlation: the EmailTags the send pipeline sets (``template``, ``source``, ``step``,
  ``send_id``, encoded by ``shared.sender.encode_tag_value``); when they are missing or
  invalid, the ``SENT#`` item of the recipient whose ``ses_message_id`` is the event's
  ``mail.messageId``. Uncorrelated events are still recorded (no GSI keys, no counters).
- Deduplication: the event item's key is derived from the SES event itself
  (``SesEvent.identity``: type, SES message id, recipient, the type object), and is put
  with ``attribute_not_exists``. The counter ADDs and unique markers ride in the SAME
  TransactWriteItems, so a redelivered record (by SQS, or by SNS under a new MessageId)
  changes nothing: the transaction is cancelled by the event item's condition.
- Uniques: the first open/click of a subscriber per source and per template puts a marker
  (``UNIQ#...``, ``attribute_not_exists``) and ADDs ``open_unique``/``click_unique`` in that
  same transaction; the markers are read first, and a lost race (the marker appeared in
  between) retries without the unique ADD.
- Permanent bounce / complaint: suppression (``shared.suppression``: flag, SUPPRESSION item,
  stop every execution) runs BEFORE the deduplicating transaction, so a crash in between is
  repaired by the redelivery. Transient/undetermined bounces and delays are only counted.
- SES ``Subscription`` with ``unsubscribeAll``: the subscriber is unsubscribed and their
  marketing executions stopped, like mailstep's own unsubscribe link.

Record policy (docs/engagement.md): a record that is not an SES event (bad JSON, no
``mail``, malformed type object) raises :class:`~shared.ses_events.MalformedEvent`: the
handler reports it in ``batchItemFailures``, SQS retries it ``maxReceiveCount`` times and
moves it to the dead-letter queue, whose alarm tells an operator (redrive after a fix).
An event type this code does not know is acknowledged and logged (SES adds types).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from shared import keys
from shared.dynamo import TransactionConflict, deserialize, key, query_all, serialize, transact, values
from shared.models import normalise_email, validate_name
from shared.observability import logger, redact_email
from shared.rendering import KEY_RE, MAX_KEY
from shared.sender import decode_tag_value
from shared.ses_events import (
    Bounce,
    Click,
    Complaint,
    DeliveryDelay,
    MalformedEvent,
    SesEvent,
    Subscription,
    parse_body,
)
from shared.settings import Settings
from shared.stats import SOURCE_SCOPE, TEMPLATE_SCOPE, UNIQUE_METRICS, counter_update, metric_of
from shared.store import SubscriberStore
from shared.suppression import BOUNCE, COMPLAINT, ExecutionStopper, Suppression, Suppressions

ORIGIN = "ses"
SUFFIX_LEN = 24
MAX_ATTEMPTS = 4


@dataclass(frozen=True)
class Correlation:
    template: str | None = None
    source: str | None = None
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
    correlated_via: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        if self.kind is None:
            return "ignored"
        return "recorded" if self.recorded else "duplicate" if self.duplicates else "nothing"


@dataclass(frozen=True)
class EngagementContext:
    store: SubscriberStore
    suppressions: Suppressions
    data_ttl_days: int = 180
    stopper: ExecutionStopper | None = None  # marketing stops on an SES unsubscribe

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
        )


def process_body(body: str | bytes | dict[str, Any], ctx: EngagementContext) -> Outcome:
    """One SQS body. Raises MalformedEvent for a record that is not an SES event."""
    try:
        event = parse_body(body)
    except MalformedEvent as exc:
        logger.warning("malformed SES event record", error=str(exc)[:300])
        raise
    return process_event(event, ctx)


def process_event(event: SesEvent, ctx: EngagementContext) -> Outcome:
    outcome = Outcome(event_type=event.event_type, kind=event.kind)
    if event.kind is None:
        logger.warning(
            "unknown SES event type acknowledged",
            event_type=event.event_type[:60],
            ses_message_id=event.mail.message_id,
        )
        return outcome
    for raw in event.recipients():
        try:
            email = normalise_email(raw)
        except ValueError:
            outcome.skipped_recipients += 1
            logger.warning("SES event names an invalid recipient", event_type=event.event_type)
            continue
        correlation = correlate(event, email, ctx.store)
        outcome.correlated_via.append(correlation.via or "none")
        if event.permanent_bounce or event.kind == "complaint":
            ctx.suppressions.suppress(_suppression(event, email, correlation))
            outcome.suppressed += 1
        if _unsubscribes(event):
            _unsubscribe(email, ctx)
            outcome.unsubscribed += 1
        if record(event, email, correlation, ctx):
            outcome.recorded += 1
        else:
            outcome.duplicates += 1
    logger.info(
        "SES event processed",
        event_type=event.event_type,
        ses_message_id=event.mail.message_id,
        status=outcome.status,
        correlated_via=",".join(sorted(set(outcome.correlated_via))),
    )
    return outcome


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
        if len(template) > MAX_KEY or not KEY_RE.match(template):
            raise ValueError("template tag is not a template key")
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
    for raw in query_all(
        store.client,
        TableName=store.table,
        KeyConditionExpression="PK = :pk AND begins_with(SK, :prefix)",
        FilterExpression="ses_message_id = :mid",
        ExpressionAttributeValues=values(pk=keys.sub_pk(email), prefix=keys.SENT_PREFIX, mid=message_id),
        ConsistentRead=True,
    ):
        item = deserialize(raw)
        return Correlation(
            template=item.get("template"),
            source=item.get("source"),
            step=item.get("step"),
            send_id=item.get("send_id"),
            via="sent_log",
        )
    return None


# ----- the deduplicating write ---------------------------------------------------------------
def event_item(event: SesEvent, email: str, correlation: Correlation, data_ttl_days: int) -> dict[str, Any]:
    ts = event.timestamp
    identity = event.identity(email)
    assert event.kind is not None
    item: dict[str, Any] = {
        "PK": keys.sub_pk(email),
        "SK": keys.event_sk(ts, event.kind, identity[:SUFFIX_LEN]),
        "type": event.kind,
        "origin": ORIGIN,
        "at": ts,
        "ttl": int(
            (datetime.fromisoformat(ts.replace("Z", "+00:00")) + timedelta(days=data_ttl_days)).timestamp()
        ),
        "event_id": identity,
        "ses_message_id": event.mail.message_id,
    }
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
    item.update({k: v for k, v in optional.items() if v not in (None, "")})
    return item


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
    if isinstance(detail, Click):
        return {"link": detail.link[:2000]}
    if isinstance(detail, DeliveryDelay):
        return {"delay_type": detail.delay_type}
    if event.kind == "reject":
        return {"reason": getattr(detail, "reason", "")}
    if event.kind == "rendering_failure":
        return {"error": getattr(detail, "error_message", "")[:500]}
    if isinstance(detail, Subscription) and detail.new_topic_preferences is not None:
        return {"unsubscribe_all": detail.new_topic_preferences.unsubscribe_all}
    return {}


def record(event: SesEvent, email: str, correlation: Correlation, ctx: EngagementContext) -> bool:
    """Write the event item and its counters once. False: this event was recorded before."""
    store = ctx.store
    item = event_item(event, email, correlation, ctx.data_ttl_days)
    metric = metric_of(item)
    scopes = []
    if metric is not None and correlation.source:
        scopes.append((SOURCE_SCOPE, correlation.source, (keys.stats_pk(correlation.source), keys.COUNTERS)))
    if metric is not None and correlation.template:
        scopes.append((TEMPLATE_SCOPE, correlation.template, keys.template_stats_key(correlation.template)))
    put = {
        "Put": {
            "TableName": store.events_table,
            "Item": serialize(item),
            "ConditionExpression": "attribute_not_exists(PK)",
        }
    }
    for _ in range(MAX_ATTEMPTS):
        counted = _markers_present(store, email, metric, scopes) if metric in UNIQUE_METRICS else set()
        actions = [put]
        for scope, value, (pk, sk) in scopes:
            first = metric in UNIQUE_METRICS and scope not in counted
            assert metric is not None
            actions.append(counter_update(store.table, pk, sk, metric, unique=first, at=item["at"]))
            if first:
                marker = {
                    "PK": keys.sub_pk(email),
                    "SK": keys.unique_marker_sk(metric, scope, value),
                    "at": item["at"],
                }
                actions.append(
                    {
                        "Put": {
                            "TableName": store.table,
                            "Item": serialize(marker),
                            "ConditionExpression": "attribute_not_exists(PK)",
                        }
                    }
                )
        try:
            transact(store.client, actions)
        except TransactionConflict as exc:
            if exc.reasons and exc.reasons[0] == "ConditionalCheckFailed":
                logger.info(
                    "duplicate SES event ignored",
                    event_type=event.event_type,
                    ses_message_id=event.mail.message_id,
                )
                return False
            continue  # a unique marker appeared meanwhile: read the markers again
        return True
    raise RuntimeError("the unique markers kept changing: giving up on this record for now")


def _markers_present(
    store: SubscriberStore, email: str, metric: str | None, scopes: list[tuple[str, str, tuple[str, str]]]
) -> set[str]:
    if not scopes or metric is None:
        return set()
    wanted = {keys.unique_marker_sk(metric, scope, value): scope for scope, value, _ in scopes}
    request: dict[str, Any] = {
        store.table: {
            "Keys": [key(keys.sub_pk(email), sk) for sk in wanted],
            "ConsistentRead": True,
            "ProjectionExpression": "SK",
        }
    }
    present: set[str] = set()
    for _ in range(MAX_ATTEMPTS):
        response = store.client.batch_get_item(RequestItems=request)
        present |= {wanted[i["SK"]["S"]] for i in response.get("Responses", {}).get(store.table, [])}
        request = response.get("UnprocessedKeys") or {}
        if not request:
            return present
    raise RuntimeError("DynamoDB kept keys unprocessed")


# ----- side effects ---------------------------------------------------------------------------
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
