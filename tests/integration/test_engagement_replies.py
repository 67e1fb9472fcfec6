"""Replies on moto: SES inbound notification -> reply event -> exit_on, idempotent.

SES replaces every Message-ID we set with ``<SES message id@email.amazonses.com>``: the sent
mail below is what the recipient got, and replies quote SES's id, never our send id."""

from __future__ import annotations

import json
from typing import Any

import pytest

from local_aws.simulate import received_notification, reply_mime
from shared.core.aws import client
from shared.engagement.replies import ReplyContext, forwarder, process_notification
from shared.engagement.ses_events import MalformedEvent
from shared.sending.sender import SendResult
from shared.sequences.engine import SequenceEngine
from shared.sequences.validate import Catalog
from shared.store.subscribers import SubscriberStore, keys
from shared.web.ingest import IngestContext, make_idempotency
from tests.integration.test_sequence_execution import sequence_from

EMAIL = "ada@example.com"
SEND_ID = "0123456789abcdef01234567"
SES_ID = "0100019a2b3c4d5e-6f7a8b9c-0d1e-4f2a-9b3c-4d5e6f7a8b9c-000000"
EXEC = "arn:aws:states:us-east-1:123456789012:execution:mailstep-seq-onboarding:r1"


def original(message_id: str = f"<{SES_ID}@email.amazonses.com>") -> bytes:
    """The sent mail as delivered: SES's Message-ID."""
    return (
        "From: Acme <hello@acme.test>\r\nTo: ada@example.com\r\nReply-To: replies@in.acme.test\r\n"
        f"Subject: Welcome\r\nMessage-ID: {message_id}\r\n\r\nHi Ada\r\n"
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


def notification(
    body: str = "Yes please, tell me more",
    inbound_id: str = "inbound-1",
    sent: bytes | None = None,
    references: str | None = None,
) -> str:
    reply = reply_mime(sent or original(), body)
    if references is not None:
        del reply["References"]
        reply["References"] = references
    record = received_notification(reply, "arn:aws:sns:us-east-1:123456789012:mailstep-inbound", inbound_id)
    return json.dumps({"Type": "Notification", "MessageId": "sns-1", "Message": json.dumps(record)})


def sent_item(
    store: SubscriberStore,
    send_id: str = SEND_ID,
    ses_id: str = SES_ID,
    template: str = "onboarding/welcome",
    at: str = "2026-01-01T10:00:00.000Z",
) -> None:
    """The SENT# item the send pipeline writes (``SendLog.complete``)."""
    store.client.put_item(TableName=store.table, Item={
        "PK": {"S": keys.sub_pk(EMAIL)},
        "SK": {"S": keys.sent_sk(at, "onboarding", send_id)},
        "send_id": {"S": send_id}, "source": {"S": "onboarding"}, "template": {"S": template},
        "step": {"S": template.rsplit("/", 1)[-1]}, "ses_message_id": {"S": ses_id}})  # fmt: skip


def replies(store: SubscriberStore) -> list[dict[str, Any]]:
    return [e for e in store.list_events(EMAIL) if e["type"] == "reply"]


def test_a_reply_quoting_the_ses_message_id_is_matched_to_its_send_and_ends_the_sequence(
    ctx: ReplyContext, store: SubscriberStore
) -> None:
    # Given a subscriber in onboarding (exit_on: [reply]) who got two mails
    store.upsert(EMAIL)
    sent_item(
        store, "other-send", "0100019a00000000-other-000000", "onboarding/tips", "2026-01-02T10:00:00.000Z"
    )
    sent_item(store)
    store.put_execution(EMAIL, "onboarding", EXEC)
    # When they answer the welcome mail (In-Reply-To: <SES id@email.amazonses.com>)
    outcome = process_notification(notification(), ctx)
    # Then the reply names that send and ends the sequence
    assert (outcome.status, outcome.matched) == ("recorded", True)
    assert store.list_executions(EMAIL) == []  # exit_on: [reply]
    (event,) = replies(store)
    assert (event["data"]["source"], event["data"]["template"]) == ("onboarding", "onboarding/welcome")
    assert (event["data"]["send_id"], event["data"]["step"]) == (SEND_ID, "welcome")
    assert event["data"]["snippet"] == "Yes please, tell me more"


def test_a_regional_ses_domain_and_a_from_domain_in_capitals_match_too(
    ctx: ReplyContext, store: SubscriberStore
) -> None:
    store.upsert(EMAIL)
    sent_item(store)
    sent = original(f"<{SES_ID}@eu-west-1.amazonses.com>").replace(
        b"To: ada@example.com", b"To: ada@Example.COM"
    )
    assert process_notification(notification(sent=sent), ctx).matched
    assert len(replies(store)) == 1  # recorded for the subscriber


@pytest.mark.parametrize(
    "quoted",
    [
        "<0100019affffffff-unknown-000000@email.amazonses.com>",  # another mail (or subscriber)
        f"<{SEND_ID}@acme.test>",  # our own Message-ID: SES replaced it, so it never comes back
        f"<{SES_ID}@mail.example.com>",  # not SES's
    ],
)
def test_a_reply_quoting_no_known_ses_id_is_an_unmatched_reply(
    ctx: ReplyContext, store: SubscriberStore, quoted: str
) -> None:
    store.upsert(EMAIL)
    sent_item(store)
    store.put_execution(EMAIL, "onboarding", EXEC)
    outcome = process_notification(notification(sent=original(quoted)), ctx)
    assert (outcome.status, outcome.matched) == ("recorded", False)
    (event,) = replies(store)
    assert "send_id" not in event["data"] and "source" not in event["data"]
    assert store.list_executions(EMAIL) == []  # still a reply: exit_on applies


def test_references_find_the_send_when_in_reply_to_names_another_message(
    ctx: ReplyContext, store: SubscriberStore
) -> None:
    # The subscriber answers a mail of their own thread (In-Reply-To is not ours);
    # References holds the chain, newest last: the newest SES id we sent wins.
    store.upsert(EMAIL)
    sent_item(store, "older-send", "0100019a00000000-older-000000", "onboarding/tips")
    sent_item(store)
    chain = (
        "<0100019a00000000-older-000000@email.amazonses.com> "
        f"<{SES_ID}@email.amazonses.com> <CAF00@mail.gmail.com>"
    )
    body = notification(sent=original("<CAF00@mail.gmail.com>"), references=chain)
    assert process_notification(body, ctx).matched
    (event,) = replies(store)
    assert event["data"]["send_id"] == SEND_ID


def test_a_redelivered_notification_has_its_effects_once(ctx: ReplyContext, store: SubscriberStore) -> None:
    forwarded: list[str] = []

    def forward(message: Any, subscriber: str) -> bool:
        forwarded.append(subscriber)
        return True

    store.upsert(EMAIL)
    sent_item(store)
    store.put_execution(EMAIL, "onboarding", EXEC)
    forwarding = ReplyContext(ingest=ctx.ingest, forward=forward)
    first = process_notification(notification(), forwarding)
    store.put_execution(EMAIL, "onboarding", EXEC + "-2")  # a new run started meanwhile
    again = process_notification(notification(), forwarding)  # SQS delivers the same message again
    assert (first.status, first.matched, first.forwarded) == ("recorded", True, True)
    assert (again.status, again.forwarded) == ("replayed", False)
    assert len(replies(store)) == 1 and forwarded == [EMAIL]
    assert [e.execution_arn for e in store.list_executions(EMAIL)] == [EXEC + "-2"]  # not stopped twice


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
