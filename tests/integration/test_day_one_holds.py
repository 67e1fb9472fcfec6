"""Day one on moto: SES's "not yet" (the sending identity waits for verification, the 24-hour
quota is spent) holds mail, it never fails it (docs/sending.md, "Held, not failed").

Given the local runtime's SES emulation on moto's SES v2 with the sending domain waiting for
verification (or a spent quota), when the sender function, a sequence step and a broadcast
worker meet the refusal, then the job goes back on its queue with a delay (acknowledged, not
failed), the step raises the error its Retry waits on, and the broadcast is ``held`` with its
wake-up on the resolver's queue; once the identity is verified (or the quota frees) each mail
goes out once.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError

from local_aws.apigw import LambdaContext
from local_aws.provision import LocalResources
from local_aws.ses import LocalSes
from ops.outbox import read_outbox
from shared.broadcasts.audience import AudienceResolver
from shared.broadcasts.fanout import BroadcastQueues, FanoutContext, resolve_step
from shared.broadcasts.model import HELD, HOLD_DAILY_QUOTA, HOLD_UNVERIFIED, BatchMessage, parse_resolve
from shared.broadcasts.records import BroadcastStore
from shared.broadcasts.worker import HOLD_RECHECK_S, TokenPools, WorkerContext, process_batch
from shared.core import specs
from shared.core.aws import client
from shared.sending.jobs import HOLD_DELAY_S, SendJob, from_message, to_message
from shared.sending.pipeline import send
from shared.sending.sender import SesSender
from shared.sequences.steps import SendPaused, StepDeps, run_step
from tests.integration.conftest import handler_module, sqs_record
from tests.integration.reputation_support import settings_of, step_request
from tests.integration.test_reputation import _subscribers, ctx_of, sending

DOMAIN = "example.com"  # the built-in sender's (hello@example.com)


def queue_url(res: LocalResources, spec: specs.QueueSpec) -> str:
    return res.queues[spec.id].url


def delayed(url: str) -> int:
    attributes = client("sqs").get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesDelayed"]
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessagesDelayed"])


def receive_delayed(url: str) -> list[dict[str, Any]]:
    """The queue's messages with each one's delay in whole seconds (moto keeps a delayed message
    invisible: read its store)."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.core.utils import unix_time_millis
    from moto.sqs.models import sqs_backends

    queue = sqs_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].queues[url.rsplit("/", 1)[-1]]
    now = unix_time_millis()
    return [{"body": m.body, "delay": round(max(0.0, m.delayed_until - now) / 1000)} for m in queue._messages]


def sender_module(res: LocalResources, monkeypatch: pytest.MonkeyPatch) -> Any:
    env = {**res.env(), specs.ENV["send_queue_url"]: settings_of(res).send_queue_url}
    return handler_module("sender", env, monkeypatch)


def reader_while_unverified(world: LocalResources, ses: LocalSes) -> str:
    """One subscriber, and the sending domain waiting for verification: the subscriber's address."""
    (email,) = _subscribers(world, 1)
    ses.hold_identity(DOMAIN)
    return email


def test_a_held_send_job_goes_back_on_its_queue_delayed_and_is_sent_once_after_verification(
    world: LocalResources, ses: LocalSes, monkeypatch: pytest.MonkeyPatch
) -> None:
    email = reader_while_unverified(world, ses)
    module = sender_module(world, monkeypatch)
    job = SendJob(email=email, template="welcome", source="receipts", step="r1", transactional=True)
    url = queue_url(world, specs.SEND_QUEUE)

    answer = module.handler(
        {"Records": [sqs_record(to_message(job), "mailstep-send")]}, LambdaContext("sender")
    )

    assert answer == {"batchItemFailures": []}  # acknowledged: not a failure, no receive counted
    assert read_outbox(ses.outbox) == [] and ses.refused_unverified == 1
    (kept,) = receive_delayed(url)
    assert kept["delay"] == HOLD_DELAY_S
    again = from_message(kept["body"])
    assert again.held_since is not None and again.model_copy(update={"held_since": None}) == job

    # the job comes back after its delay, twice (at-least-once): the identity is verified by now
    assert ses.verify_identity(DOMAIN) is True
    for _ in range(2):
        answer = module.handler(
            {"Records": [sqs_record(kept["body"], "mailstep-send")]}, LambdaContext("sender")
        )
        assert answer == {"batchItemFailures": []}
    assert [m["destination"] for m in read_outbox(ses.outbox)] == [[email]]  # once


