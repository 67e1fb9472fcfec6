"""Fan-out: the resolver's step and the two broadcast queues.

The resolver consumes ``broadcast.resolve`` {broadcast_id, round, page} from the control
queue, one page per invocation, and re-enqueues itself for the next page, so no Lambda
time limit can cut a large audience short and a crash loses at most the page in hand:

1. a message of another round, or for a broadcast that is no longer active, is dropped;
   so is one after the broadcast's send window (an unfinished broadcast is marked failed:
   ``BroadcastStore.close_window``; its PAGE items expire after the window);
   ``scheduled`` becomes ``resolving`` (the schedule fired);
2. page ``p`` is resolved from the record's cursor (an "everyone" audience: its Scan
   segments read at once, ``shared.broadcasts.audience``) and checkpointed ONCE: the PAGE
   item and the record's next page, cursor (every open segment's position) and ``ADD
   audience_size`` in one transaction conditioned on the record expecting page ``p``. A
   redelivered message finds the PAGE item and reuses it, so the batches of a page never
   change and the audience is never counted twice;
3. the page's recipients go to the broadcast queue as ``broadcast.batch`` envelopes of
   ``batch_size`` emails (deterministic (round, page, index) names; a duplicate batch is
   harmless: send-once claims and the batch marker);
4. then either ``broadcast.resolve`` for page ``p+1`` or, after the last page, ``resolved``
   (and ``sending``; ``done`` right away when nothing is left to count);
5. the PAGE item is marked ``handed_off``: a delivery of page ``p``'s message after that
   does nothing, so a redelivery does not replay the rest of the chain (only a crash
   between 3-4 and 5 sends that page's batches and its successor's message again).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shared.broadcasts.audience import AudienceResolver
from shared.broadcasts.model import (
    BATCH_CONTRACT,
    HELD,
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
from shared.core.observability import logger
from shared.core.settings import Settings
from shared.core.topics import require_topics
from shared.sending.jobs import send_bodies

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient


# Recipients per broadcast.batch (also the cancel granularity per worker). Each batch is counted
# in one transaction on the broadcast record: 1 per 100 mails (0.01 transactions per mail on
# that item; at 50 it was 0.02, plus the resolver's page checkpoints: docs/bench.md).
BATCH_SIZE = 100
MAX_DELAY_S = 900  # SQS's longest DelaySeconds


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
    status: str  # resolved_page | last_page | stale | stopped | held | resumed
    page: int
    recipients: int = 0  # handed to the workers from this page (the resolver's metric)
    batches: int = 0  # the batch messages they went out in


@dataclass(frozen=True)
class FanoutContext:
    records: BroadcastStore
    resolver: AudienceResolver
    queues: BroadcastQueues
    batch_size: int = BATCH_SIZE  # recipients per batch message (see BATCH_SIZE)

    @classmethod
    def from_settings(cls, settings: Settings) -> FanoutContext:
        return cls(
            records=BroadcastStore(settings.table_name),
            resolver=AudienceResolver(settings.table_name, topics=require_topics()),
            queues=BroadcastQueues(settings.broadcast_queue_url, settings.broadcast_control_queue_url),
        )


def split(emails: list[str], size: int) -> list[list[str]]:
    return [emails[i : i + size] for i in range(0, len(emails), size)]


def resolve_step(message: ResolveMessage, ctx: FanoutContext) -> StepResult:
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
        record = ctx.records.start_resolving(record) or ctx.records.get(record.id) or record
    if record.status not in (RESOLVING, SENDING):
        logger.info("broadcast resolution stopped", status=record.status, **log)
        return StepResult("stopped", message.page)

    stored = ctx.records.get_page(record.id, record.round, message.page)
    if stored is None:
        if record.page != message.page:
            logger.info("broadcast resolve message out of order", expected=record.page, **log)
            return StepResult("stale", message.page)
        page = ctx.resolver.page(record.audience, record.cursor)
        if ctx.records.save_page(
            record, message.page, page.emails, page.cursor, page.exhausted, excluded=page.excluded
        ):
            stored = StoredPage(page.emails, page.exhausted)
        else:  # another delivery of this message checkpointed it first
            stored = ctx.records.get_page(record.id, record.round, message.page)
            if stored is None:
                raise RuntimeError("page checkpoint conflict without a page: retry")
    if stored.handed_off:  # a redelivery after the page was handed off: nothing left to do
        logger.info("broadcast page handed off before", **log)
        return StepResult("stale", message.page)
    emails, exhausted, _ = stored
    batches = [
        BatchMessage(
            broadcast_id=record.id, round=record.round, page=message.page, index=i, emails=tuple(chunk)
        )
        for i, chunk in enumerate(split(emails, ctx.batch_size))
    ]
    ctx.queues.send_batches(batches)
    if exhausted:
        ctx.records.mark_resolved(record)
    else:
        ctx.queues.send_resolve(
            ResolveMessage(broadcast_id=record.id, round=record.round, page=message.page + 1)
        )
    ctx.records.mark_handed_off(record, message.page)
    logger.info(
        "broadcast page resolved", recipients=len(emails), batches=len(batches), last=exhausted, **log
    )
    return StepResult("last_page" if exhausted else "resolved_page", message.page, len(emails), len(batches))


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
