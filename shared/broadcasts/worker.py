"""The broadcast worker: one ``broadcast.batch`` -> one send per recipient through the send
pipeline, within the shared send rate, counted exactly once.

Per batch:
1. load the record; a batch of an earlier round (the broadcast was resumed) is dropped; a
   batch after the broadcast's send window is dropped too, unsent and uncounted, and an
   unfinished broadcast is marked failed (``records.close_window``: its claims and markers
   expire after the window); a cancelled broadcast's batch is counted as
   ``skipped_cancelled`` and nothing is sent; a batch in a worker's hands reads the record's
   status again every ``STATUS_CHECK_S`` seconds and, once it is cancelled (or failed),
   starts no further send: the recipients not yet sent are counted ``skipped_cancelled``, so
   a cancel stops the mail within seconds instead of after every batch in flight;
2. every recipient: a token from the shared rate limiter (``shared.sending.rate``: the worker
   takes leases of twice its sends in flight and sends each at its token's instant), then
   ``send_pipeline.send`` with source = broadcast id and step ``broadcast`` (send-once key
   (broadcast, subscriber), its claim expiring a day after the send window:
   ``records.items_until``); up to ``threads`` sends in flight;
3. SES throttling (a reserved share used by other mail, a burst elsewhere) is retried here
   with exponential backoff and a fresh token; what is still retryable at the end
   (throttled for long, another worker's claim in flight, account paused, time running out)
   fails the SQS record: it comes back after the visibility timeout, never counted as failed;
4. all recipients settled: the batch's outcomes are added to the record with the batch
   marker in one transaction (a redelivered batch adds nothing), then ``done`` is set once
   every resolved recipient was counted. A busy engagement counters item never fails the
   batch: its ``send`` count goes through a ledger instead (``BroadcastStore.count_batch``).

Reputation pause (docs/reputation.md): a broadcast the guardrail moved to ``paused_reputation``
stops like a cancelled one (the same status read every ``STATUS_CHECK_S`` seconds), and SES's
refusal of a send on the paused marketing configuration set (``SendingPausedException``: the
pipeline's ``retryable``/``paused``) stops the batch too and pauses the record itself. Either
way nothing is counted (no recipient failed or skipped) and the SQS record is done: the
recipients not sent get the mail in the new round that the resume starts (send-once keeps the
sent ones from a duplicate).

``already_sent`` counts as sent: only this broadcast uses its send-once keys, so it means
an earlier delivery of this batch (or an earlier round) sent the mail, or that SES's event
for a mail whose worker died before logging it was recorded (``shared.store.send_log``).

Dead letters: on a batch's final receive (its SQS ``ApproximateReceiveCount`` reached the
queue's ``maxReceiveCount``, ``final_receive``), a batch that fails is marked on the record
before the record fails (``BroadcastStore.mark_dead_lettered``: once per batch), so the
record says that recipients wait in the dead-letter queue instead of looking in progress;
a marked batch counted later (after a redrive) is taken out of that count again.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from shared.broadcasts.fanout import BroadcastQueues, hold_wake
from shared.broadcasts.model import (
    CANCELLED,
    FAILED,
    HELD,
    HOLD_DAILY_QUOTA,
    HOLD_UNVERIFIED,
    HOLD_WARMUP,
    PAUSED_REPUTATION,
    STEP,
    BatchMessage,
    Broadcast,
)
from shared.broadcasts.records import BroadcastNotFound, BroadcastStore, items_until, window_closed
from shared.core import clock
from shared.core.observability import logger
from shared.core.retry import Backoff
from shared.core.settings import Settings
from shared.sending.jobs import SendJob
from shared.sending.pipeline import SendContext, SendOutcome
from shared.sending.pipeline import send as pipeline_send
from shared.sending.rate import RESERVED_SCOPE, RateLimiter, Reservations, TokenPool
from shared.sending.warmup import Warmup, seconds_to_next_day

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


THROTTLE_RETRIES = 6
BACKOFF_BASE_S = 0.2
BACKOFF_MAX_S = 3.0
# SES throttling: the send, then THROTTLE_RETRIES retries after pauses between half and all of
# 0.2 s, 0.4 s, ... 3 s, each with a fresh token from the shared limiter.
THROTTLE_RETRY = Backoff(attempts=1 + THROTTLE_RETRIES, base=BACKOFF_BASE_S, cap=BACKOFF_MAX_S, jitter=0.5)
SAFETY_MARGIN_S = 15.0  # stop starting sends this long before the invocation's deadline
RATE_SCOPE = RESERVED_SCOPE  # one budget for all broadcasts together, the other mail served first
STATUS_CHECK_S = 2.0  # a batch being sent reads its broadcast's status this often (one GetItem)
# A held broadcast (docs/broadcasts.md, "Held") looks again this long after SES said "not yet":
# a domain's verification takes minutes to 72 hours; SES does not say when a spent 24-hour
# quota frees capacity (it frees as the last day's sends age out), and its guide advises
# waiting and retrying. Each look resolves one page again and tries one send per batch.
HOLD_RECHECK_S = {HOLD_UNVERIFIED: 900, HOLD_DAILY_QUOTA: 3600}
# How long a batch waits for a claim another worker holds before it defers the recipient (the
# claim's lease is 300 s; a worker that is alive sends or releases it within seconds)
IN_FLIGHT_WAITS_S = (1.0, 2.0, 4.0, 8.0, 15.0)
# the pipeline's hold reasons -> the broadcast's (``paused`` is the reputation pause's own path)
HELD_ELSEWHERE = "held_elsewhere"  # a batch that found its broadcast held by another worker's batch
HOLD_REASONS = {"unverified": HOLD_UNVERIFIED, "daily_quota": HOLD_DAILY_QUOTA, "warmup": HOLD_WARMUP}


class BatchIncomplete(Exception):
    """Some recipients are still retryable: the SQS record fails and comes back later."""

    def __init__(self, pending: int, reasons: Counter[str]) -> None:
        super().__init__(f"{pending} recipients deferred: {dict(reasons)}")
        self.pending = pending
        self.reasons = reasons


@dataclass(frozen=True)
class BatchResult:
    status: str  # counted | duplicate | stale | cancelled | expired | paused | held
    counts: dict[str, int] = field(default_factory=dict)
    done: bool = False


@dataclass
class TokenPools:
    """One token pool per process and rate (the rate is the broadcast's, set when it was sent)."""

    table: str
    scope: str = RATE_SCOPE
    client: DynamoDBClient | None = None
    # the other mail, served first (shared.sending.rate); None: broadcasts take the whole rate
    reservations: Reservations | None = None
    _pools: dict[float, TokenPool] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def for_rate(self, rate: float, in_flight: int) -> TokenPool:
        """The pool of ``rate``; ``in_flight`` (the worker's sends at once) sizes its leases."""
        with self._lock:
            if rate not in self._pools:
                limiter = RateLimiter(
                    self.table, self.scope, rate, client=self.client, reservations=self.reservations
                )
                self._pools[rate] = TokenPool(limiter, in_flight=in_flight)
            return self._pools[rate]

    @property
    def requests(self) -> int:
        reserved = self.reservations.requests if self.reservations is not None else 0
        return reserved + sum(p.limiter.requests for p in self._pools.values())


@dataclass
class WorkerContext:
    records: BroadcastStore
    send: SendContext
    pools: TokenPools
    threads: int = 4
    sleep: Callable[[float], None] = time.sleep
    send_fn: Callable[[SendJob, SendContext], SendOutcome] = pipeline_send
    # where a held broadcast's wake-up goes (the resolver's queue); None: no hold, the batch
    # fails and comes back like any deferred one
    queues: BroadcastQueues | None = None
    # the sending domain's warm-up: a batch takes its share of the day before it sends
    warmup: Warmup | None = None

    def __post_init__(self) -> None:
        # A batch counts its sends once (records.count_batch), so single sends do not; and a
        # broadcast's sends take the tokens the other mail left, they reserve none.
        # The warm-up is taken per batch here, not counted per send.
        if self.warmup is None:
            self.warmup = self.send.warmup
        if self.send.count_sends or self.send.reserve is not None or self.send.warmup is not None:
            self.send = replace(self.send, count_sends=False, reserve=None, warmup=None)

    @classmethod
    def from_settings(cls, settings: Settings) -> WorkerContext:
        return cls(
            records=BroadcastStore(settings.table_name),
            send=SendContext.from_settings(settings),
            pools=TokenPools(settings.table_name, reservations=Reservations(settings.table_name, RATE_SCOPE)),
            threads=settings.broadcast_worker_threads,
            queues=BroadcastQueues(settings.broadcast_queue_url, settings.broadcast_control_queue_url),
        )


def process_batch(
    message: BatchMessage,
    ctx: WorkerContext,
    *,
    deadline: float | None = None,
    final_receive: bool = False,
) -> BatchResult:
    """Send one batch (see module doc). ``deadline``: wall time (epoch seconds) after which
    no new send starts. Raises :class:`BatchIncomplete` when recipients remain retryable;
    on the ``final_receive``, a batch that raises is first marked dead-lettered."""
    try:
        return _process(message, ctx, deadline)
    except BroadcastNotFound:
        raise
    except Exception as exc:
        if final_receive:
            _mark_dead_lettered(message, ctx, exc)
        raise


def _batch_log(message: BatchMessage) -> dict[str, Any]:
    """The log fields that name a batch: its broadcast, round, page and index."""
    return {
        "broadcast": message.broadcast_id,
        "round": message.round,
        "page": message.page,
        "batch": message.index,
    }


def _mark_dead_lettered(message: BatchMessage, ctx: WorkerContext, exc: Exception) -> None:
    record = ctx.records.get(message.broadcast_id)
    if record is None or record.round != message.round:
        return
    marked = ctx.records.mark_dead_lettered(record, message.page, message.index, len(message.emails))
    logger.warning(
        "broadcast batch goes to the dead-letter queue",
        **_batch_log(message),
        recipients=len(message.emails),
        marked=marked,
        error=f"{type(exc).__name__}: {str(exc)[:200]}",
    )


def _process(message: BatchMessage, ctx: WorkerContext, deadline: float | None) -> BatchResult:
    record = ctx.records.get(message.broadcast_id)
    if record is None:
        raise BroadcastNotFound(f"no broadcast {message.broadcast_id!r}")
    log = _batch_log(message)
    if message.round != record.round:
        logger.info("stale broadcast batch dropped", current_round=record.round, **log)
        return BatchResult(status="stale")
    if window_closed(record):  # its claims and BATCH# markers may be gone: send and count nothing
        closed = ctx.records.close_window(record)
        logger.warning("broadcast batch after the send window dropped", failed=closed is not None, **log)
        return BatchResult(status="expired")
    if record.status in (PAUSED_REPUTATION, HELD):  # resumed later as a new round: nothing counted now
        logger.info("broadcast batch dropped: the broadcast is paused or held", status=record.status, **log)
        return BatchResult(status="paused" if record.status == PAUSED_REPUTATION else "held")
    if record.status in (CANCELLED, FAILED):
        skipped = {"processed": len(message.emails), "skipped_cancelled": len(message.emails)}
        counted = ctx.records.count_batch(record, message.page, message.index, skipped)
        logger.info("broadcast batch skipped", status=record.status, counted=counted, **log)
        return BatchResult(status="cancelled" if counted else "duplicate", counts=skipped)

    # this broadcast's claims expire with its markers, after the send window
    ctx = replace(ctx, send=replace(ctx.send, log=ctx.send.log.expiring_at(items_until(record))))
    outcomes = _send_within_warmup(record, message, ctx, deadline)
    _wait_for_claims_in_flight(record, message, outcomes, ctx, deadline)
    stopped = _stopped_by_ses(record, outcomes, ctx, log)
    if stopped is not None:
        return stopped
    counts: Counter[str] = Counter()
    deferred: Counter[str] = Counter()
    for outcome in outcomes:
        if outcome is None:
            deferred["deadline"] += 1
        elif outcome.status == "retryable":
            deferred[outcome.reason or "retryable"] += 1
        elif outcome.status == "sent" or outcome.reason == "already_sent":
            counts["sent"] += 1
        elif outcome.status == "skipped":
            counts[f"skipped_{outcome.reason}"] += 1
        else:
            counts["failed"] += 1
    if deferred:
        logger.info("broadcast batch deferred", deferred=dict(deferred), **log)
        raise BatchIncomplete(sum(deferred.values()), deferred)
    counts["processed"] = len(message.emails)
    counted = ctx.records.count_batch(record, message.page, message.index, counts)
    if counted and record.dead_lettered_batches:  # a redriven batch that was marked
        ctx.records.clear_dead_lettered(record, message.page, message.index, len(message.emails))
    finished = ctx.records.finish_if_done(record) if counted else None
    logger.info(
        "broadcast batch counted", counted=counted, counts=dict(counts), done=finished is not None, **log
    )
    return BatchResult(
        status="counted" if counted else "duplicate", counts=dict(counts), done=finished is not None
    )


def _wait_for_claims_in_flight(
    record: Broadcast,
    message: BatchMessage,
    outcomes: list[SendOutcome | None],
    ctx: WorkerContext,
    deadline: float | None,
) -> None:
    """Send again, after a short wait, to the recipients whose claim another worker held
    (``in_flight``): a duplicate delivery of this batch, or a batch of the round before a resume
    that is still finishing its last sends. The other worker sends or releases within seconds;
    deferring the whole batch instead would bring it back only after the queue's visibility
    timeout (30 min). Outcomes are replaced in place; still in flight after the waits: deferred."""
    for pause_s in IN_FLIGHT_WAITS_S:
        waiting = [i for i, o in enumerate(outcomes) if o is not None and o.reason == "in_flight"]
        if not waiting or (deadline is not None and clock.epoch_seconds() + pause_s >= deadline):
            return
        ctx.sleep(pause_s)
        part = _recipients_at(message, waiting)
        for i, outcome in zip(waiting, _send_within_warmup(record, part, ctx, deadline), strict=True):
            outcomes[i] = outcome


def _stopped_by_ses(
    record: Broadcast, outcomes: list[SendOutcome | None], ctx: WorkerContext, log: dict[str, Any]
) -> BatchResult | None:
    """The batch's end when SES (or the warm-up) said "not yet": the broadcast held (by this
    batch, or another's), or paused for reputation; None when nothing stopped it."""
    refusal = _hold_reason(outcomes)
    if refusal is not None and ctx.queues is not None:
        return _hold(record, HOLD_REASONS[refusal], ctx.records, ctx.queues, log)
    if any(o is not None and o.reason == HELD_ELSEWHERE for o in outcomes):  # nothing counted now
        logger.info("broadcast batch stopped: another batch held the broadcast", **log)
        return BatchResult(status="held")
    if any(o is not None and o.status == "retryable" and o.reason == "paused" for o in outcomes):
        paused = ctx.records.pause_for_reputation(record)
        sent = sum(1 for o in outcomes if o is not None and o.status == "sent")
        logger.warning(
            "broadcast paused: sending is paused for its configuration set",
            moved=paused is not None,
            sent_before_pause=sent,
            **log,
        )
        return BatchResult(status="paused")
    return None


def _send_within_warmup(
    record: Broadcast, message: BatchMessage, ctx: WorkerContext, deadline: float | None
) -> list[SendOutcome | None]:
    """The batch's sends within today's warm-up allowance (all of them without a ramp). What was
    taken and not sent (already sent, skipped) goes back to the day and is taken again for the
    recipients still waiting; those left when the day's allowance is used are ``warmup``."""
    if ctx.warmup is None:
        return _send_all(record, message, ctx, deadline)
    outcomes: list[SendOutcome | None] = [None] * len(message.emails)
    # A resumed broadcast's recipients who got it in an earlier round take nothing from the day
    # (their sends answer already_sent): one BatchGetItem of their claims, keys only.
    claimed = ctx.send.log.claimed(message.emails, record.id, STEP) if record.round > 1 else set()
    before = [i for i, email in enumerate(message.emails) if email in claimed]
    if before:
        _send_part(record, message, before, outcomes, ctx, deadline)
    waiting = [i for i, email in enumerate(message.emails) if email not in claimed]
    later = SendOutcome(status="retryable", send_id="-", reason="warmup")
    while waiting:
        granted = ctx.warmup.take(len(waiting))
        if not granted:
            break
        now, waiting = waiting[:granted], waiting[granted:]
        sent = _send_part(record, message, now, outcomes, ctx, deadline)
        unsent = sum(1 for o in sent if o is None or o.status != "sent")
        ctx.warmup.give_back(unsent)
        refused = next((o for o in sent if o is not None and o.held), None)
        if refused is not None or not unsent:  # SES said "not yet", or the day's allowance is spent
            later = refused or later
            break
    for i in waiting:
        outcomes[i] = later
    return outcomes


def _send_part(
    record: Broadcast,
    message: BatchMessage,
    indexes: list[int],
    outcomes: list[SendOutcome | None],
    ctx: WorkerContext,
    deadline: float | None,
) -> list[SendOutcome | None]:
    """Send to the batch's recipients at ``indexes``; their outcomes, also set in ``outcomes``."""
    sent = _send_all(record, _recipients_at(message, indexes), ctx, deadline)
    for i, outcome in zip(indexes, sent, strict=True):
        outcomes[i] = outcome
    return sent


def _recipients_at(message: BatchMessage, indexes: list[int]) -> BatchMessage:
    """The batch narrowed to its recipients at ``indexes`` (same broadcast, round, page, index)."""
    return message.model_copy(update={"emails": tuple(message.emails[i] for i in indexes)})


def _hold_reason(outcomes: list[SendOutcome | None]) -> str | None:
    """The first "not yet" among the outcomes that holds a broadcast (paused has its own path)."""
    for outcome in outcomes:
        if outcome is not None and outcome.status == "retryable" and outcome.reason in HOLD_REASONS:
            return outcome.reason
    return None


def _hold(
    record: Broadcast, reason: str, records: BroadcastStore, queues: BroadcastQueues, log: dict[str, Any]
) -> BatchResult:
    """SES said "not yet" for the broadcast's mail: hold it (nothing counted, the SQS record is
    done) and put its wake-up on the resolver's queue; another worker's batch that met the same
    refusal finds it held already."""
    if reason == HOLD_WARMUP:  # the next day's allowance: its 00:00 UTC
        now = clock.calendar_now()
        wait_s = seconds_to_next_day(now)
    else:
        now, wait_s = clock.utc_now(), HOLD_RECHECK_S[reason]
    resume_at = clock.iso(now + timedelta(seconds=wait_s))
    held = records.hold(record, reason, resume_at)
    if held is not None:
        hold_wake(held, queues, wait_s)
    logger.warning(
        "broadcast held: SES said not yet", reason=reason, resume_at=resume_at, moved=held is not None, **log
    )
    return BatchResult(status="held")


def _send_all(
    record: Broadcast, message: BatchMessage, ctx: WorkerContext, deadline: float | None
) -> list[SendOutcome | None]:
    tokens = ctx.pools.for_rate(record.send_rate, ctx.threads)
    results: list[SendOutcome | None] = [None] * len(message.emails)
    slots = threading.Semaphore(ctx.threads)
    futures: list[Future[None]] = []
    checked = clock.epoch_seconds()
    refused = threading.Event()  # SES said "not yet" for a send (paused, ...): no further send starts
    refusals: list[SendOutcome] = []

    def stopped() -> str | None:
        """The status that stops the batch (cancelled, failed, paused_reputation) when the
        broadcast moved to one since the last look, else None."""
        nonlocal checked
        if clock.epoch_seconds() - checked < STATUS_CHECK_S:
            return None
        checked = clock.epoch_seconds()
        current = ctx.records.get(record.id)
        if current is None:
            return CANCELLED
        return current.status if current.status in (CANCELLED, FAILED, PAUSED_REPUTATION, HELD) else None

    def run(i: int, email: str) -> None:
        try:
            results[i] = _send_one(record, email, ctx, tokens, deadline)
            outcome = results[i]
            if outcome is not None and outcome.held:
                refusals.append(outcome)
                refused.set()
        finally:
            slots.release()

    with ThreadPoolExecutor(max_workers=ctx.threads, thread_name_prefix="broadcast-send") as pool:
        for i, email in enumerate(message.emails):
            slots.acquire()
            status = stopped()
            if refused.is_set() or status in (PAUSED_REPUTATION, HELD):
                slots.release()
                # SES's refusal here, or what another worker found: held (it holds, not this batch)
                # or paused for reputation
                found = HELD_ELSEWHERE if status == HELD else "paused"
                refusal = (
                    refusals[0] if refusals else SendOutcome(status="retryable", send_id="-", reason=found)
                )
                results[i:] = [refusal] * (len(message.emails) - i)
                logger.info(
                    "broadcast paused or held during a batch",
                    broadcast=record.id,
                    reason=refusal.reason,
                    unsent=len(message.emails) - i,
                )
                break
            if status is not None:
                slots.release()
                cancelled = SendOutcome(status="skipped", send_id="-", reason="cancelled")
                results[i:] = [cancelled] * (len(message.emails) - i)
                logger.info(
                    "broadcast cancelled during a batch", broadcast=record.id, unsent=len(message.emails) - i
                )
                break
            if _late(deadline) or not tokens.take(len(message.emails) - i, deadline):
                slots.release()
                break
            futures.append(pool.submit(run, i, email))
        for future in futures:
            future.result()
    return results


def _send_one(
    record: Broadcast, email: str, ctx: WorkerContext, tokens: TokenPool, deadline: float | None
) -> SendOutcome | None:
    template, subject = record.template, record.subject
    if record.ab is not None:  # an A/B test's groups: the reader's variant (shared.broadcasts.abtest)
        variant = record.ab.variant(record.id, email)
        template, subject = variant.template, variant.subject
    try:
        job = SendJob(
            email=email,
            template=template,
            source=record.id,
            step=STEP,
            subject=subject,
            topic=record.audience.topic,  # the pipeline checks the choice again at send time
        )
    except ValidationError:
        return SendOutcome(status="failed", send_id="-", reason="invalid_message")
    outcome: SendOutcome | None = None
    for attempt in THROTTLE_RETRY.tries(sleep=ctx.sleep, deadline=deadline, clock=clock.epoch_seconds):
        if attempt and not tokens.take(1, deadline):
            break
        outcome = ctx.send_fn(job, ctx.send)
        if not (outcome.status == "retryable" and outcome.reason == "throttled"):
            break
    return outcome


def _late(deadline: float | None) -> bool:
    return deadline is not None and clock.epoch_seconds() >= deadline
