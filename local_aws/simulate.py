"""What a subscriber's mailbox would do to a mail of the running runtime's outbox, made by hand:
open it, click it, bounce it, complain about it, answer it (``mailstep local ...``, ``mailstep
replies reply`` and the e2e tests).

Engagement events are built in the SES event-publishing format (``local_aws.ses_events``) and
published by the runtime's SES to the SNS topics of the message's configuration set, through its
control endpoint, exactly as SES would publish them; a reply is SES inbound's ``Received``
notification of an SNS receipt action, published to the runtime's inbound topic. No moto here:
the commands that call this run without it (``tests/unit/test_cli_main.py``).

A problem the caller can fix (no such message, no configuration set, no hidden link) is an
:class:`shared.core.errors.InvalidInput`.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from email import message_from_bytes, policy
from email.message import EmailMessage
from email.utils import formatdate, make_msgid, parseaddr
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shared.core.errors import InvalidInput

if TYPE_CHECKING:
    from mypy_boto3_sns import SNSClient

# A person's click comes after they read the mail: at least this long after it was sent (a
# click within seconds of delivery is a security scanner's, docs/hygiene.md).
PERSON_CLICK_DELAY_S = 60
SCANNER_CLICK_DELAY_S = 1  # --scanner: the gateway follows the link as the mail arrives


def find_message(outbox: Path, target: str) -> dict[str, Any]:
    """The outbox metadata of ``target``: an SES message id, or a recipient (their latest)."""
    from ops.outbox import read_outbox

    direct = outbox / f"{target}.json"
    if direct.exists():
        return dict(json.loads(direct.read_text()))
    wanted = target.strip().lower()
    matches = [m for m in read_outbox(outbox) if wanted in (d.lower() for d in m["destination"])]
    if not matches:
        raise InvalidInput(f"no message for {target!r} in {outbox}")
    return matches[-1]


def post_control(state_dir: Path, path: str, body: dict[str, Any], timeout: float = 30) -> dict[str, Any]:
    """POST ``body`` to the running runtime's control endpoint ``path``; its JSON answer."""
    import urllib.request

    from ops.targets import read_state

    state = read_state(state_dir.resolve())
    request = urllib.request.Request(  # noqa: S310 - the local runtime's control endpoint
        state["api_url"] + path,
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310
        return dict(json.loads(answer.read()))


def hidden_link(outbox: Path, message_id: str) -> str:
    """The URL of the hidden link of a sent message (marketing mail: the layout's anchor)."""
    from shared.core.models import HIDDEN_LINK_PATH

    message = message_from_bytes((outbox / f"{message_id}.eml").read_bytes(), policy=policy.default)
    part = message.get_body(preferencelist=("html",))  # type: ignore[attr-defined]
    text = part.get_content() if part is not None else ""
    found = re.search(r'href="([^"]*' + re.escape(HIDDEN_LINK_PATH) + ')"', text)
    if not found:
        raise InvalidInput("the message has no hidden link (transactional mail has none)")
    return found.group(1)


def click_time(mail: dict[str, Any], *, scanner: bool) -> str:
    from local_aws import ses_events as ev
    from shared.core.clock import parse_iso

    sent = parse_iso(str(mail["timestamp"]))
    if scanner:
        return ev.iso(sent + timedelta(seconds=SCANNER_CLICK_DELAY_S))
    return ev.iso(max(ev.now(), sent + timedelta(seconds=PERSON_CLICK_DELAY_S)))


def publish_event(
    state_dir: Path,
    target: str,
    kind: str,
    link: str | None = None,  # a click's URL (None: https://example.com/)
    *,
    soft: bool = False,
    mpp: bool = False,  # an open by Apple Mail Privacy Protection's prefetch (a machine open)
    scanner: bool = False,
    hidden: bool = False,
) -> dict[str, Any]:
    """Build the record for ``kind`` and publish it to the configuration set's destinations."""
    from local_aws import ses_events as ev
    from ops.targets import calendar_offset, read_state

    state = read_state(state_dir)
    ev.CALENDAR["offset_s"] = calendar_offset(state["api_url"])  # SES stamps events with the runtime's time
    message = find_message(Path(state["outbox"]), target)
    mail = message["mail"]
    recipients = message["destination"]
    if kind == "open":
        from shared.engagement.machine import MPP_USER_AGENT

        record = ev.open_event(mail, user_agent=MPP_USER_AGENT) if mpp else ev.open_event(mail)
    elif kind == "click":
        if hidden:
            link = hidden_link(Path(state["outbox"]), message["message_id"])
        at = click_time(mail, scanner=scanner or hidden)
        record = ev.click_event(mail, link or "https://example.com/", at=at)
    elif kind == "bounce" and soft:
        record = ev.bounce_event(mail, recipients, bounce_type="Transient", sub_type="MailboxFull")
    elif kind == "bounce":
        record = ev.bounce_event(mail, recipients)
    else:
        record = ev.complaint_event(mail, recipients)
    if not message.get("configuration_set"):
        raise InvalidInput("the message was sent without a configuration set: SES publishes no events")
    # published by the runtime's SES, as its own events are: its reputation monitor counts it
    published = post_control(state_dir, "/_local/ses/events", {"record": record})
    return {"message_id": message["message_id"], "event": record["eventType"], "topics": published["topics"]}


def reply_mime(original: bytes, body: str) -> EmailMessage:
    """The subscriber's answer to ``original`` (the .eml from the outbox)."""
    sent = message_from_bytes(original, policy=policy.default)
    _, subscriber = parseaddr(str(sent.get("To", "")))
    _, answer_to = parseaddr(str(sent.get("Reply-To") or sent.get("From", "")))
    message_id = str(sent.get("Message-ID", "")).strip()
    reply = EmailMessage()
    reply["From"] = subscriber
    reply["To"] = answer_to
    reply["Subject"] = "Re: " + str(sent.get("Subject", ""))
    reply["Date"] = formatdate(usegmt=True)
    reply["Message-ID"] = make_msgid(domain=subscriber.rpartition("@")[2] or "localhost")
    if message_id:
        reply["In-Reply-To"] = message_id
        reply["References"] = message_id
    reply.set_content(body)
    return reply


def received_notification(reply: EmailMessage, topic_arn: str, message_id: str) -> dict[str, Any]:
    """SES inbound's notification for an SNS receipt action (content inline, UTF8)."""
    now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    _, sender = parseaddr(str(reply["From"]))
    _, recipient = parseaddr(str(reply["To"]))
    headers = [{"name": k, "value": str(v)} for k, v in reply.items()]
    return {
        "notificationType": "Received",
        "mail": {
            "timestamp": now,
            "source": sender,
            "messageId": message_id,
            "destination": [recipient],
            "headersTruncated": False,
            "headers": headers,
            "commonHeaders": {
                "returnPath": sender,
                "from": [str(reply["From"])],
                "date": str(reply["Date"]),
                "to": [str(reply["To"])],
                "messageId": str(reply["Message-ID"]),
                "subject": str(reply["Subject"]),
            },
        },
        "receipt": {
            "timestamp": now,
            "processingTimeMillis": 17,
            "recipients": [recipient],
            "spamVerdict": {"status": "PASS"},
            "virusVerdict": {"status": "PASS"},
            "spfVerdict": {"status": "PASS"},
            "dkimVerdict": {"status": "PASS"},
            "dmarcVerdict": {"status": "PASS"},
            "action": {"type": "SNS", "topicArn": topic_arn, "encoding": "UTF8"},
        },
        "content": reply.as_string(),
    }


def publish_reply(state_dir: Path, target: str, body: str, sns: SNSClient) -> dict[str, Any]:
    """The recipient of ``target`` answers it with ``body``: SES inbound's notification, published
    to the inbound topic with ``sns`` (a client of the running runtime)."""
    from local_aws.ses_events import feedback_id
    from ops.targets import read_state
    from shared.core import specs

    state = read_state(state_dir)
    message = find_message(Path(state["outbox"]), target)
    eml = Path(state["outbox"]) / f"{message['message_id']}.eml"
    topics = [t["TopicArn"] for t in sns.list_topics()["Topics"]]
    topic = next((t for t in topics if t.rsplit(":", 1)[-1] == specs.INBOUND_TOPIC.local_name), None)
    if topic is None:
        raise InvalidInput("the running runtime has no inbound topic")
    reply = reply_mime(eml.read_bytes(), body)
    inbound_id = feedback_id()
    sns.publish(TopicArn=topic, Message=json.dumps(received_notification(reply, topic, inbound_id)))
    return {
        "in_reply_to": message["message_id"],
        "from": str(reply["From"]),
        "inbound_message_id": inbound_id,
    }
