"""The sender Lambda: SQS batches of send.job envelopes with partial batch responses."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from local_aws.apigw import LambdaContext
from shared.core.errors import InvalidInput
from shared.sending.jobs import SendJob, from_message, to_message
from shared.store import keys
from tests.integration.conftest import scan_all, sqs_record


def _run(module: Any, bodies: list[str]) -> tuple[list[str], list[str]]:
    records = [sqs_record(b, "mailstep-send") for b in bodies]
    result = module.handler({"Records": records}, LambdaContext("sender", timeout_s=60))
    failed = {f["itemIdentifier"] for f in result["batchItemFailures"]}
    ids = [r["messageId"] for r in records]
    return ids, [i for i in ids if i in failed]


def _job(**overrides: Any) -> SendJob:
    fields = {
        "email": "jane@example.com",
        "template": "onboarding/welcome",
        "source": "onboarding",
        "step": "welcome",
        **overrides,
    }
    return SendJob(**fields)


def test_bad_records_fail_alone_and_the_valid_one_is_sent(sender, store, outbox):
    store.upsert("jane@example.com", first_name="Jane")
    good = to_message(_job())
    envelope = json.loads(good)
    wrong_version = json.dumps({**envelope, "version": 2})
    wrong_contract = json.dumps({**envelope, "contract": "broadcast.batch"})
    missing = json.dumps({k: v for k, v in envelope.items() if k != "template"})
    ids, failed = _run(sender, [good, "{not json", wrong_version, wrong_contract, missing])
    assert failed == ids[1:]
    assert len(outbox) == 1


def test_the_same_job_delivered_three_times_sends_once(sender, store, resources, outbox):
    store.upsert("jane@example.com")
    body = to_message(_job())
    for _ in range(3):
        assert _run(sender, [body])[1] == []
    assert len(outbox) == 1
    sent = [i for i in scan_all(resources.tables["table_name"]) if i["SK"].startswith(keys.SENT_PREFIX)]
    assert len(sent) == 1


def test_retryable_outcomes_fail_the_record_and_skips_are_acknowledged(sender, store, outbox):
    store.upsert("jane@example.com")
    store.upsert("gone@example.com", unsubscribe=True)
    job = _job()
    now = int(time.time())
    sender.context.log.claim(
        job.email,
        job.source,
        job.step,
        send_id="x",
        template=job.template,
        now=now,
        lease_seconds=300,
        log_until=now + 86400,
    )  # another worker holds the claim
    ids, failed = _run(sender, [to_message(job), to_message(_job(email="gone@example.com"))])
    assert failed == [ids[0]]
    assert outbox == []


def test_envelopes_round_trip_with_the_sender_alias():
    job = _job(sender={"from": "Sales <sales@acme.test>", "reply_to": "desk@acme.test"}, data={"n": 1})
    body = json.loads(to_message(job))
    assert body["contract"] == "send.job" and body["version"] == 1 and body["sender"]["from"]
    assert from_message(to_message(job)) == job
    with pytest.raises(InvalidInput, match="source"):
        from_message(json.dumps({**body, "source": "BAD#KEY"}))
