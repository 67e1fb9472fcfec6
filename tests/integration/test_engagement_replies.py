"""Replies on moto: SES inbound notification -> reply event -> exit_on, idempotent."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cli.replies_cmd import received_notification, reply_mime
from shared import keys
from shared.aws import client
from shared.ingest import IngestContext, make_idempotency
from shared.mime import message_id_for
from shared.replies import ReplyContext, forwarder, process_notification
from shared.sender import SendResult
from shared.sequences.engine import SequenceEngine
from shared.sequences.validate import Catalog
from shared.ses_events import MalformedEvent
from shared.store import SubscriberStore
from tests.integration.test_sequence_execution import sequence_from

EMAIL = "ada@example.com"
SEND_ID = "0123456789abcdef01234567"
EXEC = "arn:aws:states:us-east-1:123456789012:execution:mailstep-seq-onboarding:r1"
ORIGINAL = (
    "From: Acme <hello@acme.test>\r\nTo: ada@example.com\r\nReply-To: replies@in.acme.test\r\n"
    f"Subject: Welcome\r\nMessage-ID: {message_id_for(SEND_ID, 'hello@acme.test')}\r\n\r\nHi Ada\r\n"
).encode()


@pytest.fixture
def ctx(store: SubscriberStore) -> ReplyContext:
    sequence = sequence_from(
        "trigger: subscriber.subscribed\nexit_on: [reply]\nsteps:\n  - send: onboarding/welcome\n",
        "onboarding",
    )
    engine = SequenceEngine(catalog=Catalog(sequences={"onboarding": sequence}), arn_prefix="", store=store)
    idempotency, persistence = make_idempotency(store.table, 3600)
    return ReplyContext(
        ingest=IngestContext(
            store=store, data_ttl_days=30, idempotency=idempotency, persistence=persistence, sequences=engine
        )
    )


def notification(body: str = "Yes please, tell me more", inbound_id: str = "inbound-1") -> str:
    reply = reply_mime(ORIGINAL, body)
    record = received_notification(reply, "arn:aws:sns:us-east-1:123456789012:mailstep-inbound", inbound_id)
    return json.dumps({"Type": "Notification", "MessageId": "sns-1", "Message": json.dumps(record)})


def sent_item(store: SubscriberStore) -> None:
    store.client.put_item(TableName=store.table, Item={
        "PK": {"S": keys.sub_pk(EMAIL)},
        "SK": {"S": keys.sent_sk("2026-01-01T10:00:00.000Z", "onboarding", SEND_ID)},
        "send_id": {"S": SEND_ID}, "source": {"S": "onboarding"}, "template": {"S": "onboarding/welcome"},
        "step": {"S": "welcome"}, "ses_message_id": {"S": "ses-1"}})  # fmt: skip


def test_a_reply_is_matched_to_its_send_recorded_once_and_ends_the_sequence(
    ctx: ReplyContext, store: SubscriberStore
) -> None:
    store.upsert(EMAIL)
    sent_item(store)
    store.put_execution(EMAIL, "onboarding", EXEC)
    first = process_notification(notification(), ctx)
    assert (first.status, first.matched) == ("recorded", True)
    assert store.list_executions(EMAIL) == []  # exit_on: [reply]
    (event,) = [e for e in store.list_events(EMAIL) if e["type"] == "reply"]
    assert event["data"]["source"] == "onboarding" and event["data"]["send_id"] == SEND_ID
    assert event["data"]["snippet"] == "Yes please, tell me more"
    again = process_notification(notification(), ctx)  # SQS redelivery
    assert again.status == "replayed"
    assert len([e for e in store.list_events(EMAIL) if e["type"] == "reply"]) == 1


def test_an_unmatched_reply_of_a_subscriber_is_still_a_reply(
    ctx: ReplyContext, store: SubscriberStore
) -> None:
    store.upsert(EMAIL)
    outcome = process_notification(notification(), ctx)
    assert (outcome.status, outcome.matched) == ("recorded", False)


def test_mail_from_strangers_creates_no_subscriber(ctx: ReplyContext, store: SubscriberStore) -> None:
    assert process_notification(notification(), ctx).reason == "not_a_subscriber"
    assert store.get_profile(EMAIL) is None


def test_the_s3_action_reads_the_stored_message(ctx: ReplyContext, store: SubscriberStore) -> None:
    store.upsert(EMAIL)
    sent_item(store)
    record = json.loads(json.loads(notification())["Message"])
    s3 = client("s3")
    s3.create_bucket(Bucket="mailstep-inbound-test")
    s3.put_object(Bucket="mailstep-inbound-test", Key="inbound/abc", Body=record.pop("content").encode())
    record["receipt"]["action"] = {
        "type": "S3",
        "topicArn": "arn:x",
        "bucketName": "mailstep-inbound-test",
        "objectKey": "inbound/abc",
    }
    assert process_notification(json.dumps(record), ctx).matched


@pytest.mark.parametrize(
    "body",
    [
        "{nope",
        json.dumps({"notificationType": "Bounce", "mail": {}}),
        json.dumps({"notificationType": "Received", "mail": {}, "receipt": {}}),
    ],
)
def test_notifications_that_are_not_inbound_mail_raise(ctx: ReplyContext, body: str) -> None:
    with pytest.raises(MalformedEvent):
        process_notification(body, ctx)


def test_forwarding_sends_from_our_address_with_reply_to_the_subscriber(
    ctx: ReplyContext, store: SubscriberStore
) -> None:
    sent: list[dict[str, Any]] = []

    class Sender:
        def send_raw(self, raw: bytes, **kwargs: Any) -> SendResult:
            sent.append({"raw": raw, **kwargs})
            return SendResult("sent", message_id="fwd-1")

    store.upsert(EMAIL)
    forwarding = ReplyContext(
        ingest=ctx.ingest, forward=forwarder(Sender(), "team@acme.test", "Acme <hello@acme.test>")
    )
    assert process_notification(notification(), forwarding).forwarded
    (mail,) = sent
    assert mail["to_email"] == "team@acme.test" and mail["from_email"] == "hello@acme.test"
    assert b"Reply-To: ada@example.com" in mail["raw"] and b"tell me more" in mail["raw"]
