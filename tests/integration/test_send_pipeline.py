"""The send pipeline on moto: eligibility, send-once, headers, SENT# records, errors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email import policy
from email.parser import BytesParser
from typing import Any

import pytest

from local_aws.provision import LocalResources
from shared.core.aws import client
from shared.sending.jobs import SenderOverride, SendJob
from shared.sending.pipeline import SendContext, send, send_id_for
from shared.sending.sender import SendResult, SesSender, decode_tag_value
from shared.sending.tokens import verify
from shared.store.dynamo import key
from shared.store.send_log import SentRecord
from shared.store.stats import StatsStore
from shared.store.subscribers import keys
from tests.integration.conftest import SECRET, fold_stream, operations, scan_all


def _parsed(raw: Any) -> Any:
    return BytesParser(policy=policy.default).parsebytes(raw.raw_data.encode())


def _items(resources: LocalResources, prefix: str) -> list[dict[str, Any]]:
    return [i for i in scan_all(resources.tables["table_name"]) if i["SK"].startswith(prefix)]


def test_same_job_three_times_sends_once_and_records_one_sent_item(send_ctx, store, resources, outbox):
    # Given a subscribed profile
    store.upsert("jane@example.com", first_name="Jane")
    job = SendJob(
        email="jane@example.com", template="onboarding/welcome", source="onboarding", step="welcome"
    )

    # When the same job is processed three times
    outcomes = [send(job, send_ctx) for _ in range(3)]

    # Then SES got exactly one message and there is exactly one SENT# item
    assert [o.status for o in outcomes] == ["sent", "skipped", "skipped"]
    assert outcomes[1].reason == "already_sent" and outcomes[1].message_id == outcomes[0].message_id
    assert len(outbox) == 1
    sent = _items(resources, keys.SENT_PREFIX)
    assert len(sent) == 1
    item = sent[0]
    assert item["template"] == "onboarding/welcome" and item["source"] == "onboarding"
    assert item["step"] == "welcome" and item["ses_message_id"] == outcomes[0].message_id
    assert item["subject"] == "Welcome aboard, Jane"
    now = datetime.now(UTC).timestamp()
    assert now + 29 * 86400 < item["ttl"] < now + 31 * 86400


def test_an_old_completed_claim_still_blocks_long_after(send_ctx, store, resources, outbox):
    store.upsert("old@example.com")
    job = SendJob(email="old@example.com", template="welcome", source="onboarding", step="welcome")
    assert send(job, send_ctx).status == "sent"
    later = datetime.now(UTC) + timedelta(days=10)  # beyond the lease: the SENT# log answers
    outcome = send(job, send_ctx, now=later)
    assert (outcome.status, outcome.reason) == ("skipped", "already_sent")
    assert outcome.message_id == _items(resources, keys.SENT_PREFIX)[0]["ses_message_id"]
    # the SENT# log expired (TTL): the claim still blocks, it outlived its log
    table = resources.tables["table_name"]
    for item in _items(resources, keys.SENT_PREFIX):
        client("dynamodb").delete_item(TableName=table, Key=key(item["PK"], item["SK"]))
    much_later = datetime.now(UTC) + timedelta(days=400)
    outcome = send(job, send_ctx, now=much_later)
    assert (outcome.status, outcome.reason) == ("skipped", "already_sent")
    assert len(outbox) == 1
    # and the claim taken over for the check was put back as it was
    claim = _items(resources, keys.SEND_CLAIM_PREFIX)[0]
    assert claim["claimed_at"] < later.timestamp()


def test_a_send_costs_two_writes_and_a_redelivery_reads_the_log(send_ctx, store, resources, outbox):
    store.upsert("count@example.com")
    job = SendJob(email="count@example.com", template="welcome", source="onboarding", step="w")
    with operations() as calls:
        assert send(job, send_ctx).status == "sent"
    # the reads: the profile and the SUPPRESSION item in one BatchGetItem
    assert calls[0] == "BatchGetItem"
    assert [c for c in calls[1:] if c != "GetItem"] == ["PutItem", "SendEmail", "PutItem"]
    with operations() as calls:
        outcome = send(job, send_ctx)  # redelivered while the claim's lease still runs
    assert (outcome.status, outcome.reason) == ("skipped", "already_sent")
    assert [c for c in calls[1:] if c != "GetItem"] == ["PutItem", "Query"]
    # the stats fold counts the send from its SENT# entry's stream record
    assert fold_stream(resources).sends == 1
    counters = StatsStore(resources.tables["table_name"], resources.tables["events_table_name"])
    assert counters.source("onboarding").total("send") == 1
    assert counters.template("welcome").total("send") == 1


def test_marketing_mail_carries_one_click_unsubscribe_and_both_parts(send_ctx, store, outbox):
    store.upsert("jane@example.com", first_name="Jane")
    outcome = send(
        SendJob(email="jane@example.com", template="onboarding/tips", source="onboarding", step="tips"),
        send_ctx,
    )
    assert outcome.status == "sent"
    msg = _parsed(outbox[0])
    url = msg["List-Unsubscribe"].split(",")[0].strip().strip("<>")
    assert url.startswith("https://api.acme.test/u/")
    assert msg["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    assert msg["List-Id"] == '"onboarding" <onboarding.acme.test>'
    assert (
        msg["X-Mailstep-Send-Id"]
        == outcome.send_id
        == send_id_for(
            SendJob(email="jane@example.com", template="onboarding/tips", source="onboarding", step="tips")
        )
    )
    assert msg["Message-ID"] == f"<{outcome.send_id}@acme.test>"
    assert msg["From"].addresses[0].display_name == "Acme"
    assert str(msg["Reply-To"]) == "help@acme.test"
    assert [p.get_content_type() for p in msg.iter_parts()] == ["text/plain", "text/html"]
    html = msg.get_body(("html",)).get_content()
    text = msg.get_body(("plain",)).get_content()
    assert '<p style="margin: 0 0 16px 0;">' in html  # CSS inlined
    assert (
        html.split("<style>", 1)[1].split("</style>", 1)[0].strip().startswith("@media")
    )  # only at-rules kept
    assert url in html and f"Unsubscribe ({url})" in text
    assert "Acme Inc, 1 Main St, Springfield" in text
    claims = verify(url.rsplit("/", 1)[1], SECRET, purpose="unsubscribe")
    assert (claims.email, claims.source, claims.template) == (
        "jane@example.com",
        "onboarding",
        "onboarding/tips",
    )


def test_transactional_mail_has_no_list_headers_and_reaches_unsubscribed(send_ctx, store, outbox):
    store.upsert("buyer@example.com", unsubscribe=True)
    job = SendJob(
        email="buyer@example.com",
        template="transactional/receipt",
        source="purchases",
        step="o-1",
        transactional=True,
        data={"order_id": "A-1", "total": "$10"},
    )
    outcome = send(job, send_ctx)
    assert outcome.status == "sent"
    msg = _parsed(outbox[0])
    for header in ("List-Unsubscribe", "List-Unsubscribe-Post", "List-Id"):
        assert msg[header] is None
    assert msg["Subject"] == "Your receipt A-1"
    assert [p.get_content_type() for p in msg.iter_parts()] == ["text/plain", "text/html"]


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        (lambda s: s.upsert("x@example.com", unsubscribe=True), "unsubscribed"),
        (lambda s: s.set_suppressed("x@example.com", True), "suppressed"),
        (lambda s: None, "no_profile"),
    ],
)
def test_ineligible_subscribers_are_skipped_with_a_reason(send_ctx, store, outbox, setup, reason):
    setup(store)
    outcome = send(SendJob(email="x@example.com", template="welcome", source="onboarding"), send_ctx)
    assert (outcome.status, outcome.reason) == ("skipped", reason)
    assert outbox == []
    if reason != "no_profile":
        events = store.list_events("x@example.com")
        assert [(e["type"], e["reason"]) for e in events] == [("send_skipped", reason)]


def test_suppressed_is_never_sent_even_transactional(send_ctx, store, outbox):
    store.set_suppressed("x@example.com", True)
    job = SendJob(
        email="x@example.com",
        template="transactional/receipt",
        source="purchases",
        transactional=True,
        data={"order_id": "1", "total": "1"},
    )
    assert send(job, send_ctx).reason == "suppressed"
    assert outbox == []


def test_sender_override_and_tags(send_ctx, store, outbox, monkeypatch):
    store.upsert("jane@example.com")
    calls: list[dict[str, Any]] = []
    original = send_ctx.ses.client.send_email

    def spy(**kwargs: Any) -> Any:
        calls.append(kwargs)
        return original(**kwargs)

    monkeypatch.setattr(send_ctx.ses.client, "send_email", spy)
    sales = SenderOverride(**{"from": "Sales Team <sales@acme.test>", "reply_to": "Desk <desk@acme.test>"})
    job = SendJob(
        email="jane@example.com", template="onboarding/welcome", source="spring.sale", step="s1", sender=sales
    )
    assert send(job, send_ctx).status == "sent"
    request = calls[0]
    assert request["FromEmailAddress"] == "sales@acme.test"
    assert request["ConfigurationSetName"] == "mailstep"
    tags = {t["Name"]: t["Value"] for t in request["EmailTags"]}
    assert (
        tags["template"] == "onboarding_swelcome"
        and decode_tag_value(tags["template"]) == "onboarding/welcome"
    )
    assert decode_tag_value(tags["source"]) == "spring.sale"
    msg = _parsed(outbox[0])
    assert msg["From"].addresses[0].display_name == "Sales Team"
    assert msg["Reply-To"].addresses[0].addr_spec == "desk@acme.test"


class _FakeSes(SesSender):
    def __init__(self, results: list[SendResult]) -> None:
        super().__init__("mailstep")
        self.results = results
        self.calls = 0

    def send_raw(self, raw: bytes, **kwargs: Any) -> SendResult:
        self.calls += 1
        return self.results.pop(0)


def test_throttling_releases_the_claim_so_the_retry_sends(send_ctx, store, resources):
    store.upsert("jane@example.com")
    fake = _FakeSes(
        [SendResult("retryable", error_code="TooManyRequestsException"), SendResult("sent", "m-1")]
    )
    retrying = SendContext(**{**send_ctx.__dict__, "ses": fake})
    job = SendJob(email="jane@example.com", template="welcome", source="onboarding")
    first = send(job, retrying)
    assert (first.status, first.reason, first.error_code) == (
        "retryable",
        "throttled",
        "TooManyRequestsException",
    )
    second = send(job, retrying)
    assert (second.status, second.message_id) == ("sent", "m-1")
    assert len(_items(resources, keys.SENT_PREFIX)) == 1


def test_account_level_errors_are_retryable_and_rejections_fail(send_ctx, store, resources):
    store.upsert("jane@example.com")
    fake = _FakeSes(
        [
            SendResult("account", error_code="SendingPausedException"),
            SendResult("rejected", error_code="MessageRejected"),
        ]
    )
    failing = SendContext(**{**send_ctx.__dict__, "ses": fake})
    job = SendJob(email="jane@example.com", template="welcome", source="onboarding")
    assert send(job, failing).reason == "account"
    outcome = send(job, failing)
    assert (outcome.status, outcome.reason) == ("failed", "rejected")
    assert _items(resources, keys.SENT_PREFIX) == []
    assert [e["reason"] for e in store.list_events("jane@example.com")] == ["rejected"]


def _claim_and_stall(send_ctx: SendContext, job: SendJob, now: datetime) -> None:
    """A worker claims ``job`` at ``now`` and never gets further (crashed or stalled)."""
    send_ctx.log.claim(
        job.email,
        job.source,
        job.step,
        send_id=send_id_for(job),
        template=job.template,
        now=int(now.timestamp()),
        lease_seconds=send_ctx.lease_seconds,
        log_until=int((now + timedelta(days=30)).timestamp()),
    )


def test_a_crashed_claim_blocks_until_its_lease_expires_then_sends(send_ctx, store, resources, outbox):
    # Given a worker that claimed the key and died before finishing
    store.upsert("jane@example.com")
    job = SendJob(email="jane@example.com", template="welcome", source="onboarding")
    now = datetime.now(UTC)
    _claim_and_stall(send_ctx, job, now)
    # When the job is retried within the lease, then it waits; after the lease it sends once
    assert send(job, send_ctx, now=now + timedelta(seconds=10)).reason == "in_flight"
    assert outbox == []
    assert send(job, send_ctx, now=now + timedelta(seconds=send_ctx.lease_seconds + 1)).status == "sent"
    assert len(outbox) == 1


def test_render_errors_fail_without_sending_or_holding_the_claim(send_ctx, store, resources, outbox):
    store.upsert("jane@example.com")
    job = SendJob(
        email="jane@example.com", template="transactional/receipt", source="purchases", transactional=True
    )
    outcome = send(job, send_ctx)  # data.order_id is missing: StrictUndefined
    assert (outcome.status, outcome.reason) == ("failed", "render_error")
    assert "order_id" in (outcome.detail or "")
    assert outbox == [] and _items(resources, keys.SEND_CLAIM_PREFIX) == []


def test_test_sends_reach_addresses_without_a_profile(send_ctx, outbox):
    outcome = send(SendJob(email="qa@example.com", template="welcome", source="test", step="t1"), send_ctx)
    assert outcome.status == "sent" and len(outbox) == 1


def test_a_worker_that_lost_its_lease_still_logs_its_send_and_does_not_take_the_claim(
    send_ctx, store, resources
):
    # Given worker A claimed, stalled past its lease, and worker B took over and sent
    store.upsert("jane@example.com")
    job = SendJob(email="jane@example.com", template="welcome", source="onboarding")
    now = datetime.now(UTC)
    _claim_and_stall(send_ctx, job, now)
    later = now + timedelta(seconds=send_ctx.lease_seconds + 1)
    taken_over = send(job, send_ctx, now=later)
    assert taken_over.status == "sent"
    # When A finally completes its own (duplicate) send
    record = SentRecord(
        email=job.email,
        source=job.source,
        step=job.step,
        send_id=send_id_for(job),
        template=job.template,
        subject="s",
        ses_message_id="late-a",
        transactional=False,
        sent_at="2026-01-01T00:00:00.000Z",
        ttl=1,
    )
    send_ctx.log.complete(record)
    # Then both sends are logged (and counted), and a redelivery sends nothing more
    assert sorted(i["ses_message_id"] for i in _items(resources, keys.SENT_PREFIX)) == sorted(
        ["late-a", taken_over.message_id]
    )
    assert fold_stream(resources).sends == 2
    assert StatsStore(resources.tables["table_name"], "-").source("onboarding").total("send") == 2
    again = send(job, send_ctx, now=later + timedelta(seconds=send_ctx.lease_seconds + 1))
    assert (again.status, again.reason) == ("skipped", "already_sent")
