"""Events ingestion: what POST /v1/events does with a validated batch.

Each event goes through :func:`dispatch`, the one place that decides what an event type
means (profile upsert, unsubscribe, and, from the sequences capability on, starting and
stopping sequences). Events carrying an ``id`` run under Powertools idempotency, so a
retried POST returns the stored outcome and changes nothing.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from typing import Any

from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyValidationError
from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import DataRecord

from shared.core import clock
from shared.core.aws import client as aws_client
from shared.core.models import UNSUBSCRIBE_EVENT, EventBatch, InboundEvent
from shared.core.observability import logger, redact_email
from shared.sequences.engine import SequenceEngine
from shared.store import keys
from shared.store.subscribers import SubscriberStore

# Everything of an event except its id: a reused id with a different payload is a conflict.
_PAYLOAD = "[type, email, first_name, attributes, tags, data]"


@dataclass
class EventOutcome:
    index: int
    type: str
    id: str | None
    subscriber: str  # created | updated | unchanged
    status: str | None
    tags_added: list[str] = field(default_factory=list)
    tags_removed: list[str] = field(default_factory=list)
    sequences_started: list[str] = field(default_factory=list)
    sequences_stopped: list[str] = field(default_factory=list)
    replayed: bool = False


@dataclass(frozen=True)
class IngestContext:
    store: SubscriberStore
    data_ttl_days: int
    idempotency: IdempotencyConfig | None = None
    persistence: DynamoDBPersistenceLayer | None = None
    sequences: SequenceEngine | None = None  # None: events start and stop no sequences


def make_idempotency(table_name: str, ttl_seconds: int) -> tuple[IdempotencyConfig, DynamoDBPersistenceLayer]:
    """Powertools idempotency records live in the main table under PK ``IDEMPOTENCY#events``."""
    config = IdempotencyConfig(
        event_key_jmespath="id",
        payload_validation_jmespath=_PAYLOAD,
        expires_after_seconds=ttl_seconds,
        response_hook=_mark_replayed,
    )
    layer = DynamoDBPersistenceLayer(
        table_name=table_name,
        key_attr="PK",
        sort_key_attr="SK",
        static_pk_value=keys.IDEMPOTENCY_PK,
        expiry_attr="ttl",
        boto3_client=aws_client("dynamodb"),
    )
    return config, layer


def _mark_replayed(response: dict[str, Any], idempotent_data: DataRecord) -> dict[str, Any]:
    return {**response, "replayed": True} if isinstance(response, dict) else response


def dispatch(event: InboundEvent, ctx: IngestContext) -> dict[str, Any]:
    """Apply one event. Returns the outcome as a plain dict (stored by idempotency).

    Order: profile upsert (an unsubscribe is recorded first), the event item, then the
    sequences: executions the event ends are stopped, then the ones it triggers start
    (``shared.sequences.engine``; the outcome lists both)."""
    store = ctx.store
    tags = event.tags
    add = tags.add if tags else ()
    remove = tags.remove if tags else ()
    change = store.upsert(
        event.email,
        # profile and suppression in one BatchGetItem: a new address costs one read, not two
        known=store.known([event.email])[event.email],
        first_name=event.first_name,
        attributes=event.attributes,
        add_tags=add,
        remove_tags=remove,
        unsubscribe=event.type == UNSUBSCRIBE_EVENT,
    )
    _record(event, ctx)
    started, stopped = ctx.sequences.on_event(event, change.profile) if ctx.sequences else ([], [])
    outcome = EventOutcome(
        index=0,
        type=event.type,
        id=event.id,
        subscriber="created" if change.created else ("updated" if change.changed else "unchanged"),
        status=change.profile.status if change.profile else None,
        tags_added=list(change.tags_added),
        tags_removed=list(change.tags_removed),
        sequences_started=started,
        sequences_stopped=stopped,
    )
    logger.info(
        "event processed",
        event_type=event.type,
        subscriber=redact_email(event.email),
        outcome=outcome.subscriber,
    )
    return asdict(outcome)


def _record(event: InboundEvent, ctx: IngestContext) -> None:
    suffix = hashlib.sha256(event.id.encode()).hexdigest()[:16] if event.id else None  # None: random
    ctx.store.add_event(
        event.email,
        event.type,
        at=clock.utc_now(),
        ttl_days=ctx.data_ttl_days,
        suffix=suffix,
        origin="api",
        event_id=event.id or None,
        data=event.data or None,
    )


def ingest(batch: EventBatch, ctx: IngestContext) -> list[dict[str, Any]]:
    """Process a validated batch in order; events with an ``id`` are idempotent."""
    idempotent = None
    if ctx.idempotency is not None and ctx.persistence is not None:
        idempotent = idempotent_function(
            _dispatch_kw,
            data_keyword_argument="event",
            persistence_store=ctx.persistence,
            config=ctx.idempotency,
            key_prefix="mailstep-events",
        )
    results = []
    for index, event in enumerate(batch.events):
        if event.id and idempotent is not None:
            try:
                outcome = idempotent(event=event.model_dump(mode="json"), ctx=ctx)
            except IdempotencyValidationError:
                results.append(
                    {
                        "index": index,
                        "type": event.type,
                        "id": event.id,
                        "error": {
                            "code": "conflict",
                            "message": f"id {event.id!r} was already used "
                            "for a different event; nothing was changed",
                        },
                    }
                )
                continue
        else:
            outcome = dispatch(event, ctx)
        results.append({**outcome, "index": index})
    return results


def _dispatch_kw(*, event: dict[str, Any], ctx: IngestContext) -> dict[str, Any]:
    return dispatch(InboundEvent.model_validate(event), ctx)
