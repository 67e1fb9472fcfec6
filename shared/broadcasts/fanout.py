"""Fan-out: the resolver's step and the two broadcast queues.

The resolver consumes ``broadcast.resolve`` {broadcast_id, round, page} from the control
queue. One invocation resolves page ``page`` and, while its time allows (the handler's
``deadline``: :data:`INVOCATION_BUDGET_S`), the pages after it, each checkpointed on its own,
then passes the chain on with one message for the next page. No Lambda time limit can cut a
large audience short and a crash loses at most the page in hand:

1. a message of another round, or for a broadcast that is no longer active, is dropped;
   so is one after the broadcast's send window (an unfinished broadcast is marked failed:
   ``BroadcastStore.close_window``; its PAGE items expire after the window);
   ``scheduled`` becomes ``resolving`` (the schedule fired); a resend whose original is not
   finished yet waits: its page-0 message comes back in 15 minutes (:func:`_original_unfinished`);
2. before each page: the record (cancelled, held, another round: stop) and the batch queue's
   depth (back-pressure: while more than :func:`queue_limit` batches wait, the next page's
   message goes out delayed by :func:`queue_wait_s` and the invocation ends), read at once;
3. page ``q`` is resolved from the record's cursor (``shared.broadcasts.audience``: a tag's
   profiles or an "everyone" Scan's segments read at once) and checkpointed ONCE: the PAGE
   item and the record's next page, cursor and ``ADD audience_size`` in one transaction
   conditioned on the record expecting page ``q``. A redelivered message finds the PAGE item
   and reuses it, so the batches of a page never change and the audience is never counted
   twice; a page after the message's own that another invocation checkpointed first ends
   this invocation (that one carries the chain; a copy of this message comes back in 15
   minutes in case that one was another delivery of it and dies: :meth:`_Run._lost`);
4. the page's recipients go to the broadcast queue as ``broadcast.batch`` envelopes of
   ``batch_size`` emails (deterministic (round, page, index) names; a duplicate batch is
   harmless: send-once claims and the batch marker), in the background while the next page
   is read (pipelined: the next checkpoint waits for them, so at most the last page's
   hand-off is unfinished when an invocation stops), and a page after the message's own is
   marked ``handed_off``;
5. at the end: the next page's message (now, or delayed by back-pressure) or, after the
   last page, ``resolved`` (and ``sending``; ``done`` right away when nothing is left to
   count); then the message's own page is marked ``handed_off``: a delivery of its message
   after that does nothing, so a redelivery does not replay the rest of the chain.

A crash (or a timeout) before that last mark leaves the message on the queue: its redelivery
finds its page checkpointed but not handed off, sends that page's batches again, finishes
the hand-off of the page before the record's next one (the only other page that may be
unfinished) and goes on from the record's next page. Batches sent twice are harmless.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from botocore.exceptions import ClientError

from shared.broadcasts.audience import AudienceResolver, Page
from shared.broadcasts.decide import decide_for_rest
from shared.broadcasts.model import (
    ACTIVE,
    BATCH_CONTRACT,
    HELD,
    PAUSED_REPUTATION,
    RESOLVE_CONTRACT,
    RESOLVING,
    SCHEDULED,
    SENDING,
    BatchMessage,
    Broadcast,
    ResolveMessage,
    to_body,
)
from shared.broadcasts.records import BroadcastNotFound, BroadcastStore, StoredPage, window_closed
from shared.core.aws import client as aws_client
from shared.core.errors import ConcurrentModification
from shared.core.observability import logger
from shared.core.retry import Backoff
from shared.core.settings import Settings
from shared.core.topics import require_topics
from shared.sending.jobs import send_bodies
from shared.store.stats import busy

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient


# Recipients per broadcast.batch (also the cancel granularity per worker). Each batch is counted
# in one transaction on the broadcast record: 1 per 100 mails (0.01 transactions per mail on
# that item; at 50 it was 0.02, plus the resolver's page checkpoints: docs/bench.md).
BATCH_SIZE = 100
MAX_DELAY_S = 900  # SQS's longest DelaySeconds
# One invocation resolves pages for at most this long (then the next page's message carries the
# chain on): a page is ~0.2-0.3 s, so ~200 pages (200,000 recipients) share one SQS hop, and a
# crash's redelivery (after the control queue's visibility timeout) repeats at most two pages'
# hand-offs. The handler also keeps RESERVE_S of the Lambda's remaining time (timeout 120 s).
INVOCATION_BUDGET_S = 60.0
RESERVE_S = 30.0
# Back-pressure (docs/broadcasts.md, "How it runs"): the resolver resolves its next page only
# while at most queue_limit() batches wait on the batch queue: ``ahead_s`` seconds of sending at
# the broadcast's rate, at least MIN_QUEUED_BATCHES. Otherwise the next page's message waits
# queue_wait_s(): the time the excess takes to drain at that rate, at least MIN_WAIT_S.
MIN_QUEUED_BATCHES = 20
MIN_WAIT_S = 5
# A page's checkpoint is a transaction on the broadcast record, which the workers' batch counts
# (transactions too) keep busy at high rates: DynamoDB cancels it (TransactionConflict) while
# another transaction holds the record. It is tried again in place, for up to ~3 s, rather than
# failing the invocation (the message would come back only after the visibility timeout).
CHECKPOINT_RETRY = Backoff(attempts=10, base=0.01, cap=1.0)
# A resend resolves its original's recipients once the original is none of these (above all, a
# held broadcast may resolve again in a new round, and one still sending has unclaimed readers).
UNFINISHED = ACTIVE | {HELD, PAUSED_REPUTATION}


@dataclass(frozen=True)
class BroadcastQueues:
    batch_url: str  # the workers' queue: one message per batch of recipients
    control_url: str  # the resolver's queue: page messages and held broadcasts' wake-ups
    client: SQSClient | None = None

    @property
    def sqs(self) -> SQSClient:
        return self.client or aws_client("sqs")

    def redrive_command(self) -> str:
        """The command that moves the batch queue's dead letters back (docs/operations.md,
        "DLQ redrive"), with the dead-letter queue's ARN from the queue's redrive policy."""
        arn = "<ARN of the broadcast queue's dead-letter queue>"
        try:
            attributes = self.sqs.get_queue_attributes(
                QueueUrl=self.batch_url, AttributeNames=["RedrivePolicy"]
            )
            arn = json.loads(attributes["Attributes"]["RedrivePolicy"])["deadLetterTargetArn"]
        except Exception as exc:  # the command is still useful with a placeholder
            logger.info("dead-letter queue ARN not read", error=type(exc).__name__)
        return f"aws sqs start-message-move-task --source-arn {arn}"

    def queued_batches(self) -> int:
        """Batches waiting on the batch queue for a worker (``ApproximateNumberOfMessages``:
        the visible ones; not those in a worker's hands)."""
        answer = self.sqs.get_queue_attributes(
            QueueUrl=self.batch_url, AttributeNames=["ApproximateNumberOfMessages"]
        )
        return int(answer["Attributes"]["ApproximateNumberOfMessages"])

    def _send(self, url: str, bodies: list[str]) -> None:
        send_bodies(self.sqs, url, bodies, what="broadcast messages")

    def send_batches(self, batches: Iterable[BatchMessage]) -> int:
        bodies = [to_body(BATCH_CONTRACT, b) for b in batches]
        self._send(self.batch_url, bodies)
        return len(bodies)

    def send_resolve(self, message: ResolveMessage, delay_s: int = 0) -> None:
        send_bodies(
            self.sqs,
            self.control_url,
            [to_body(RESOLVE_CONTRACT, message)],
            what="broadcast messages",
            delay_s=delay_s,
        )


def resolve_body(message: ResolveMessage) -> str:
    return to_body(RESOLVE_CONTRACT, message)


@dataclass(frozen=True)
class StepResult:
    # resolved_page (the chain passed on to the next page's message) | last_page | waiting (the
    # next page's message delayed: back-pressure, or a resend's original not finished) |
    # taken_over (another invocation resolved a page of this run first and goes on) | stale |
    # stopped | held | resumed
    status: str
    page: int  # the message's page
    recipients: int = 0  # handed to the workers by this invocation (the resolver's metric)
    batches: int = 0  # the batch messages they went out in
    pages: int = 0  # pages this invocation handed to the workers
    next_page: int | None = None  # the page of the message it passed the chain on with
    wait_s: int = 0  # that message's delay


@dataclass(frozen=True)
class FanoutContext:
    records: BroadcastStore
    resolver: AudienceResolver
    queues: BroadcastQueues
    batch_size: int = BATCH_SIZE  # recipients per batch message (see BATCH_SIZE)
    # Back-pressure: seconds of sending (at the broadcast's rate) the batch queue may hold before
    # the resolver waits; 0: no back-pressure (the Lambda's context takes the setting).
    ahead_s: float = 0.0

    @classmethod
    def from_settings(cls, settings: Settings) -> FanoutContext:
        return cls(
            records=BroadcastStore(settings.table_name),
            resolver=AudienceResolver(
                settings.table_name, topics=require_topics(), events_table=settings.events_table_name
            ),
            queues=BroadcastQueues(settings.broadcast_queue_url, settings.broadcast_control_queue_url),
            ahead_s=settings.broadcast_resolver_ahead_s,
        )


def split(emails: list[str], size: int) -> list[list[str]]:
    return [emails[i : i + size] for i in range(0, len(emails), size)]


def invocation_deadline(remaining_s: float, now: float | None = None) -> float:
    """The ``time.monotonic()`` until which an invocation with ``remaining_s`` seconds left
    starts pages: :data:`INVOCATION_BUDGET_S`, keeping :data:`RESERVE_S` of its time."""
    return (time.monotonic() if now is None else now) + min(INVOCATION_BUDGET_S, remaining_s - RESERVE_S)


def queue_limit(ahead_s: float, send_rate: float, batch_size: int = BATCH_SIZE) -> int:
    """Batches the batch queue may hold before the resolver waits: ``ahead_s`` seconds of
    sending at ``send_rate`` mails a second, at least :data:`MIN_QUEUED_BATCHES`."""
    return max(MIN_QUEUED_BATCHES, math.ceil(ahead_s * send_rate / batch_size))


def queue_wait_s(queued: int, limit: int, send_rate: float, batch_size: int = BATCH_SIZE) -> int:
    """How long the next page waits with ``queued`` batches ahead: the time the batches above
    ``limit`` take to go out at ``send_rate``, between :data:`MIN_WAIT_S` and SQS's longest
    delay (then it looks again)."""
    drain = (queued - limit) * batch_size / max(send_rate, 0.01)
    return max(MIN_WAIT_S, min(MAX_DELAY_S, math.ceil(drain)))


def resolve_step(message: ResolveMessage, ctx: FanoutContext, deadline: float | None = None) -> StepResult:
    """Handle one ``broadcast.resolve`` message: its page and, until ``deadline``
    (``time.monotonic()``; None: its page only), the pages after it."""
    record = ctx.records.get(message.broadcast_id)
    if record is None:
        raise BroadcastNotFound(f"no broadcast {message.broadcast_id!r}")
    log: dict[str, Any] = {"broadcast": record.id, "round": message.round, "page": message.page}
    if message.round != record.round:
        return StepResult("stale", message.page)
    if window_closed(record):  # its PAGE items may be gone: resolve and hand off nothing
        closed = ctx.records.close_window(record)
        logger.warning("broadcast resolution after the send window stopped", failed=closed is not None, **log)
        return StepResult("stopped", message.page)
    if record.status == HELD and message.wake:
        return _wake(record, message, ctx)
    if record.status == SCHEDULED:
        split = record.audience.split
        if split is not None and split.side == "rest":  # an A/B test's rest: its winner first
            record = decide_for_rest(record, ctx.records, ctx.resolver)
        record = ctx.records.start_resolving(record) or ctx.records.get(record.id) or record
    if record.status not in (RESOLVING, SENDING):
        logger.info("broadcast resolution stopped", status=record.status, **log)
        return StepResult("stopped", message.page)
    if _original_unfinished(record, message, ctx):  # a resend reads its original's recipients
        ctx.queues.send_resolve(message, MAX_DELAY_S)
        logger.info("resend waits for its original to finish", original=record.audience.recipients_of, **log)
        return StepResult("waiting", message.page, next_page=message.page, wait_s=MAX_DELAY_S)
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="fanout") as pool:
        return _Run(ctx, record, message.page, deadline, pool).run()


