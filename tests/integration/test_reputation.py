"""The reputation guardrail on moto (docs/reputation.md): the pausing function (delivered twice:
one pause), the broadcast worker on SES's refusal (no failure, no duplicate, the batch returns),
a sequence step's wait, and `mailstep reputation` status and resume.

SES is the local runtime's emulation of it (``local_aws.ses``, installed here on moto's
in-process SES v2): moto has no PutConfigurationSetSendingOptions and never refuses a send.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from typing import Any

import pytest

from local_aws.provision import LocalResources
from local_aws.ses import LocalSes
from ops.outbox import read_outbox
from shared.broadcasts.model import PAUSED_REPUTATION, SENDING, BatchMessage, BroadcastRequest
from shared.broadcasts.records import BroadcastStore
from shared.broadcasts.worker import TokenPools, WorkerContext, process_batch
from shared.core import specs
from shared.core.aws import client
from shared.reputation.store import ReputationStore
from shared.sending.pipeline import SendContext, send
from shared.sequences.steps import SendPaused, StepDeps, run_step
from shared.store.subscribers import SubscriberStore
from tests.integration.conftest import SECRET, handler_module, sqs_record
from tests.integration.reputation_support import (
    COMPLAINT,
    MARKETING,
    TRANSACTIONAL,
    guard_alarms,
    publish_rate,
    settings_of,
    step_request,
)


def ctx_of(res: LocalResources) -> SendContext:
    s = settings_of(res)
    return replace(
        SendContext.from_settings(s.model_copy(update={"unsubscribe_secret": ""})),
        token_secret=lambda: SECRET,
        reserve=None,
    )


def alarm_body(state: str = "ALARM", configuration_set: str = MARKETING) -> str:
    message = {
        "AlarmName": "Mailstep-MarketingReputationComplaint",
        "NewStateValue": state,
        "NewStateReason": "Threshold Crossed: 1 datapoint [0.2] was greater than the threshold (0.0008).",
        "StateChangeTime": "2026-11-27T10:00:00.000+0000",
        "Trigger": {
            "MetricName": "Reputation.ComplaintRate",
            "Namespace": "AWS/SES",
            "Dimensions": [{"value": configuration_set, "name": "ses:configuration-set"}],
            "Threshold": 0.0008,
        },
    }
    return json.dumps(
        {"Type": "Notification", "MessageId": str(uuid.uuid4()), "Message": json.dumps(message)}
    )


def sending(res: LocalResources, record_id: str) -> Any:
    records = BroadcastStore(res.tables["table_name"])
    created, _ = records.create(
        BroadcastRequest.model_validate({"id": record_id, "template": "newsletter/monthly"}), send_rate=1000
    )
    moved = records.set_status(created, SENDING, leaving=frozenset({created.status}))
    assert moved is not None
    return moved


def guard_handler(res: LocalResources, monkeypatch: pytest.MonkeyPatch) -> Any:
    return handler_module(
        "reputation_guard", {**res.env(), specs.ENV["configuration_set"]: MARKETING}, monkeypatch
    )


def test_the_guard_delivered_twice_pauses_once(
    world: LocalResources, ses: LocalSes, monkeypatch: pytest.MonkeyPatch
) -> None:
    from local_aws.apigw import LambdaContext

    module = guard_handler(world, monkeypatch)
    broadcast = sending(world, "guard-b1")
    store = ReputationStore(world.tables["table_name"])
    body = alarm_body()
    event = {"Records": [sqs_record(body, specs.REPUTATION_QUEUE.local_name)]}

    first = module.handler(event, LambdaContext("reputation-guard"))
    record = store.get(specs.CONFIGURATION_SET.id)
    second = module.handler(event, LambdaContext("reputation-guard"))

    assert first == second == {"batchItemFailures": []}
    assert not ses.sending_enabled(MARKETING) and ses.sending_enabled(TRANSACTIONAL)
    again = store.get(specs.CONFIGURATION_SET.id)
    assert record is not None and record.paused and record == again  # the second wrote nothing
    assert record.metric == "Reputation.ComplaintRate" and record.threshold == pytest.approx(0.0008)
    assert BroadcastStore(world.tables["table_name"]).get(broadcast.id).status == PAUSED_REPUTATION  # type: ignore[union-attr]
    answer = client("sesv2").get_configuration_set(ConfigurationSetName=MARKETING)
    assert answer["SendingOptions"] == {"SendingEnabled": False}


def test_the_guard_ignores_ok_states_other_sets_and_fails_only_a_bad_record(
    world: LocalResources, ses: LocalSes, monkeypatch: pytest.MonkeyPatch
) -> None:
    from local_aws.apigw import LambdaContext

    module = guard_handler(world, monkeypatch)
    bad = sqs_record("{not json", specs.REPUTATION_QUEUE.local_name)
    records = [
        sqs_record(alarm_body("OK"), specs.REPUTATION_QUEUE.local_name),
        sqs_record(alarm_body(configuration_set=TRANSACTIONAL), specs.REPUTATION_QUEUE.local_name),
        bad,
    ]
    answer = module.handler({"Records": records}, LambdaContext("reputation-guard"))
    assert answer == {"batchItemFailures": [{"itemIdentifier": bad["messageId"]}]}
    assert ses.sending_enabled(MARKETING)
    assert ReputationStore(world.tables["table_name"]).get(specs.CONFIGURATION_SET.id) is None


def _subscribers(res: LocalResources, count: int) -> list[str]:
    store = SubscriberStore(res.tables["table_name"], res.tables["events_table_name"])
    emails = [f"reader{i:02d}-{uuid.uuid4().hex[:6]}@example.com" for i in range(count)]
    for email in emails:
        store.upsert(email, first_name="R")
    return emails


def test_the_worker_stops_on_the_paused_refusal_counts_nothing_and_the_resume_sends_the_rest_once(
    world: LocalResources, ses: LocalSes
) -> None:
    emails = _subscribers(world, 6)
    record = sending(world, "guard-b2")
    records = BroadcastStore(world.tables["table_name"])
    base = ctx_of(world)
    sent: list[str] = []

    def send_then_pause(job: Any, ctx: SendContext) -> Any:
        outcome = send(job, ctx)
        if outcome.status == "sent":
            sent.append(job.email)
            if len(sent) == 2:  # the guardrail pauses the set after two mails
                client("sesv2").put_configuration_set_sending_options(
                    ConfigurationSetName=MARKETING, SendingEnabled=False
                )
        return outcome

    worker = WorkerContext(
        records=records,
        send=base,
        pools=TokenPools(world.tables["table_name"]),
        threads=1,
        send_fn=send_then_pause,
    )
    message = BatchMessage(broadcast_id=record.id, round=1, page=0, index=0, emails=emails)

    result = process_batch(message, worker)  # returns: the SQS record is done, nothing raised

    assert result.status == "paused"
    paused = records.get(record.id)
    assert paused is not None and paused.status == PAUSED_REPUTATION
    assert (paused.sent, paused.failed, paused.processed) == (0, 0, 0)  # nothing counted, nothing failed
    assert len(read_outbox(ses.outbox)) == 2
    # a redelivery of the batch while paused sends nothing and counts nothing
    assert process_batch(message, worker).status == "paused"
    assert len(read_outbox(ses.outbox)) == 2

    client("sesv2").put_configuration_set_sending_options(ConfigurationSetName=MARKETING, SendingEnabled=True)
    resumed = records.new_round(paused, 1000)
    assert resumed is not None and resumed.round == 2
    records.save_page(resumed, 0, emails, None, True)
    records.mark_resolved(records.get(record.id))  # type: ignore[arg-type]
    done = process_batch(message.model_copy(update={"round": 2}), replace(worker, send_fn=send))

    assert done.status == "counted" and done.counts == {"sent": 6, "processed": 6}
    delivered = [d for m in read_outbox(ses.outbox) for d in m["destination"]]
    assert sorted(delivered) == sorted(emails)  # each reader exactly once
    final = records.get(record.id)
    assert final is not None and final.status == "done" and final.failed == 0


def test_transactional_mail_goes_on_through_its_own_set(world: LocalResources, ses: LocalSes) -> None:
    (email,) = _subscribers(world, 1)
    ses.set_sending(MARKETING, False)
    ctx = ctx_of(world)
    from shared.sending.jobs import SendJob

    marketing = send(SendJob(email=email, template="welcome", source="news", step="1"), ctx)
    receipt = send(
        SendJob(email=email, template="welcome", source="receipts", step="1", transactional=True), ctx
    )

    assert (marketing.status, marketing.reason, marketing.error_code) == (
        "retryable",
        "paused",
        "SendingPausedException",
    )
    assert receipt.status == "sent"
    (only,) = read_outbox(ses.outbox)
    assert only["configuration_set"] == TRANSACTIONAL
    # the refused send left no claim behind: after the resume it goes out
    ses.set_sending(MARKETING, True)
    assert send(SendJob(email=email, template="welcome", source="news", step="1"), ctx).status == "sent"


def test_a_marketing_sequence_step_waits_it_does_not_fail(world: LocalResources, ses: LocalSes) -> None:
    (email,) = _subscribers(world, 1)
    ses.set_sending(MARKETING, False)
    ctx = ctx_of(world)
    deps = StepDeps(store=ctx.store, send=lambda job: send(job, ctx))
    request = step_request(email, "x1")
    with pytest.raises(SendPaused):
        run_step(request, deps)
    assert read_outbox(ses.outbox) == []
    ses.set_sending(MARKETING, True)
    assert run_step(request, deps)["outcome"] == "sent"  # the Retry's next try


def test_the_compiled_send_task_retries_a_pause_for_days() -> None:
    from shared.sequences.compiler import PAUSED_ERROR, RETRY_PAUSED

    assert SendPaused.__name__ == PAUSED_ERROR
    waited = sum(
        min(
            RETRY_PAUSED["IntervalSeconds"] * RETRY_PAUSED["BackoffRate"] ** i,
            RETRY_PAUSED["MaxDelaySeconds"],
        )  # type: ignore[operator]
        for i in range(RETRY_PAUSED["MaxAttempts"])  # type: ignore[call-overload]
    )
    assert waited > 6 * 86400


def test_status_and_resume(world: LocalResources, ses: LocalSes, monkeypatch: pytest.MonkeyPatch) -> None:
    from ops.reputation import Reputation
    from ops.targets import Target
    from shared.core.errors import Conflict

    settings = settings_of(world)
    target = Target(kind="stack", name="t", region="us-east-1", settings=settings)
    guard_alarms(bounce=0.04, complaint=0.0008)
    publish_rate(COMPLAINT, 0.2)
    guard = guard_handler(world, monkeypatch)
    from local_aws.apigw import LambdaContext

    guard.handler({"Records": [sqs_record(alarm_body(), "q")]}, LambdaContext("reputation-guard"))
    broadcast = BroadcastStore(world.tables["table_name"]).get("guard-b3") or sending(world, "guard-b3")
    BroadcastStore(world.tables["table_name"]).pause_for_reputation(broadcast)

    marketing, transactional = Reputation(target).status()
    assert (marketing.kind, marketing.configuration_set, marketing.sending_enabled) == (
        "marketing",
        MARKETING,
        False,
    )
    assert marketing.complaint_rate == pytest.approx(0.2) and marketing.complaint_threshold == pytest.approx(
        0.0008
    )
    assert marketing.paused_at and marketing.above == ["complaint rate 20.00% is above 0.08%"]
    assert (transactional.kind, transactional.sending_enabled, transactional.complaint_rate) == (
        "transactional",
        True,
        None,
    )

    with pytest.raises(Conflict, match="--force"):
        Reputation(target).resume()
    assert not ses.sending_enabled(MARKETING)

    monkeypatch.setattr("ops.broadcasts.read_quota", lambda _c: type("Q", (), {"max_send_rate": 14.0})())
    answer = Reputation(target).resume(force=True)
    assert answer["forced"] and answer["broadcasts_resumed"] == ["guard-b3"]
    assert ses.sending_enabled(MARKETING)
    record = ReputationStore(world.tables["table_name"]).get(specs.CONFIGURATION_SET.id)
    assert record is not None and not record.paused and record.forced
    resumed = BroadcastStore(world.tables["table_name"]).get("guard-b3")
    assert resumed is not None and resumed.status == "resolving" and resumed.round == 2
