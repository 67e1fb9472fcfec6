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
secrets (both during a rotation) under the delivery's one ``webhook-id``, and POSTed (3 s to
connect, 10 s for the whole exchange: ``shared.webhooks.transport``). 2xx: delivered. 410:
the endpoint is disabled. Anything else: the next attempt
is scheduled (after ``Retry-After`` for 429 and 503 when the receiver sends one), or after the
last one the delivery is ``failed`` (the dead letters ``webhooks deliveries --failed`` lists).
An endpoint whose deliveries have failed for 5 days without a success is disabled.

The circuit (docs/webhooks.md, "Isolation"): after :data:`CIRCUIT_THRESHOLD` consecutive failed
attempts an endpoint's circuit opens: its deliveries are parked (an item each, no connection,
no attempt used) and one of them at a time is the probe, queued :func:`probe_delay` later. A
probe's success closes the circuit and queues the parked deliveries again, :data:`DRAIN_PAGE`
per success; a probe's failure keeps it open with a longer delay.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable, Iterator
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
    DRAINING,
    FAILED,
    OPEN,
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
CIRCUIT_THRESHOLD = 3  # consecutive failed attempts of an endpoint that open its circuit
CIRCUIT_BACKOFF_S = (30, 60, 120, 300, 600, 900)  # before the probe after the n-th opening
DRAIN_PAGE = 10  # parked deliveries queued again per success after the circuit closed


