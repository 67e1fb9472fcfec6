"""Webhook deliveries: the queue envelope, the retry schedule and one attempt.

The schedule is Standard Webhooks' (spec v1.0.0): immediately, then 5 s, 5 min, 30 min, 2 h,
5 h, 10 h, 14 h, 20 h and 24 h after each failure: ten attempts over about 3 days and 3 hours.
An attempt is a ``webhook.delivery`` envelope on the webhook queue; SQS delays a message by
at most 900 s (``DelaySeconds``), so a longer wait is a chain: the message carries the wait
still ahead (``wait_s``) and each hop sends itself again with ``min(900, wait_s)`` until
nothing is left. A hop costs one SQS send, one receive and one invocation (docs/webhooks.md).

One attempt (:func:`process`): the delivery must still be pending and this attempt not taken
(``WebhookStore.claim_attempt``: a redelivered message does nothing); the URL is resolved and
checked (``shared.webhooks.ssrf``); the body stored at dispatch is signed with the endpoint's
secrets (both during a rotation) under the delivery's one ``webhook-id``, and POSTed with a
15 s timeout. 2xx: delivered. 410: the endpoint is disabled. Anything else: the next attempt
is scheduled (after ``Retry-After`` for 429 and 503 when the receiver sends one), or after the
last one the delivery is ``failed`` (the dead letters ``webhooks deliveries --failed`` lists).
An endpoint whose deliveries have failed for 5 days without a success is disabled.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from shared.core import clock
from shared.core.aws import client as aws_client
from shared.core.envelopes import decode, encode
from shared.core.errors import NotFound
from shared.core.observability import logger
from shared.core.settings import Settings
from shared.webhooks import signing, ssrf, transport
from shared.webhooks.store import (
    DELIVERED,
    DISABLED,
    FAILED,
    PENDING,
    Endpoint,
    EndpointSecrets,
    WebhookStore,
)

CONTRACT = "webhook.delivery"
# Delay before attempt n+1 (index n-1 = attempt n; attempt 1 is immediate).
SCHEDULE_S: tuple[int, ...] = (0, 5, 300, 1800, 7200, 18000, 36000, 50400, 72000, 86400)
MAX_ATTEMPTS = len(SCHEDULE_S)
SQS_MAX_DELAY_S = 900
MAX_RETRY_AFTER_S = 86400
DISABLE_AFTER_S = 5 * 86400  # an endpoint failing this long without a success is disabled
ROTATION_OVERLAP_S = 86400  # after a rotation, the previous secret signs too for this long
# A taken attempt whose outcome was never recorded (the function died mid-attempt) may be taken
# again after this long: more than the POST's timeout, less than the queue's visibility timeout.
STALE_ATTEMPT_S = 120
GONE = 410
HONOURS_RETRY_AFTER = (429, 503)


class DeliveryMessage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    endpoint_id: str = Field(pattern=r"^ep_[a-f0-9]{16}$")
    delivery_sk: str = Field(min_length=1, max_length=200)
    attempt: int = Field(ge=1, le=100)
    wait_s: int = Field(default=0, ge=0, le=10 * 86400)


def parse_message(body: str) -> DeliveryMessage:
    return decode(body, CONTRACT, DeliveryMessage)


class DeliveryQueue:
    """Sends ``webhook.delivery`` envelopes (SQS ``DelaySeconds`` up to 900, longer waits chained)."""

    def __init__(self, queue_url: str, client: Any = None) -> None:
        self.queue_url = queue_url
        self._client = client

    @property
    def client(self) -> Any:
        return self._client or aws_client("sqs")

    def schedule(self, endpoint_id: str, delivery_sk: str, attempt: int, delay_s: float) -> None:
        total = max(0, round(delay_s))
        first = min(SQS_MAX_DELAY_S, total)
        message = DeliveryMessage(
            endpoint_id=endpoint_id, delivery_sk=delivery_sk, attempt=attempt, wait_s=total - first
        )
        self.send(message, first)

    def send(self, message: DeliveryMessage, delay_s: int) -> None:
        self.client.send_message(
            QueueUrl=self.queue_url, MessageBody=encode(CONTRACT, message), DelaySeconds=delay_s
        )


@dataclass
class SecretCache:
    """Endpoint secrets, read again when the endpoint's ``secret_version`` changes (a rotation)."""

    entries: dict[str, tuple[int, EndpointSecrets]] = field(default_factory=dict)

    def get(self, store: WebhookStore, endpoint: Endpoint) -> EndpointSecrets:
        cached = self.entries.get(endpoint.secret_name)
        if cached is not None and cached[0] == endpoint.secret_version:
            return cached[1]
        value = store.read_secret(endpoint.secret_name, fresh=cached is not None)
        self.entries[endpoint.secret_name] = (endpoint.secret_version, value)
        return value


Poster = Callable[..., transport.Answer]


@dataclass
class DeliveryContext:
    store: WebhookStore
    queue: DeliveryQueue
    allow_loopback_http: bool = False
    post: Poster = transport.post
    resolver: ssrf.Resolver | None = None
    now: Callable[[], datetime] = clock.utc_now
    tls_context: ssl.SSLContext | None = None
    secrets: SecretCache = field(default_factory=SecretCache)

    @classmethod
    def from_settings(cls, settings: Settings) -> DeliveryContext:
        return cls(
            store=WebhookStore(settings.table_name),
            queue=DeliveryQueue(settings.webhook_queue_url),
            allow_loopback_http=settings.webhook_allow_loopback_http,  # the local runtime only
        )


