"""Dispatch: change-stream records -> one delivery per (event, subscribed endpoint).

For each webhook event a record stands for (``shared.webhooks.events.from_stream_record``)
and each enabled endpoint whose filters match it, the delivery item is created once
(conditional Put keyed by the event's time and id) and its first attempt queued. A record
delivered again finds its deliveries there and queues nothing new, except a first attempt
that was never queued (the earlier run stopped between the Put and the send), so an event
is delivered at least once and created exactly once per endpoint.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from shared.core import clock
from shared.core.settings import Settings
from shared.store import keys
from shared.webhooks.delivery import DeliveryQueue
from shared.webhooks.events import WebhookEvent, from_stream_record, matches
from shared.webhooks.store import ENABLED, PENDING, Endpoint, WebhookStore

# Endpoints are read again after this long (one Query): an endpoint added, changed or disabled
# counts for the changes from about this long after.
ENDPOINTS_MAX_AGE_S = 2.0


@dataclass
class DispatchContext:
    store: WebhookStore
    queue: DeliveryQueue
    data_ttl_days: int
    monotonic: Callable[[], float] = time.monotonic
    _endpoints: tuple[float, list[Endpoint]] | None = field(default=None, repr=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> DispatchContext:
        return cls(
            store=WebhookStore(settings.table_name),
            queue=DeliveryQueue(settings.webhook_queue_url),
            data_ttl_days=settings.data_ttl_days,
        )

    def endpoints(self) -> list[Endpoint]:
        now = self.monotonic()
        if self._endpoints is None or now - self._endpoints[0] > ENDPOINTS_MAX_AGE_S:
            self._endpoints = (now, [e for e in self.store.endpoints() if e.status == ENABLED])
        return self._endpoints[1]


def deliver(event: WebhookEvent, endpoint: Endpoint, ctx: DispatchContext) -> bool:
    """Create ``event``'s delivery to ``endpoint`` and queue its first attempt; False when it
    existed already (its first attempt queued again only if it was never taken)."""
    sk = keys.webhook_delivery_sk(event.timestamp, event.id)
    item: dict[str, Any] = {
        "endpoint_id": endpoint.id,
        "message_id": event.id,
        "event_type": event.type,
        "body": event.body(),
        "status": PENDING,
        "attempts": 0,
        "history": [],
        "created_at": clock.iso(),
        "ttl": clock.ttl_after(ctx.data_ttl_days),
    }
    created = ctx.store.create_delivery(endpoint.id, sk, item)
    if not created:
        existing = ctx.store.get_delivery(endpoint.id, sk)
        if existing is None or existing.status != PENDING or existing.attempts > 0:
            return False
    ctx.queue.schedule(endpoint.id, sk, 1, 0)
    return created


def dispatch_record(record: Mapping[str, Any], ctx: DispatchContext) -> int:
    """The deliveries one stream record created (0 for a record that is no webhook event)."""
    events = from_stream_record(record)
    if not events:
        return 0
    created = 0
    for event in events:
        for endpoint in ctx.endpoints():
            if matches(endpoint.events, event.type) and deliver(event, endpoint, ctx):
                created += 1
    return created