class DeliveryMessage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    endpoint_id: str = Field(pattern=r"^ep_[a-f0-9]{16}$")
    delivery_sk: str = Field(min_length=1, max_length=200)
    attempt: int = Field(ge=1, le=100)
    wait_s: int = Field(default=0, ge=0, le=10 * 86400)
    probe: bool = False  # the attempt that tests an open circuit (made while others are parked)


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

    def schedule(
        self, endpoint_id: str, delivery_sk: str, attempt: int, delay_s: float, *, probe: bool = False
    ) -> None:
        total = max(0, round(delay_s))
        first = min(SQS_MAX_DELAY_S, total)
        message = DeliveryMessage(
            endpoint_id=endpoint_id,
            delivery_sk=delivery_sk,
            attempt=attempt,
            wait_s=total - first,
            probe=probe,
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
    data_ttl_days: int = 30  # a parked delivery's item expires with its delivery

    @classmethod
    def from_settings(cls, settings: Settings) -> DeliveryContext:
        return cls(
            store=WebhookStore(settings.table_name),
            queue=DeliveryQueue(settings.webhook_queue_url),
            allow_loopback_http=settings.webhook_allow_loopback_http,  # the local runtime only
            data_ttl_days=settings.data_ttl_days,
        )


@dataclass(frozen=True)
class Outcome:
    status: str  # chained, gone, duplicate, parked, delivered, retrying, failed, disabled, endpoint_gone
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


def probe_delay(opens: int) -> int:
    """Seconds before the probe of a circuit opened ``opens`` times since the last success."""
    return CIRCUIT_BACKOFF_S[min(max(opens, 1), len(CIRCUIT_BACKOFF_S)) - 1]


def process(message: DeliveryMessage, ctx: DeliveryContext) -> Outcome:
    if message.wait_s > 0:  # a hop of a wait longer than SQS's 900 s
        hop = min(SQS_MAX_DELAY_S, message.wait_s)
        ctx.queue.send(message.model_copy(update={"wait_s": message.wait_s - hop}), hop)
        return Outcome("chained", message.attempt)
    store = ctx.store
    delivery = store.get_delivery(message.endpoint_id, message.delivery_sk)
    if delivery is None or delivery.status != PENDING:
        if message.probe:  # the probe's delivery ended otherwise: another parked one carries it
            _pass_probe(message.endpoint_id, ctx)
        return Outcome("gone" if delivery is None else "duplicate", message.attempt)
    if delivery.attempts >= message.attempt + 1:
        return Outcome("duplicate", message.attempt)
    moment = ctx.now()
    now = clock.iso(moment)
    try:
        endpoint = store.get_endpoint(message.endpoint_id)
    except NotFound:
        _fail_unsent(store, message, delivery.sk, now, "endpoint removed")
        return Outcome("endpoint_gone", message.attempt)
    parkable = endpoint.circuit == OPEN and endpoint.status != DISABLED and not message.probe
    if parkable and _park(endpoint.id, delivery.sk, message.attempt, ctx):
        logger.info("webhook delivery parked", endpoint=endpoint.id, attempt=message.attempt)
        return Outcome("parked", message.attempt)
    stale = clock.iso(moment - timedelta(seconds=STALE_ATTEMPT_S))
    if not store.claim_attempt(message.endpoint_id, delivery.sk, message.attempt, now, stale_before=stale):
        return Outcome("duplicate", message.attempt)
    if endpoint.status == DISABLED:
        _fail_unsent(store, message, delivery.sk, now, "endpoint disabled")
        if endpoint.circuit:  # the parked ones come here too, and fail the same way
            _drain(endpoint.id, ctx, (OPEN, DRAINING))
        return Outcome("failed", message.attempt)
    answer = _attempt(endpoint, delivery.message_id, delivery.body, ctx, moment)
    return _settle(endpoint, delivery.sk, message, answer, moment, ctx)


def _settle(
    endpoint: Endpoint,
    delivery_sk: str,
    message: DeliveryMessage,
    answer: transport.Answer,
    moment: datetime,
    ctx: DeliveryContext,
) -> Outcome:
    """The attempt's answer -> the delivery's record, the endpoint's circuit, the next attempt."""
    store, now = ctx.store, clock.iso(moment)
    entry = _entry(message.attempt, now, answer.status, answer.error)
    if answer.status is not None and 200 <= answer.status < 300:
        store.record_attempt(endpoint.id, delivery_sk, status=DELIVERED, outcome=entry)
        if endpoint.troubled or message.probe:
            reopened = endpoint.circuit == OPEN or message.probe
            store.close_circuit(endpoint.id, drain=reopened)
            if reopened or endpoint.circuit == DRAINING:
                _drain(endpoint.id, ctx, (DRAINING,))
        logger.info(
            "webhook delivered", endpoint=endpoint.id, attempt=message.attempt, status_code=answer.status
        )
        return Outcome("delivered", message.attempt, answer.status)
    if answer.status == GONE:
        return _disable(endpoint, delivery_sk, entry, "410 Gone", now, ctx)
    failing_since, failures = store.count_failure(endpoint.id, now)
    if moment - clock.parse_iso(failing_since) >= timedelta(seconds=DISABLE_AFTER_S):
        return _disable(endpoint, delivery_sk, entry, f"failing since {failing_since}", now, ctx)
    delay = next_delay(message.attempt, answer)
    # The circuit: this attempt opened it (or was its probe and failed): it carries the next probe
    opens = _trip(endpoint.id, message.probe, failures, ctx)
    if delay is None:
        store.record_attempt(endpoint.id, delivery_sk, status=FAILED, outcome=entry)
        if opens is not None:
            _pass_probe(endpoint.id, ctx, opens)
        logger.info("webhook delivery failed", endpoint=endpoint.id, attempts=message.attempt)
        return Outcome("failed", message.attempt, answer.status)
    if opens is not None:
        delay = max(delay, probe_delay(opens))
    # The next attempt is queued before this one's outcome is written: a crash in between
    # leaves the delivery pending with its next attempt on the way, never stuck.
    ctx.queue.schedule(endpoint.id, delivery_sk, message.attempt + 1, delay, probe=opens is not None)
    store.record_attempt(endpoint.id, delivery_sk, status=PENDING, outcome={**entry, "next_in_s": delay})
    logger.info(
        "webhook attempt failed",
        endpoint=endpoint.id,
        attempt=message.attempt,
        status_code=answer.status,  # None when no HTTP answer came (see error)
        error=answer.error,
        retry_in_s=delay,
        circuit_opens=opens,
    )
    return Outcome("retrying", message.attempt, answer.status)


def _disable(
    endpoint: Endpoint, delivery_sk: str, entry: dict[str, Any], reason: str, now: str, ctx: DeliveryContext
) -> Outcome:
    """The attempt failed the delivery and disabled the endpoint; its parked deliveries fail too."""
    ctx.store.record_attempt(endpoint.id, delivery_sk, status=FAILED, outcome=entry)
    ctx.store.disable(endpoint.id, reason, now)
    if endpoint.circuit:
        _drain(endpoint.id, ctx, (OPEN, DRAINING))
    logger.info("webhook endpoint disabled", endpoint=endpoint.id, reason=reason.split()[0])
    return Outcome("disabled", entry["attempt"], entry["status_code"])


def _trip(endpoint_id: str, probe: bool, failures: int, ctx: DeliveryContext) -> int | None:
    """The circuit's openings when this failed attempt opened it or was its probe, else None."""
    if probe:
        return ctx.store.open_circuit(endpoint_id, CIRCUIT_THRESHOLD, reopen=True)
    if failures >= CIRCUIT_THRESHOLD:
        return ctx.store.open_circuit(endpoint_id, CIRCUIT_THRESHOLD, reopen=False)
    return None


def _park(endpoint_id: str, delivery_sk: str, attempt: int, ctx: DeliveryContext) -> bool:
    """Park the attempt while the circuit is open; False when it closed meanwhile and the
    attempt is this message's to make after all."""
    ctx.store.park(endpoint_id, delivery_sk, attempt, clock.ttl_after(ctx.data_ttl_days))
    try:
        still_open = ctx.store.get_endpoint(endpoint_id).circuit == OPEN
    except NotFound:
        return True
    # closed between the first read and the park: take it back unless a drain already queued it
    return still_open or ctx.store.unpark(endpoint_id, delivery_sk) is None


def _unpark_some(endpoint_id: str, ctx: DeliveryContext, limit: int) -> Iterator[tuple[str, int]]:
    """Parked deliveries taken off the list (each by one taker only): (SK, attempt)."""
    for sk in ctx.store.parked(endpoint_id, limit):
        attempt = ctx.store.unpark(endpoint_id, sk)
        if attempt is not None:
            yield sk, attempt


def _drain(endpoint_id: str, ctx: DeliveryContext, states: tuple[str, ...]) -> None:
    """Queue up to DRAIN_PAGE parked deliveries again; none left: the circuit is closed."""
    queued = 0
    for sk, attempt in _unpark_some(endpoint_id, ctx, DRAIN_PAGE):
        ctx.queue.schedule(endpoint_id, sk, attempt, 0)
        queued += 1
    if queued < DRAIN_PAGE:
        ctx.store.end_circuit(endpoint_id, states)


def _pass_probe(endpoint_id: str, ctx: DeliveryContext, opens: int | None = None) -> None:
    """The probe's delivery ended: a parked delivery carries the next probe; none parked, the
    circuit closes with its failures counted (the next failure opens it again)."""
    if opens is None:
        try:
            opens = ctx.store.get_endpoint(endpoint_id).circuit_opens
        except NotFound:
            return
    for sk, attempt in _unpark_some(endpoint_id, ctx, 1):
        ctx.queue.schedule(endpoint_id, sk, attempt, probe_delay(opens), probe=True)
        return
    ctx.store.end_circuit(endpoint_id, (OPEN,))


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
