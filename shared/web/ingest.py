"""Events ingestion: what POST /v1/events does with a validated batch.

Before anything is written, :func:`check_batch` validates the whole batch against the
profiles it will produce (the per-subscriber limits on the merged profile, events of one
subscriber applied in order): a batch that breaks one is refused whole, each problem named by
its field (``events[1].tags``). Then each event goes through :func:`dispatch`, the one place
that decides what an event type means (profile upsert, unsubscribe, and, from the sequences
capability on, starting and stopping sequences). Events carrying an ``id`` run under
Powertools idempotency, so a retried POST returns the stored outcome and changes nothing.
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
from aws_lambda_powertools.utilities.typing import LambdaContext

from shared.core import clock
from shared.core.aws import client as aws_client
from shared.core.errors import FieldProblem, InvalidInput
from shared.core.models import UNSUBSCRIBE_EVENT, EventBatch, InboundEvent
from shared.core.observability import logger, redact_email
from shared.core.settings import Settings
from shared.sequences.engine import SequenceEngine, engine_from_settings
from shared.store import keys
from shared.store.events import event_record
from shared.store.subscribers import (
    ASSUMED_NEW,
    Known,
    ProfileChange,
    SubscriberStore,
    limit_problems,
    merged,
)

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

    def register_lambda_context(self, lambda_context: LambdaContext) -> None:
        """Lets the idempotency records of an invocation expire with its remaining time."""
        if self.idempotency is not None:
            self.idempotency.register_lambda_context(lambda_context)


def ingest_context_from_settings(settings: Settings, store: SubscriberStore) -> IngestContext:
    """Production wiring of the events API's ingestion: idempotency records in the main table
    and the sequence engine of the deployment's state machines."""
    idempotency, persistence = make_idempotency(settings.table_name, settings.idempotency_ttl_seconds)
    return IngestContext(
        store=store,
        data_ttl_days=settings.data_ttl_days,
        idempotency=idempotency,
        persistence=persistence,
        sequences=engine_from_settings(settings, store),
    )


def make_idempotency(
    table_name: str, ttl_seconds: int, client: Any = None
) -> tuple[IdempotencyConfig, DynamoDBPersistenceLayer]:
    """Powertools idempotency records live in the main table under PK ``IDEMPOTENCY#events``
    (``client``: a DynamoDB client of another target than the environment's, e.g. an operator's)."""
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
        boto3_client=client or aws_client("dynamodb"),
    )
    return config, layer


def _mark_replayed(response: dict[str, Any], idempotent_data: DataRecord) -> dict[str, Any]:
    return {**response, "replayed": True} if isinstance(response, dict) else response


def profile_change(event: InboundEvent) -> ProfileChange:
    """What ``event`` changes of its subscriber's profile (the upsert's arguments)."""
    return ProfileChange(
        first_name=event.first_name,
        attributes=event.attributes,
        add_tags=event.tags.add if event.tags else (),
        remove_tags=event.tags.remove if event.tags else (),
        unsubscribe=event.type == UNSUBSCRIBE_EVENT,
    )


def check_batch(batch: EventBatch, store: SubscriberStore, *, assume_new: bool = False) -> dict[str, Known]:
    """Refuse the batch whole, before anything is written, when the profiles it would produce
    break a per-subscriber limit: each event is merged (the store's one rule, ``merged``) onto
    the profile the events before it leave, and checked (``limit_problems``). The refusal names
    every breaking event's field (``events[1].tags``). Returns the addresses as read (profile
    and suppression, one consistent BatchGetItem per 50 addresses): each one's first upsert
    starts from it instead of reading again.

    ``assume_new`` (the events API): a request of one event reads nothing: its address is
    checked as a new subscriber and written as one (:data:`ASSUMED_NEW`), the write's conditions
    standing for the read. When the profile exists after all, the refused write brings it back
    and the event is merged onto it and checked again (:meth:`SubscriberStore.mutate`): a limit
    it breaks then refuses the request the same way, nothing written. A new subscriber costs 1
    request (the profile's transaction, the event record in it) instead of 2, an existing one 2
    (a refused transaction instead of the read). Callers whose events are about existing
    subscribers (the sunset, replies) read first."""
    if assume_new and len(batch.events) == 1:
        known = {batch.events[0].email: ASSUMED_NEW}
    else:
        known = store.known(event.email for event in batch.events)
    profiles = {email: state.profile for email, state in known.items()}
    problems: list[FieldProblem] = []
    for index, event in enumerate(batch.events):
        current = profiles[event.email]
        proposed = merged(current, event.email, **profile_change(event))
        found = limit_problems(current, proposed)
        problems += [FieldProblem(batch.field_of(index, p.field), p.message) for p in found]
        profiles[event.email] = current if found else proposed
    if problems:
        raise InvalidInput(f"{problems[0].field}: {problems[0].message}; nothing was written", problems)
    return known