def test_a_job_held_for_a_week_fails_its_record_for_the_dead_letter_queue(
    world: LocalResources, ses: LocalSes, monkeypatch: pytest.MonkeyPatch
) -> None:
    email = reader_while_unverified(world, ses)
    module = sender_module(world, monkeypatch)
    job = SendJob(
        email=email,
        template="welcome",
        source="receipts",
        step="r2",
        transactional=True,
        held_since="2026-01-01T00:00:00Z",
    )
    record = sqs_record(to_message(job), "mailstep-send")
    with pytest.raises(BatchProcessingError, match="deferred: unverified"):  # a batch of one failed
        module.handler({"Records": [record]}, LambdaContext("sender"))
    assert delayed(queue_url(world, specs.SEND_QUEUE)) == 0


def test_a_sequence_step_waits_while_the_identity_is_pending(world: LocalResources, ses: LocalSes) -> None:
    email = reader_while_unverified(world, ses)
    ctx = ctx_of(world)
    deps = StepDeps(store=ctx.store, send=lambda job: send(job, ctx))
    request = step_request(email, "d1")
    with pytest.raises(SendPaused, match="unverified"):
        run_step(request, deps)
    ses.configure(max_24_hour_send=0)
    ses.verify_identity(DOMAIN)
    with pytest.raises(SendPaused, match="daily_quota"):
        run_step(request, deps)
    ses.configure(max_24_hour_send=50)
    assert run_step(request, deps)["outcome"] == "sent"  # the Retry's next try
    assert len(read_outbox(ses.outbox)) == 1


