"""``mailstep local reply <message-id> --body TEXT``: the subscriber answers a sent mail.

Builds the reply MIME (``In-Reply-To``/``References`` naming the original ``Message-ID``)
and publishes it as SES inbound does with an SNS receipt action: a ``Received``
notification with the content inline, to the inbound topic of the running runtime.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from email import message_from_bytes, policy
from email.message import EmailMessage
from email.utils import formatdate, make_msgid, parseaddr
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from cli.local_cmd import STATE_DIR, TARGET, find_message

console = Console()
app = typer.Typer(help="Replies in the local runtime.")


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


def publish_reply(state_dir: Path, target: str, body: str) -> dict[str, Any]:
    from cli.target import local
    from local_aws.ses_events import feedback_id
    from ops.targets import read_state
    from shared.core import specs

    state = read_state(state_dir)
    message = find_message(Path(state["outbox"]), target)
    eml = Path(state["outbox"]) / f"{message['message_id']}.eml"
    sns = local(state_dir).client("sns")  # the running runtime's
    topics = [t["TopicArn"] for t in sns.list_topics()["Topics"]]
    topic = next((t for t in topics if t.rsplit(":", 1)[-1] == specs.INBOUND_TOPIC.local_name), None)
    if topic is None:
        raise typer.BadParameter("the running runtime has no inbound topic")
    reply = reply_mime(eml.read_bytes(), body)
    inbound_id = feedback_id()
    sns.publish(TopicArn=topic, Message=json.dumps(received_notification(reply, topic, inbound_id)))
    return {
        "in_reply_to": message["message_id"],
        "from": str(reply["From"]),
        "inbound_message_id": inbound_id,
    }


@app.command()
def reply(
    target: str = TARGET,
    body: str = typer.Option("Thanks!", "--body", help="The reply's text."),
    state_dir: Path = STATE_DIR,
) -> None:
    """Reply to a sent message as its recipient (SES inbound, through SNS)."""
    result = publish_reply(state_dir.resolve(), target, body)
    console.print(f"published a reply from {result['from']} to {result['in_reply_to']}")


if __name__ == "__main__":
    app()