def dispatch(event: InboundEvent, ctx: IngestContext, known: Known | None = None) -> dict[str, Any]:
    """Apply one event. Returns the outcome as a plain dict (stored by idempotency).

    Order: profile upsert with the event item in its transaction (the item alone when the
    profile needs no write; an unsubscribe is recorded first), then the sequences: executions
    the event ends are stopped, then the ones it triggers start (``shared.sequences.engine``;
    the outcome lists both). ``known``: the address as read
    just before (else read here: profile and suppression in one BatchGetItem)."""
    store = ctx.store
    record = _record(event, ctx)
    change = store.upsert(
        event.email,
        known=known or store.known([event.email])[event.email],
        extra=[store.event_put(event.email, record)],  # one transaction with the profile
        **profile_change(event),
    )
    if not change.changed:  # the profile needed no write: the event record alone
        store.record_event(event.email, record)
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


def _record(event: InboundEvent, ctx: IngestContext) -> dict[str, Any]:
    """The event's item in the events table (``shared.store.events.event_record``)."""
    suffix = hashlib.sha256(event.id.encode()).hexdigest()[:16] if event.id else None  # None: random
    return event_record(
        event.email,
        event.type,
        at=clock.utc_now(),
        ttl_days=ctx.data_ttl_days,
        suffix=suffix,
        origin="api",
        event_id=event.id or None,
        data=event.data or None,
    )


def ingest(batch: EventBatch, ctx: IngestContext, *, assume_new: bool = False) -> list[dict[str, Any]]:
    """Process a validated batch in order (after :func:`check_batch`; nothing is written when it
    refuses); events with an ``id`` are idempotent. ``assume_new``: see :func:`check_batch`."""
    known = check_batch(batch, ctx.store, assume_new=assume_new)
    idempotent = None
    if ctx.idempotency is not None and ctx.persistence is not None:
        idempotent = idempotent_function(
            _dispatch_kw,
            data_keyword_argument="event",
            persistence_store=ctx.persistence,
            config=ctx.idempotency,
            key_prefix="mailstep-events",
        )
    results: list[dict[str, Any]] = []
    for index, event in enumerate(batch.events):
        # the address as check_batch read it, for its first event only (later ones read again)
        state = known.pop(event.email, None)
        try:
            if event.id and idempotent is not None:
                outcome = idempotent(event=event.model_dump(mode="json"), ctx=ctx, known=state)
            else:
                outcome = dispatch(event, ctx, state)
        except IdempotencyValidationError:
            message = f"id {event.id!r} was already used for a different event; nothing was changed"
            results.append(_refused(index, event, "conflict", message))
            continue
        except InvalidInput as exc:
            # The store refuses a write past a limit, checked on the profile it finds: only a
            # concurrent writer can make it differ from what check_batch read. Before any write
            # the request is refused whole; after one, this event alone is, in its result.
            named = [FieldProblem(batch.field_of(index, p.field), p.message) for p in exc.problems]
            first = named[0] if named else FieldProblem(batch.field_of(index, "body"), exc.message)
            if all("error" in r for r in results):
                message = f"{first.field}: {first.message}; nothing was written"
                raise InvalidInput(message, named or [first]) from None
            results.append(_refused(index, event, "invalid_request", first.message, field=first.field))
            continue
        results.append({**outcome, "index": index})
    return results


def _refused(index: int, event: InboundEvent, code: str, message: str, **extra: str) -> dict[str, Any]:
    """The result of an event that changed nothing: its error instead of an outcome."""
    return {
        "index": index,
        "type": event.type,
        "id": event.id,
        "error": {"code": code, "message": message, **extra},
    }


def _dispatch_kw(*, event: dict[str, Any], ctx: IngestContext, known: Known | None = None) -> dict[str, Any]:
    return dispatch(InboundEvent.model_validate(event), ctx, known)