@dataclass(frozen=True)
class Outcome:
    status: str  # chained, gone, duplicate, delivered, retrying, failed, disabled, endpoint_gone
    attempt: int = 0
    status_code: int | None = None


def next_delay(attempt: int, answer: transport.Answer) -> float | None:
    """Seconds until the attempt after failed attempt ``attempt``; None after the last one."""
    if attempt >= MAX_ATTEMPTS:
        return None
    delay = float(SCHEDULE_S[attempt])
    if answer.status in HONOURS_RETRY_AFTER and answer.retry_after_s is not None:
        delay = min(MAX_RETRY_AFTER_S, answer.retry_after_s)
    return delay


def process(message: DeliveryMessage, ctx: DeliveryContext) -> Outcome:
    if message.wait_s > 0:  # a hop of a wait longer than SQS's 900 s
        hop = min(SQS_MAX_DELAY_S, message.wait_s)
        ctx.queue.send(message.model_copy(update={"wait_s": message.wait_s - hop}), hop)
        return Outcome("chained", message.attempt)
    store = ctx.store
    delivery = store.get_delivery(message.endpoint_id, message.delivery_sk)
    if delivery is None:
        return Outcome("gone", message.attempt)
    if delivery.status != PENDING or delivery.attempts >= message.attempt + 1:
        return Outcome("duplicate", message.attempt)
    moment = ctx.now()
    now = clock.iso(moment)
    try:
        endpoint = store.get_endpoint(message.endpoint_id)
    except NotFound:
        _fail_unsent(store, message, delivery.sk, now, "endpoint removed")
        return Outcome("endpoint_gone", message.attempt)
    stale = clock.iso(moment - timedelta(seconds=STALE_ATTEMPT_S))
    if not store.claim_attempt(message.endpoint_id, delivery.sk, message.attempt, now, stale_before=stale):
        return Outcome("duplicate", message.attempt)
    if endpoint.status == DISABLED:
        _fail_unsent(store, message, delivery.sk, now, "endpoint disabled")
        return Outcome("failed", message.attempt)
    answer = _attempt(endpoint, delivery.message_id, delivery.body, ctx, moment)
    entry = _entry(message.attempt, now, answer.status, answer.error)
    if answer.status is not None and 200 <= answer.status < 300:
        store.record_attempt(endpoint.id, delivery.sk, status=DELIVERED, outcome=entry)
        if endpoint.failing_since:
            store.mark_healthy(endpoint.id)
        logger.info(
            "webhook delivered", endpoint=endpoint.id, attempt=message.attempt, status_code=answer.status
        )
        return Outcome("delivered", message.attempt, answer.status)
    if answer.status == GONE:
        store.record_attempt(endpoint.id, delivery.sk, status=FAILED, outcome=entry)
        store.disable(endpoint.id, "410 Gone", now)
        logger.info("webhook endpoint disabled", endpoint=endpoint.id, reason="410")
        return Outcome("disabled", message.attempt, answer.status)
    failing_since = endpoint.failing_since or store.mark_failing(endpoint.id, now)
    if moment - clock.parse_iso(failing_since) >= timedelta(seconds=DISABLE_AFTER_S):
        store.record_attempt(endpoint.id, delivery.sk, status=FAILED, outcome=entry)
        store.disable(endpoint.id, f"failing since {failing_since}", now)
        logger.info("webhook endpoint disabled", endpoint=endpoint.id, reason="failing")
        return Outcome("disabled", message.attempt, answer.status)
    delay = next_delay(message.attempt, answer)
    if delay is None:
        store.record_attempt(endpoint.id, delivery.sk, status=FAILED, outcome=entry)
        logger.info("webhook delivery failed", endpoint=endpoint.id, attempts=message.attempt)
        return Outcome("failed", message.attempt, answer.status)
    # The next attempt is queued before this one's outcome is written: a crash in between
    # leaves the delivery pending with its next attempt on the way, never stuck.
    ctx.queue.schedule(endpoint.id, delivery.sk, message.attempt + 1, delay)
    store.record_attempt(endpoint.id, delivery.sk, status=PENDING, outcome={**entry, "next_in_s": delay})
    logger.info(
        "webhook attempt failed",
        endpoint=endpoint.id,
        attempt=message.attempt,
        status_code=answer.status,  # None when no HTTP answer came (see error)
        error=answer.error,
        retry_in_s=delay,
    )
    return Outcome("retrying", message.attempt, answer.status)


def _attempt(
    endpoint: Endpoint, message_id: str, body: str, ctx: DeliveryContext, moment: datetime
) -> transport.Answer:
    try:
        target = ssrf.resolve(
            endpoint.url, allow_loopback_http=ctx.allow_loopback_http, resolver=ctx.resolver
        )
    except ssrf.UnsafeUrl as exc:
        return transport.Answer(status=None, error=str(exc))
    secrets = ctx.secrets.get(ctx.store, endpoint).signing(clock.iso(moment))
    headers = signing.headers(secrets, message_id, int(time.time()), body)
    return ctx.post(
        target, headers, body, allow_loopback_http=ctx.allow_loopback_http, tls_context=ctx.tls_context
    )


def _entry(attempt: int, at: str, status_code: int | None, error: str | None) -> dict[str, Any]:
    return {"attempt": attempt, "at": at, "status_code": status_code, "error": error}


def _fail_unsent(
    store: WebhookStore, message: DeliveryMessage, delivery_sk: str, now: str, reason: str
) -> None:
    """Record the message's attempt as failed before any request was made (``reason`` says why)."""
    store.record_attempt(
        message.endpoint_id, delivery_sk, status=FAILED, outcome=_entry(message.attempt, now, None, reason)
    )
