"""SES event-publishing records, in the JSON format SES publishes to SNS.

Reference: "Contents of event data that Amazon SES publishes to Amazon SNS" and its
examples (eventType, mail, send/delivery/bounce/complaint/open/click objects). Pure
functions: used by the emulated SES when a message is sent and by
``mailstep local open|click|bounce|complain`` to generate engagement later.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from email.message import Message
from email.utils import getaddresses, parseaddr
from typing import Any

SIMULATOR_DOMAIN = "simulator.amazonses.com"
DELIVERED, BOUNCED, COMPLAINED, SUPPRESSED = "delivered", "bounced", "complained", "suppressed"
REPORTING_MTA = "a8-70.smtp-out.amazonses.com"
SOURCE_IP = "127.0.0.1"
USER_AGENT = "Mozilla/5.0 (mailstep local runtime)"

# SES v2 EventType (configuration set destinations) -> eventType in the published record.
EVENT_TYPES = {
    "SEND": "Send",
    "REJECT": "Reject",
    "BOUNCE": "Bounce",
    "COMPLAINT": "Complaint",
    "DELIVERY": "Delivery",
    "OPEN": "Open",
    "CLICK": "Click",
    "RENDERING_FAILURE": "Rendering Failure",
    "DELIVERY_DELAY": "DeliveryDelay",
    "SUBSCRIPTION": "Subscription",
}


# The local runtime's calendar: how far its days are ahead of the wall clock (``mailstep local
# advance``, local_aws.clock.VirtualClock.calendar_offset_s). SES stamps its events with the
# time they happen; here that is the runtime's calendar, so that a reader's open after an
# advance comes after what the advance did (docs/local-runtime.md).
CALENDAR = {"offset_s": 0.0}


def now() -> datetime:
    """The local runtime's calendar now: the wall clock plus the days it was advanced."""
    return datetime.now(UTC) + timedelta(seconds=CALENDAR["offset_s"])


def iso(moment: datetime | None = None) -> str:
    moment = moment or now()
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def feedback_id() -> str:
    return f"{int(datetime.now(UTC).timestamp() * 1000):016x}-{uuid.uuid4()}-000000"


def simulated_outcome(recipient: str) -> str:
    """What the SES mailbox simulator does with ``recipient`` (anyone else is delivered)."""
    local, _, domain = parseaddr(recipient)[1].lower().partition("@")
    if domain != SIMULATOR_DOMAIN:
        return DELIVERED
    local = local.split("+", 1)[0]  # the simulator accepts labels: bounce+label@...
    return {"bounce": BOUNCED, "complaint": COMPLAINED, "suppressionlist": SUPPRESSED}.get(local, DELIVERED)


def _addresses(message: Message, header: str) -> list[str]:
    values = message.get_all(header) or []
    return [str(v) for v in values]


def mail_object(
    *,
    message_id: str,
    timestamp: str,
    source: str,
    destination: list[str],
    message: Message,
    configuration_set: str | None,
    email_tags: dict[str, str],
    account_id: str,
    region: str,
) -> dict[str, Any]:
    """The ``mail`` object common to every event of one message."""
    from_domain = parseaddr(source)[1].rpartition("@")[2].lower()
    common: dict[str, Any] = {
        "from": _addresses(message, "From") or [source],
        "date": message.get("Date", ""),
        "to": [addr for _, addr in getaddresses(_addresses(message, "To"))] or destination,
        "messageId": message_id,
        "subject": message.get("Subject", ""),
    }
    if message.get_all("Cc"):
        common["cc"] = _addresses(message, "Cc")
    if message.get_all("Reply-To"):
        common["replyTo"] = _addresses(message, "Reply-To")
    tags: dict[str, list[str]] = {
        "ses:operation": ["SendEmail"],
        "ses:source-ip": [SOURCE_IP],
        "ses:from-domain": [from_domain],
        "ses:caller-identity": ["mailstep-local"],
    }
    if configuration_set:
        tags["ses:configuration-set"] = [configuration_set]
    tags.update({name: [value] for name, value in email_tags.items()})
    return {
        "timestamp": timestamp,
        "source": source,
        "sourceArn": f"arn:aws:ses:{region}:{account_id}:identity/{from_domain}",
        "sendingAccountId": account_id,
        "messageId": message_id,
        "destination": destination,
        "headersTruncated": False,
        "headers": [{"name": name, "value": str(value)} for name, value in message.items()],
        "commonHeaders": common,
        "tags": tags,
    }


