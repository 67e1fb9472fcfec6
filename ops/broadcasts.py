"""Broadcast operations (the CLI, the demo and the bench call these): preview, send,
resend, cancel, resume, get, list."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import islice
from typing import Any

from botocore.exceptions import ClientError

from ops.broadcast_requests import NON_OPENERS, resend_request, rest_request
from shared.broadcasts.abtest import LETTERS, AbTest, variant_of
from shared.broadcasts.audience import AudienceResolver
from shared.broadcasts.fanout import BroadcastQueues, first_page, resolve_body
from shared.broadcasts.model import (
    ACTIVE,
    CANCELLED,
    FAILED,
    HELD,
    PAUSED_REPUTATION,
    SCHEDULED,
    Broadcast,
    BroadcastRequest,
)
from shared.broadcasts.records import BroadcastStore, ResendExists
from shared.broadcasts.schedule import Scheduler
from shared.core.aws import ClientFactory
from shared.core.errors import Conflict, FieldProblem, InvalidInput, NotFound
from shared.core.settings import Settings
from shared.core.topics import TopicCatalog, require_topics
from shared.sending.rate import read_quota, share_of
from shared.sending.rendering import Renderer, renderer
from shared.sequences.sfn import StepFunctions
from shared.store.stats import StatsStore

SAMPLE = 5
# The console's live count: each answer resolves pages of COUNT_PAGE recipients for about
# COUNT_BUDGET_S seconds, then hands back a cursor to go on from.
COUNT_PAGE = 100
COUNT_BUDGET_S = 0.1


class BroadcastMissing(NotFound):
    pass


@dataclass(frozen=True)
class Glance:
    """The start of an audience: ``size`` recipients found on its first page, the exact size
    when ``complete`` (the audience fits one page), else a lower bound."""

    size: int
    sample: list[str]
    complete: bool

    def describe(self) -> str:
        return f"{self.size}" if self.complete else f"at least {self.size}"


@dataclass(frozen=True)
class Counted:
    """A part of an audience's exact count (:meth:`Broadcasts.count`): ``size`` recipients
    found by this part, the first ``sample`` of them, and where the count goes on (None: the
    count is complete)."""

    size: int
    sample: list[str]
    cursor: str | None


@dataclass(frozen=True)
class SendAnswer:
    record: Broadcast
    created: bool  # False: the id existed; nothing new was sent
    same: bool = True  # the existing broadcast has the same template, subject, audience and time


@dataclass
class Broadcasts:
    records: BroadcastStore
    resolver: AudienceResolver
    queues: BroadcastQueues
    send_rate: Callable[[], float]  # the broadcast workers' share of the SES rate, read at send time
    stats: StatsStore | None = None
    scheduler: Scheduler | None = None
    templates: Renderer = field(default_factory=renderer)
    topics: TopicCatalog = field(default_factory=TopicCatalog)

    @classmethod
    def from_settings(cls, settings: Settings, aws: ClientFactory | None = None) -> Broadcasts:
        """Wired to ``settings`` through ``aws`` (by default the environment's clients)."""
        aws = aws or ClientFactory()
        ddb = aws.client("dynamodb")
        schedule = settings.broadcast_schedule_arn
        topics = require_topics()
        return cls(
            records=BroadcastStore(settings.table_name, client=ddb),
            resolver=AudienceResolver(
                settings.table_name, client=ddb, topics=topics, events_table=settings.events_table_name
            ),
            topics=topics,
            queues=BroadcastQueues(
                settings.broadcast_queue_url, settings.broadcast_control_queue_url, client=aws.client("sqs")
            ),
            send_rate=lambda: share_of(
                read_quota(aws.client("sesv2")).max_send_rate,
                cap=settings.broadcast_max_send_rate,
                share=settings.broadcast_rate_share,
            ),
            stats=StatsStore(settings.table_name, settings.events_table_name, client=ddb),
            scheduler=Scheduler(schedule, StepFunctions(aws.client("stepfunctions"))) if schedule else None,
        )

    # ----- preview and send ---------------------------------------------------------------------
    def preview(self, request: BroadcastRequest, sample: int = SAMPLE) -> tuple[int, list[str]]:
        """(audience size, the first ``sample`` recipients), resolved now without sending: the
        whole audience is read (``--dry-run``)."""
        found = self.resolver.iterate(request.audience)
        first = list(islice(found, sample))
        return len(first) + sum(1 for _ in found), first

    def count(
        self,
        request: BroadcastRequest,
        cursor: str | None = None,
        *,
        budget_s: float = COUNT_BUDGET_S,  # then a cursor: the console asks again from there
        sample: int = SAMPLE,
    ) -> Counted:
        """Part of the exact dry-run count, from ``cursor`` on (None: the start): resolver
        pages of :data:`COUNT_PAGE` recipients while the next one, taking as long as the last,
        would end within ``budget_s`` seconds (at least one page), or until the audience is
        exhausted. The caller adds the parts up and asks again with the returned
        cursor until it is None: the console's live count, each answer short whatever the
        audience's size. A cursor this method did not return is an :class:`InvalidInput`."""
        resolver = copy.copy(self.resolver)
        resolver.page_size = COUNT_PAGE
        resolver.max_evaluated = min(resolver.max_evaluated, COUNT_PAGE * 4)
        deadline = time.monotonic() + budget_s
        size, first = 0, list[str]()
        forged = InvalidInput("cursor is not one this count returned", [FieldProblem("cursor", "invalid")])
        try:
            if cursor is not None and not isinstance(json.loads(cursor), dict):
                raise forged
            while True:
                began = time.monotonic()
                page = resolver.page(request.audience, cursor)
                size += len(page.emails)
                first += page.emails[: max(0, sample - len(first))]
                cursor = page.cursor
                now = time.monotonic()
                # no page that would end past the budget: the next is taken to last as this one did
                if page.exhausted or now + (now - began) >= deadline:
                    return Counted(size, first, None if page.exhausted else cursor)
        except (ValueError, KeyError, TypeError, AttributeError):
            raise forged from None
        except ClientError as exc:  # a start key DynamoDB refuses
            if exc.response["Error"]["Code"] != "ValidationException":
                raise
            raise forged from None

    def split(self, request: BroadcastRequest) -> dict[str, int]:
        """An A/B test's dry run: how many of the whole audience each variant's test group and
        the rest get (the whole audience is read, as ``preview`` does)."""
        assert request.ab is not None and request.audience.split is not None
        whole = request.audience.model_copy(update={"split": None})
        counts = dict.fromkeys([*LETTERS[: len(request.ab.variants)], "rest"], 0)
        for email in self.resolver.iterate(whole):
            if request.audience.split.keeps(email):
                counts[LETTERS[variant_of(request.id, email, len(request.ab.variants))]] += 1
            else:
                counts["rest"] += 1
        return counts

    def glance(self, request: BroadcastRequest, sample: int = SAMPLE) -> Glance:
        """The audience's first page only (at most one resolver page of reads, whatever the
        audience's size): what the confirmation of ``send`` shows. The resolver counts the
        whole audience once, when it runs; reading all of it here too would double the reads."""
        page = self.resolver.page(request.audience, None)
        return Glance(len(page.emails), page.emails[:sample], complete=page.exhausted)

    def check(self, request: BroadcastRequest, now: datetime | None = None) -> None:
        request.check_future(now or datetime.now(UTC))
        if request.ab is not None:  # its variants' templates (the first is ``template``)
            self._check_ab(request.ab)
        if not self.templates.exists(request.template):
            known = ", ".join(self.templates.keys()[:20])
            raise InvalidInput(
                f"--template {request.template!r} does not exist (known: {known})",
                [FieldProblem("template", "unknown template")],
            )
        topic = request.audience.topic
        if topic is not None and topic not in self.topics:
            known = ", ".join(t.id for t in self.topics) or "none"
            problem = f"{topic!r} is not declared in topics.yaml (declared: {known})"
            raise InvalidInput(f"--topic {problem}", [FieldProblem("topic", problem)])
        for source in request.audience.not_opened:
            if self.records.record_sk(source) is None:
                problem = f"{source!r} is not a broadcast (it takes broadcast ids)"
                raise InvalidInput(f"--not-opened {problem}", [FieldProblem("audience.not_opened", problem)])
        if request.at is not None and self.scheduler is None:
            raise InvalidInput("--at needs the broadcast schedule state machine (not deployed)", [])

    def _check_ab(self, test: AbTest) -> None:
        for number, variant in enumerate(test.variants, start=1):
            if not self.templates.exists(variant.template):
                problem = f"variant {number}: template {variant.template!r} does not exist"
                raise InvalidInput(f"--variant {problem}", [FieldProblem("variant", problem)])
        if self.scheduler is None:
            problem = "needs the broadcast schedule state machine (not deployed)"
            raise InvalidInput(f"--decide-after {problem}", [FieldProblem("decide_after", problem)])

    def send(self, request: BroadcastRequest, now: datetime | None = None) -> SendAnswer:
        """Create the broadcast and start it (or schedule it). With an id that exists already
        nothing new is sent; a broadcast that never got started (a crash right after it was
        written) is started again, which is harmless when it had started."""
        self.check(request, now)
        record, created = self.records.create(request, send_rate=self.send_rate(), now=now)
        same = created or request.same_as(record)
        if record.ab is not None and same:  # an A/B test: its rest, scheduled at the decision time
            self.send(rest_request(record), now)
        if not created:
            if same and record.status in ACTIVE and record.page == 0 and not record.resolved:
                self._start(record)
            return SendAnswer(record, created=False, same=same)
        self._start(record)
        return SendAnswer(self.records.get(record.id) or record, created=True)

    def _start(self, record: Broadcast) -> None:
        message = first_page(record.id, record.round)
        if record.status == SCHEDULED:
            assert self.scheduler is not None
            arn = self.scheduler.schedule(record, resolve_body(message))
            self.records.set_execution(record, arn)
        else:
            self.queues.send_resolve(message)

    # ----- control ----------------------------------------------------------------------------
    def get(self, broadcast_id: str) -> Broadcast:
        record = self.records.get(broadcast_id)
        if record is None:
            raise BroadcastMissing(f"no broadcast {broadcast_id!r}")
        return record

    def cancel(self, broadcast_id: str) -> tuple[Broadcast, bool]:
        """(record, changed). Batches already in a worker's hands finish; later ones are skipped.
        An A/B test not decided yet takes its rest with it."""
        record = self.get(broadcast_id)
        if record.status not in ACTIVE | {PAUSED_REPUTATION, HELD}:
            return record, False
        cancelled = self.records.cancel(record)
        if cancelled is None:
            return self.get(broadcast_id), False
        if record.status == SCHEDULED and record.execution_arn and self.scheduler is not None:
            self.scheduler.unschedule(record.execution_arn)
        if record.ab is not None and self.records.get(record.ab.rest_id) is not None:
            self.cancel(record.ab.rest_id)  # a test: its rest is not sent either
        return cancelled, True

    def resume(self, broadcast_id: str) -> Broadcast:
        """A cancelled, failed, reputation-paused or held broadcast starts a new round: the
        audience is resolved again and whoever has not received it yet gets it now (send-once
        keeps the others out). A ``paused_reputation`` one resumes with `mailstep reputation
        resume`, which re-enables sending first (docs/reputation.md); a ``held`` one resumes by
        itself at its ``resume_at``, or now (after verifying the identity, say)."""
        record = self.get(broadcast_id)
        if record.status not in (CANCELLED, FAILED, PAUSED_REPUTATION, HELD):
            raise Conflict(
                f"broadcast {broadcast_id!r} is {record.status}: only cancelled, failed, "
                "paused_reputation or held ones resume"
            )
        resumed = self.records.new_round(record, self.send_rate())
        if resumed is None:
            raise Conflict(f"broadcast {broadcast_id!r} changed meanwhile: try again")
        self.queues.send_resolve(first_page(resumed.id, resumed.round))
        return resumed

    def resend(
        self,
        broadcast_id: str,
        *,
        after: str,
        to: str = NON_OPENERS,
        subject: str | None = None,
        template: str | None = None,
        resend_id: str | None = None,
        now: datetime | None = None,
    ) -> SendAnswer:
        """Schedule the follow-up of a broadcast to its recipients who did not open it as a
        person (docs/broadcasts.md, "Resend to non-openers"): one per broadcast, so a second
        call is refused (:class:`ResendExists`) and nothing is written."""
        original = self.get(broadcast_id)
        existing = self.records.resend_of(original.id)
        if existing is not None:
            raise ResendExists(f"broadcast {original.id!r} has a resend already: {existing!r}")
        request = resend_request(
            original, to=to, after=after, subject=subject, template=template, broadcast_id=resend_id, now=now
        )
        return self.send(request, now)

    def list(self, limit: int = 50) -> list[Broadcast]:
        return self.records.list(limit)

    def details(self, broadcast_id: str) -> dict[str, Any]:
        """The record merged with its engagement counters (``STATS#<id>``)."""
        record = self.get(broadcast_id)
        out = record.public()
        if self.stats is not None:
            out["engagement"] = {row["metric"]: row for row in self.stats.source(broadcast_id).rows()}
        if record.dead_lettered_batches:
            out["dead_letters"] = dead_letters(record, self.queues)
        resend_id = self.records.resend_of(record.id)
        if resend_id is not None:  # a resend to non-openers, or an A/B test's rest
            name = "rest" if record.ab is not None else "resend"
            resend = self.records.get(resend_id)
            out[name] = {"id": resend_id}
            if resend is not None:
                out[name] |= {"status": resend.status, "at": resend.at, "template": resend.template}
                out[name] |= {"audience": resend.audience_size, "sent": resend.sent}
        return out


def dead_letters(record: Broadcast, queues: BroadcastQueues) -> dict[str, Any]:
    """What waits in the batch queue's DLQ for this broadcast, and the command that redrives it."""
    return {
        "batches": record.dead_lettered_batches,
        "recipients": record.dead_lettered_recipients,
        "redrive": queues.redrive_command(),
        "note": "these batches failed every receive and wait in the dead-letter queue; fix the cause "
        "(the worker's log says it), then redrive: nothing already sent is sent again",
    }