@pytest.mark.parametrize(
    ("refuse", "reason"),
    [("unverified", HOLD_UNVERIFIED), ("quota", HOLD_DAILY_QUOTA)],
)
def test_a_broadcast_is_held_then_wakes_and_resumes_sending_each_reader_once(
    world: LocalResources, ses: LocalSes, refuse: str, reason: str
) -> None:
    emails = _subscribers(world, 6)
    record = sending(world, f"held-{refuse}")
    table = world.tables["table_name"]
    records = BroadcastStore(table)
    settings = settings_of(world)
    queues = BroadcastQueues(settings.broadcast_queue_url, settings.broadcast_control_queue_url)
    worker = WorkerContext(
        records=records, send=ctx_of(world), pools=TokenPools(table), threads=1, queues=queues
    )
    if refuse == "unverified":
        ses.hold_identity(DOMAIN)
    else:
        ses.configure(max_24_hour_send=2)  # two mails go, then the day is spent
    message = BatchMessage(broadcast_id=record.id, round=1, page=0, index=0, emails=tuple(emails))

    result = process_batch(message, worker)  # returns: the SQS record is done, nothing raised

    assert result.status == "held"
    held = records.get(record.id)
    assert held is not None and held.status == HELD and held.hold_reason == reason and held.resume_at
    assert (held.failed, held.processed) == (0, 0)  # nothing failed, nothing counted
    before = len(read_outbox(ses.outbox))
    assert before == (0 if refuse == "unverified" else 2)
    # a redelivered batch while held sends nothing
    assert process_batch(message, worker).status == "held"
    assert len(read_outbox(ses.outbox)) == before
    (wake,) = receive_delayed(settings.broadcast_control_queue_url)
    wake_message = parse_resolve(wake["body"])
    assert wake_message.wake and wake_message.round == 1
    assert wake["delay"] + wake_message.wake_after_s == HOLD_RECHECK_S[reason]

    # the resolver: the wake-up travels on while the wait lasts, then a new round starts
    fanout = FanoutContext(records=records, resolver=AudienceResolver(table), queues=queues)
    control = settings.broadcast_control_queue_url
    client("sqs").purge_queue(QueueUrl=control)
    hops = 1
    while wake_message.wake_after_s:
        assert resolve_step(wake_message, fanout).status == "held"
        after = receive_delayed(control)[-1]
        wake_message = parse_resolve(after["body"])
        assert after["delay"] <= 900
        hops += 1
    assert hops == -(-HOLD_RECHECK_S[reason] // 900)  # a chain of SQS's longest delays
    ses.verify_identity(DOMAIN)
    ses.configure(max_24_hour_send=50)
    assert resolve_step(wake_message, fanout).status == "resumed"
    assert resolve_step(wake_message, fanout).status == "stale"  # delivered twice: one resume
    resumed = records.get(record.id)
    assert resumed is not None and resumed.status == "resolving" and resumed.round == 2
    assert resumed.hold_reason is None and resumed.resume_at is None
    first = [parse_resolve(m["body"]) for m in receive_delayed(control) if not json.loads(m["body"])["wake"]]
    assert [(m.round, m.page) for m in first] == [(2, 0)]

    records.save_page(resumed, 0, list(emails), None, True)
    records.mark_resolved(records.get(record.id))  # type: ignore[arg-type]
    done = process_batch(message.model_copy(update={"round": 2}), worker)
    assert done.status == "counted" and done.counts == {"sent": 6, "processed": 6}
    delivered = [d for m in read_outbox(ses.outbox) for d in m["destination"]]
    assert sorted(delivered) == sorted(emails)  # each reader exactly once


def test_a_batch_that_finds_its_broadcast_held_elsewhere_stops_and_never_pauses_it(
    world: LocalResources, ses: LocalSes, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shared.broadcasts.worker as worker_module

    monkeypatch.setattr(worker_module, "STATUS_CHECK_S", 0.0)  # the status read before every send
    emails = _subscribers(world, 4)
    record = sending(world, "race-1")
    table = world.tables["table_name"]
    records = BroadcastStore(table)
    settings = settings_of(world)
    queues = BroadcastQueues(settings.broadcast_queue_url, settings.broadcast_control_queue_url)

    def send_then_held_elsewhere(job: Any, ctx: Any) -> Any:
        outcome = send(job, ctx)
        current = records.get(record.id)
        assert current is not None
        if current.status != HELD:  # another worker's batch met the daily quota meanwhile
            assert records.hold(current, HOLD_DAILY_QUOTA, "2026-11-29T00:00:00.000Z") is not None
        return outcome

    worker = WorkerContext(
        records=records,
        send=ctx_of(world),
        pools=TokenPools(table),
        threads=1,
        queues=queues,
        send_fn=send_then_held_elsewhere,
    )
    message = BatchMessage(broadcast_id=record.id, round=1, page=0, index=0, emails=tuple(emails))

    assert process_batch(message, worker).status == "held"  # stopped, nothing counted
    held = records.get(record.id)
    assert held is not None and held.status == HELD and held.processed == 0
    assert len(read_outbox(ses.outbox)) == 1  # no send started after the hold was seen

    # resumed meanwhile: a batch of the held round never pauses the new one
    resumed = records.new_round(held, 1000)
    assert resumed is not None and resumed.round == 2
    assert records.pause_for_reputation(record) is None  # round 1's view of it
    current = records.get(record.id)
    assert current is not None and current.status == "resolving"


def test_a_spent_quota_is_refused_in_one_call_and_a_rate_throttle_is_still_retried(
    world: LocalResources, ses: LocalSes
) -> None:
    """SES's spent-quota refusal carries a throttling code, which botocore's standard mode
    retries four more times with backoff; the sender takes the first refusal as final (the quota
    frees in hours, not seconds) and leaves botocore's retries to the rate throttle. The local
    SES counts every call it answers."""
    (email,) = _subscribers(world, 1)
    raw = f"From: hello@{DOMAIN}\r\nTo: {email}\r\nSubject: quota\r\n\r\nhi\r\n".encode()
    sender = SesSender()

    ses.configure(max_24_hour_send=0)
    spent = sender.send_raw(raw, from_email=f"hello@{DOMAIN}", to_email=email, tags={})
    assert (spent.status, ses.refused_daily_quota) == ("daily_quota", 1)

    ses.configure(max_24_hour_send=50, max_send_rate=1)  # one a second: the second send waits
    first = sender.send_raw(raw, from_email=f"hello@{DOMAIN}", to_email=email, tags={})
    second = sender.send_raw(raw, from_email=f"hello@{DOMAIN}", to_email=email, tags={})
    assert (first.status, second.status) == ("sent", "sent")
    assert ses.throttled >= 1  # the second send's throttled calls, retried by botocore until sent