class _Run:
    """One invocation's pages: the message's page ``first`` and, until ``deadline``, the next."""

    def __init__(
        self,
        ctx: FanoutContext,
        record: Broadcast,
        first: int,
        deadline: float | None,
        pool: ThreadPoolExecutor,
    ) -> None:
        self.ctx, self.record, self.first, self.deadline, self.pool = ctx, record, first, deadline, pool
        self.pending: list[Future[None]] = []  # hand-offs in the background
        self.own_saved = False  # the message's page is checkpointed (it gets the final mark)
        self.longest = 0.0  # the longest page so far (s): no page is started that would end late
        self.pages = self.recipients = self.batches = 0
        self.log: dict[str, Any] = {"broadcast": record.id, "round": record.round, "page": first}

    def run(self) -> StepResult:
        p, records = self.first, self.ctx.records
        stored = records.get_page(self.record.id, self.record.round, p)
        if stored is not None and stored.handed_off:  # a redelivery after the chain went on
            logger.info("broadcast page handed off before", **self.log)
            return StepResult("stale", p)
        if stored is None and self.record.page != p:
            logger.info("broadcast resolve message out of order", expected=self.record.page, **self.log)
            return StepResult("stale", p)
        page, record = p, cast("Broadcast | None", self.record)
        if stored is not None:  # an earlier delivery checkpointed it and stopped before the end
            recovered = self._recover(stored)
            if recovered is None:
                return self._end("last_page")
            page, record = recovered, None
        while True:
            began = time.monotonic()
            if page != p and self._out_of_time(began):
                return self._end("resolved_page", page)
            record, queued = self._look(record)
            stop = self._stopped(record)
            if stop is not None:
                return self._end(stop)
            assert record is not None
            if record.page != page:  # another invocation resolved it: that one carries the chain on
                return self._lost(page)
            limit = queue_limit(self.ctx.ahead_s, record.send_rate, self.ctx.batch_size)
            if queued is not None and queued > limit:
                wait = queue_wait_s(queued, limit, record.send_rate, self.ctx.batch_size)
                logger.info("broadcast resolution waits for the workers", at=page, queued=queued, limit=limit,
                            wait_s=wait, **self.log)  # fmt: skip
                return self._end("waiting", page, wait)
            stored = self._checkpoint(record, page)
            if stored is None:
                return self._lost(page)
            self._hand_off(page, stored, mark=page != p)
            if stored.exhausted:
                return self._end("last_page")
            page, record = page + 1, None
            self.longest = max(self.longest, time.monotonic() - began)

    def _recover(self, stored: StoredPage) -> int | None:
        """The message's page again (its batches may not have gone out) and the page before the
        record's next one, unless handed off: the only pages an interrupted invocation may have
        left unfinished. The page to go on from, or None after the last."""
        self.own_saved = True
        self._hand_off(self.first, stored, mark=False)
        last, before = stored, self.record.page - 1
        if before > self.first:
            found = self.ctx.records.get_page(self.record.id, self.record.round, before)
            if found is None:
                raise RuntimeError(f"page {before} is not checkpointed: retry")
            if not found.handed_off:
                self._hand_off(before, found, mark=True)
            last = found
        logger.info("broadcast resolution taken up again", at=self.record.page, **self.log)
        return None if last.exhausted else self.record.page

    def _out_of_time(self, now: float) -> bool:
        return self.deadline is None or now + self.longest >= self.deadline

    def _look(self, record: Broadcast | None) -> tuple[Broadcast | None, int | None]:
        """The record (read again unless given) and the batch queue's depth (None: no
        back-pressure, or not read), at once."""
        depth = self.pool.submit(self._queued) if self.ctx.ahead_s > 0 else None
        if record is None:
            record = self.ctx.records.get(self.record.id)
        return record, depth.result() if depth is not None else None

    def _queued(self) -> int | None:
        try:
            return self.ctx.queues.queued_batches()
        except ClientError as exc:  # resolving goes on without back-pressure rather than not at all
            logger.warning("broadcast queue depth not read", error=exc.response["Error"]["Code"], **self.log)
            return None

    def _stopped(self, record: Broadcast | None) -> str | None:
        """Why this invocation resolves no further page (None: it goes on)."""
        if record is None or record.round != self.record.round:
            return "stale"
        if window_closed(record):
            self.ctx.records.close_window(record)
            logger.warning("broadcast resolution after the send window stopped", **self.log)
            return "stopped"
        if record.status not in (RESOLVING, SENDING):
            logger.info("broadcast resolution stopped", status=record.status, **self.log)
            return "stopped"
        return None

    def _checkpoint(self, record: Broadcast, page: int) -> StoredPage | None:
        """Resolve ``page`` from the record's cursor and checkpoint it once; None: a page after
        the message's own that another invocation checkpointed first."""
        found = self.ctx.resolver.page(record.audience, record.cursor)
        self._join()  # the previous page's hand-off: only the page in hand may be unfinished
        records = self.ctx.records
        if self._save(record, page, found):
            self.own_saved = self.own_saved or page == self.first
            return StoredPage(found.emails, found.exhausted)
        if page != self.first:
            return None
        stored = records.get_page(record.id, record.round, page)  # another delivery of this message
        if stored is None:
            raise RuntimeError("page checkpoint conflict without a page: retry")
        self.own_saved = True
        return stored

    def _save(self, record: Broadcast, page: int, found: Page) -> bool:
        """The checkpoint (False: its condition failed), tried again while the record is busy."""
        for _ in CHECKPOINT_RETRY.tries():
            try:
                return self.ctx.records.save_page(
                    record, page, found.emails, found.cursor, found.exhausted, excluded=found.excluded
                )
            except ClientError as exc:
                if not busy(exc):
                    raise
                logger.info("broadcast page checkpoint: record busy", at=page, **self.log)
        raise ConcurrentModification("the broadcast record stayed busy: retry")

    def _hand_off(self, page: int, stored: StoredPage, *, mark: bool) -> None:
        """``page``'s batches to the workers in the background (then its ``handed_off`` mark
        when ``mark``); :meth:`_join` waits for them and raises what they raised."""
        record = self.record
        batches = [
            BatchMessage(broadcast_id=record.id, round=record.round, page=page, index=i, emails=tuple(chunk))
            for i, chunk in enumerate(split(stored.emails, self.ctx.batch_size))
        ]

        def hand_off() -> None:
            self.ctx.queues.send_batches(batches)
            if mark:
                self.ctx.records.mark_handed_off(self.record, page)

        self.pending.append(self.pool.submit(hand_off))
        self.pages += 1
        self.recipients += len(stored.emails)
        self.batches += len(batches)

    def _join(self) -> None:
        pending, self.pending = self.pending, []
        for future in pending:
            future.result()

    def _lost(self, page: int) -> StepResult:
        """Another invocation checkpointed ``page`` first: it carries the chain on, and this one
        stops. Its message's page is not marked: that invocation may hold another delivery of
        this very message, which this one's success deletes; should it die, nothing would take
        the chain up again. So a copy of the message comes back in 15 minutes (SQS's longest
        delay): it does nothing if the page was handed off by then, else it takes the chain up."""
        self._join()
        message = ResolveMessage(broadcast_id=self.record.id, round=self.record.round, page=self.first)
        self.ctx.queues.send_resolve(message, MAX_DELAY_S)
        logger.info("broadcast page resolved by another invocation", at=page, **self.log)
        return StepResult(
            "taken_over", self.first, self.recipients, self.batches, self.pages, self.first, MAX_DELAY_S
        )

    def _end(self, status: str, next_page: int | None = None, wait: int = 0) -> StepResult:
        """Every hand-off done, then the chain passed on (the next page's message, or
        ``resolved`` after the last page), then the message's own page marked."""
        self._join()
        if status == "last_page":
            self.ctx.records.mark_resolved(self.record)
        elif next_page is not None:
            message = ResolveMessage(broadcast_id=self.record.id, round=self.record.round, page=next_page)
            self.ctx.queues.send_resolve(message, wait)
        if self.own_saved:
            self.ctx.records.mark_handed_off(self.record, self.first)
        logger.info(
            "broadcast pages resolved",
            status=status,
            pages=self.pages,
            recipients=self.recipients,
            batches=self.batches,
            next_page=next_page,
            **self.log,
        )
        return StepResult(status, self.first, self.recipients, self.batches, self.pages, next_page, wait)


