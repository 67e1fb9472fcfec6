"""The warm-up on moto (docs/sending.md, "Warm-up"): a broadcast takes its share of the day's
allowance per batch and is held (``warmup``) until the next day when it is used; what was taken
and not sent goes back; sequence and transactional mail count and are never held; the next day
(the calendar moved on) the held broadcast sends the rest, each reader once.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from local_aws.provision import LocalResources
from local_aws.ses import LocalSes
from ops.outbox import read_outbox
from shared.broadcasts.fanout import BroadcastQueues
from shared.broadcasts.model import HELD, HOLD_WARMUP, BatchMessage
from shared.broadcasts.records import BroadcastStore
from shared.broadcasts.worker import TokenPools, WorkerContext, process_batch
from shared.core import clock
from shared.sending.jobs import SendJob
from shared.sending.pipeline import send
from shared.sending.warmup import Warmup
from tests.integration.reputation_support import settings_of
from tests.integration.test_reputation import _subscribers, ctx_of, sending

DOMAIN = "example.com"
SCHEDULE = (4, 5)


def test_a_broadcast_takes_the_day_s_allowance_holds_and_sends_the_rest_the_next_day(
    world: LocalResources, ses: LocalSes, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = world.tables["table_name"]
    warmup = Warmup(table, DOMAIN, SCHEDULE)
    emails = _subscribers(world, 8)
    record = sending(world, "warm-b1")
    records = BroadcastStore(table)
    settings = settings_of(world)
    queues = BroadcastQueues(settings.broadcast_queue_url, settings.broadcast_control_queue_url)
    worker = WorkerContext(
        records=records, send=ctx_of(world), pools=TokenPools(table), threads=2, queues=queues, warmup=warmup
    )
    today = clock.calendar_now().date()
    # one of the readers got it before (an earlier round): its slot goes back to the day
    worker.send_fn(
        SendJob(email=emails[0], template="newsletter/monthly", source=record.id, step="broadcast"),
        worker.send,
    )
    assert warmup.used(today) == 0  # a broadcast's own send is not counted per mail

    message = BatchMessage(broadcast_id=record.id, round=1, page=0, index=0, emails=tuple(emails))
    result = process_batch(message, worker)

    assert result.status == "held"
    held = records.get(record.id)
    assert held is not None and held.status == HELD and held.hold_reason == HOLD_WARMUP
    tomorrow = (clock.calendar_now() + timedelta(days=1)).date().isoformat()
    assert held.resume_at is not None and held.resume_at.startswith(tomorrow + "T00:00:0")
    delivered = [d for m in read_outbox(ses.outbox) for d in m["destination"]]
    assert len(delivered) == 1 + 4 and len(set(delivered)) == 5  # the day's 4, no duplicate
    assert warmup.used(today) == 4  # exactly the allowance: the already-sent slot was given back
    assert warmup.state().start_day == today  # day 1 is the first day that sent

    # sequence and transactional mail count against the day, and are never held by it
    counted = replace(ctx_of(world), warmup=warmup)
    assert (
        send(SendJob(email=emails[0], template="welcome", source="onboarding", step="s1"), counted).status
        == "sent"
    )
    assert warmup.used(today) == 5

    # the next day: a new round sends the rest, each reader once
    monkeypatch.setattr(clock, "CALENDAR_OFFSET_S", 86_400.0)
    warmup._known = None
    resumed = records.new_round(held, 1000)
    assert resumed is not None
    records.save_page(resumed, 0, list(emails), None, True)
    records.mark_resolved(records.get(record.id))  # type: ignore[arg-type]
    done = process_batch(message.model_copy(update={"round": 2}), worker)
    assert done.status == "counted" and done.counts == {"sent": 8, "processed": 8}
    broadcast = [
        d
        for m in read_outbox(ses.outbox)
        if m["email_tags"].get("source") == record.id
        for d in m["destination"]
    ]
    assert sorted(broadcast) == sorted(emails)
    assert warmup.used(clock.calendar_now().date()) == 3  # day 2 (allowance 5): the 3 still waiting
    assert warmup.state().start_day == today
    warmup.finish()
    assert warmup.state().finished and warmup.state().start_day == today
