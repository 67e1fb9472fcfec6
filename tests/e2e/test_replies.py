"""Replies on the local runtime: SES gives every sent mail its own Message-ID, the subscriber's
reply quotes it, and the inbound function finds the send by that SES message id.

The path: a sequence step sends -> local SES (``Message-ID: <SES id@email.amazonses.com>``,
ours is dropped as SES drops it) -> the send log keeps the SES id -> `mailstep local reply`
(or any SES inbound notification) -> SNS -> inbound queue -> inbound function -> reply event.
"""

from __future__ import annotations

import json
import uuid
from email.utils import parseaddr
from typing import Any

from local_aws.simulate import received_notification, reply_mime
from shared.core import specs
from shared.store.send_log import SendLog
from tests.e2e.conftest import Local
from tests.e2e.helpers import MAIN, eml, events_of, eventually, item, mails, paused_clock, post, unique_email


def welcome_mail(local: Local, email: str) -> dict[str, Any]:
    """Start onboarding for ``email`` and return the outbox metadata of its first mail. The
    clock stays paused until the test ends, so onboarding sends nothing else meanwhile."""
    (started,) = post(local, {"type": "subscriber.subscribed", "email": email, "id": f"s-{email}"})
    assert started["sequences_started"] == ["onboarding"]
    (meta,) = eventually(lambda: mails(local, {email})[email], what="the welcome mail")
    return meta


def replies_of(local: Local, email: str) -> list[dict[str, Any]]:
    return eventually(lambda: [e for e in events_of(local, email) if e["type"] == "reply"], what="the reply")


def test_a_reply_to_a_sequence_mail_quotes_ses_s_message_id_and_is_matched_to_its_send(local: Local) -> None:
    email = unique_email("replier")
    assert local.state["region"] == "us-east-1"  # SES's domain there: email.amazonses.com
    with paused_clock(local):
        # Given the welcome mail onboarding sent
        meta = welcome_mail(local, email)
        sent = eml(local, meta)
        ses_id = meta["message_id"]  # what SendEmail returned and SES events carry
        # Then it carries SES's Message-ID (ours, <send id@acme...>, is gone) ...
        assert sent.get_all("Message-ID") == [f"<{ses_id}@email.amazonses.com>"]
        send_id = str(sent["X-Mailstep-Send-Id"])
        assert send_id not in str(sent["Message-ID"])
        # ... and the send log keeps that SES id for the send
        log = SendLog(MAIN, client=local.client("dynamodb"))
        (logged,) = eventually(lambda: list(log.entries(email)), what="the send log")
        assert (logged["ses_message_id"], logged["send_id"]) == (ses_id, send_id)
        # When the subscriber replies (their client quotes the Message-ID they received)
        raw = (local.outbox / f"{ses_id}.eml").read_bytes()
        assert reply_mime(raw, "x")["In-Reply-To"] == f"<{ses_id}@email.amazonses.com>"
        answered = local.cli(
            "local", "reply", ses_id, "--body", "Yes, tell me more", "--state-dir", str(local.state_dir)
        )
        assert answered.returncode == 0, answered.stdout + answered.stderr
        # Then the reply event names the send it answers
        (reply,) = replies_of(local, email)
        # ... and, as onboarding has `exit_on: [reply]`, the reply ends its execution
        eventually(
            lambda: item(local, f"SUB#{email}", "EXEC#onboarding") is None,
            what="the onboarding execution to stop",
        )
    data = reply["data"]
    assert (data["source"], data["template"]) == ("onboarding", "onboarding/welcome")
    assert (data["send_id"], data["step"]) == (send_id, logged["step"])
    assert data["snippet"] == "Yes, tell me more"


def test_references_find_the_send_when_in_reply_to_is_not_an_ses_id(local: Local) -> None:
    email = unique_email("threaded")
    with paused_clock(local):
        meta = welcome_mail(local, email)
        sent = eml(local, meta)
        ses_message_id = str(sent["Message-ID"])
        # The subscriber answers a later message of the thread (In-Reply-To: not ours; our own
        # Message-ID form never comes back from SES mail either): References holds SES's id.
        reply = reply_mime((local.outbox / f"{meta['message_id']}.eml").read_bytes(), "Count me in")
        del reply["In-Reply-To"], reply["References"]
        own = f"<{sent['X-Mailstep-Send-Id']}@{parseaddr(str(sent['From']))[1].rpartition('@')[2]}>"
        reply["In-Reply-To"] = own
        reply["References"] = f"{ses_message_id} <CAF{uuid.uuid4().hex}@mail.gmail.com> {own}"
        sns = local.client("sns")
        topic = next(
            t["TopicArn"]
            for t in sns.list_topics()["Topics"]
            if t["TopicArn"].rsplit(":", 1)[-1] == specs.INBOUND_TOPIC.local_name
        )
        record = received_notification(reply, topic, f"inbound-{uuid.uuid4().hex}")
        sns.publish(TopicArn=topic, Message=json.dumps(record))
        (event,) = replies_of(local, email)
    assert (event["data"]["source"], event["data"]["template"]) == ("onboarding", "onboarding/welcome")
    assert event["data"]["send_id"] == str(sent["X-Mailstep-Send-Id"])