def _original_unfinished(record: Broadcast, message: ResolveMessage, ctx: FanoutContext) -> bool:
    """Whether ``record`` is a resend about to resolve its first page while its original is
    still unfinished (scheduled, resolving, sending, held or paused): its recipients are not
    all resolved and sent yet, and "not opened" needs both. The resend's page 0 then comes back
    every :data:`MAX_DELAY_S` until the original is done, cancelled or failed."""
    original_id = record.audience.recipients_of
    if original_id is None or message.page != 0 or record.page != 0:
        return False
    original = ctx.records.get(original_id)
    return original is not None and original.status in UNFINISHED


def hold_wake(record: Broadcast, queues: BroadcastQueues, wait_s: int) -> None:
    """A held broadcast's wake-up: its round's page-0 message marked ``wake``, delivered after
    ``wait_s`` seconds (a chain of SQS's longest delays for a longer wait). The delays are the
    timer, not the clock, so the local runtime's virtual clock runs a hold as it runs a Wait."""
    delay = min(MAX_DELAY_S, max(0, wait_s))
    message = ResolveMessage(
        broadcast_id=record.id, round=record.round, page=0, wake=True, wake_after_s=max(0, wait_s - delay)
    )
    queues.send_resolve(message, delay)


def _wake(record: Broadcast, message: ResolveMessage, ctx: FanoutContext) -> StepResult:
    """A held broadcast's wake-up: while the wait lasts it travels on; then a new round resolves
    the whole audience (send-once keeps whoever got the mail from a second one)."""
    if message.wake_after_s > 0:
        hold_wake(record, ctx.queues, message.wake_after_s)
        return StepResult("held", message.page)
    resumed = ctx.records.new_round(record, record.send_rate)
    if resumed is None:  # resumed or cancelled meanwhile: nothing to do here
        return StepResult("stale", message.page)
    logger.info("held broadcast resumed", broadcast=record.id, reason=record.hold_reason, round=resumed.round)
    ctx.queues.send_resolve(first_page(resumed.id, resumed.round))
    return StepResult("resumed", message.page)


def first_page(broadcast_id: str, round_: int) -> ResolveMessage:
    return ResolveMessage(broadcast_id=broadcast_id, round=round_, page=0)