def send_event(mail: dict[str, Any]) -> dict[str, Any]:
    return {"eventType": "Send", "mail": mail, "send": {}}


def delivery_event(mail: dict[str, Any], recipients: list[str], at: str | None = None) -> dict[str, Any]:
    return {
        "eventType": "Delivery",
        "mail": mail,
        "delivery": {
            "timestamp": at or iso(),
            "processingTimeMillis": 42,
            "recipients": recipients,
            "smtpResponse": "250 2.6.0 Message received",
            "reportingMTA": REPORTING_MTA,
        },
    }


def bounce_event(
    mail: dict[str, Any],
    recipients: list[str],
    *,
    bounce_type: str = "Permanent",
    sub_type: str = "General",
    at: str | None = None,
) -> dict[str, Any]:
    if sub_type == "OnAccountSuppressionList":
        diagnostic = (
            "Amazon SES did not send the message to this address because it is on the suppression list "
            "for your account."
        )
        bounced = [
            {"emailAddress": r, "action": "failed", "status": "5.1.1", "diagnosticCode": diagnostic}
            for r in recipients
        ]
    elif bounce_type == "Transient":
        bounced = [
            {
                "emailAddress": r,
                "action": "failed",
                "status": "4.2.2",
                "diagnosticCode": "smtp; 452 4.2.2 mailbox full",
            }
            for r in recipients
        ]
    else:
        bounced = [
            {
                "emailAddress": r,
                "action": "failed",
                "status": "5.1.1",
                "diagnosticCode": "smtp; 550 5.1.1 user unknown",
            }
            for r in recipients
        ]
    return {
        "eventType": "Bounce",
        "mail": mail,
        "bounce": {
            "bounceType": bounce_type,
            "bounceSubType": sub_type,
            "bouncedRecipients": bounced,
            "timestamp": at or iso(),
            "feedbackId": feedback_id(),
            "reportingMTA": f"dsn; {REPORTING_MTA}",
        },
    }


def complaint_event(mail: dict[str, Any], recipients: list[str], at: str | None = None) -> dict[str, Any]:
    moment = at or iso()
    return {
        "eventType": "Complaint",
        "mail": mail,
        "complaint": {
            "feedbackId": feedback_id(),
            "complaintSubType": None,
            "complainedRecipients": [{"emailAddress": r} for r in recipients],
            "timestamp": moment,
            "userAgent": "Amazon SES Mailbox Simulator",
            "complaintFeedbackType": "abuse",
            "arrivalDate": moment,
        },
    }


def open_event(mail: dict[str, Any], at: str | None = None, user_agent: str = USER_AGENT) -> dict[str, Any]:
    return {
        "eventType": "Open",
        "mail": mail,
        "open": {"ipAddress": SOURCE_IP, "timestamp": at or iso(), "userAgent": user_agent},
    }


def click_event(mail: dict[str, Any], link: str, at: str | None = None) -> dict[str, Any]:
    return {
        "eventType": "Click",
        "mail": mail,
        "click": {
            "ipAddress": SOURCE_IP,
            "timestamp": at or iso(),
            "userAgent": USER_AGENT,
            "link": link,
            "linkTags": {},
        },
    }


def destination_event_type(record: dict[str, Any]) -> str:
    """The SES v2 EventType (``BOUNCE``...) a record is published under."""
    for api_name, event_type in EVENT_TYPES.items():
        if event_type == record["eventType"]:
            return api_name
    raise ValueError(f"unknown SES event type {record['eventType']!r}")
