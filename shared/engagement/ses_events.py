"""Typed parsing of the records SES publishes for a configuration set (event publishing).

Reference: "Contents of event data that Amazon SES publishes to Amazon SNS" and its
examples. Every record has ``eventType`` (``notificationType`` for identity feedback
notifications) and a ``mail`` object; exactly one type-specific object carries the rest:

========================  =================  ====================================
eventType                 object             mailstep type
========================  =================  ====================================
Send                      ``send``           ``send``
Reject                    ``reject``         ``reject``
Bounce                    ``bounce``         ``bounce``
Complaint                 ``complaint``      ``complaint``
Delivery                  ``delivery``       ``delivery``
Open                      ``open``           ``open``
Click                     ``click``          ``click``
Rendering Failure         ``failure``        ``rendering_failure``
DeliveryDelay             ``deliveryDelay``  ``delivery_delay``
Subscription              ``subscription``   ``subscription``
========================  =================  ====================================

A record arrives inside an SNS envelope (``{"Type": "Notification", "MessageId": ...,
"Message": "<the record as a JSON string>"}``, the SQS body of a subscription without raw
message delivery) or raw. :func:`parse_body` accepts both. Bad JSON, a missing or invalid
``mail`` object or a malformed type object raise :class:`MalformedEvent`; an event type
this module does not know parses with ``kind = None`` (the consumer acknowledges it).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shared.core import clock
from shared.core.errors import InvalidInput


class MalformedEvent(InvalidInput):
    """The record is not an SES event record (bad JSON, no ``mail``, wrong shapes)."""


class _Model(BaseModel):
    # SES adds fields over time: keep what we do not model instead of failing on it.
    model_config = ConfigDict(extra="allow", populate_by_name=True, frozen=True)


class Header(_Model):
    name: str
    value: str


class CommonHeaders(_Model):
    from_: list[str] = Field(default_factory=list, alias="from")
    to: list[str] = Field(default_factory=list)
    message_id: str | None = Field(default=None, alias="messageId")
    subject: str | None = None
    date: str | None = None


class Mail(_Model):
    timestamp: str
    message_id: str = Field(alias="messageId", min_length=1)
    source: str = ""
    source_arn: str | None = Field(default=None, alias="sourceArn")
    sending_account_id: str | None = Field(default=None, alias="sendingAccountId")
    destination: list[str] = Field(default_factory=list)
    headers_truncated: bool | None = Field(default=None, alias="headersTruncated")
    headers: list[Header] = Field(default_factory=list)
    common_headers: CommonHeaders | None = Field(default=None, alias="commonHeaders")
    tags: dict[str, list[str]] = Field(default_factory=dict)

    def tag(self, name: str) -> str | None:
        values = self.tags.get(name) or []
        return values[0] if values else None

    def header(self, name: str) -> str | None:
        wanted = name.lower()
        return next((h.value for h in self.headers if h.name.lower() == wanted), None)


class Recipient(_Model):
    email_address: str = Field(alias="emailAddress")
    action: str | None = None
    status: str | None = None
    diagnostic_code: str | None = Field(default=None, alias="diagnosticCode")


class Bounce(_Model):
    bounce_type: str = Field(alias="bounceType")  # Permanent | Transient | Undetermined
    bounce_sub_type: str = Field(default="", alias="bounceSubType")
    bounced_recipients: list[Recipient] = Field(default_factory=list, alias="bouncedRecipients")
    timestamp: str | None = None
    feedback_id: str | None = Field(default=None, alias="feedbackId")
    reporting_mta: str | None = Field(default=None, alias="reportingMTA")


class Complaint(_Model):
    complained_recipients: list[Recipient] = Field(default_factory=list, alias="complainedRecipients")
    timestamp: str | None = None
    feedback_id: str | None = Field(default=None, alias="feedbackId")
    complaint_sub_type: str | None = Field(default=None, alias="complaintSubType")
    complaint_feedback_type: str | None = Field(default=None, alias="complaintFeedbackType")
    user_agent: str | None = Field(default=None, alias="userAgent")
    arrival_date: str | None = Field(default=None, alias="arrivalDate")


class Delivery(_Model):
    timestamp: str | None = None
    processing_time_millis: int | None = Field(default=None, alias="processingTimeMillis")
    recipients: list[str] = Field(default_factory=list)
    smtp_response: str | None = Field(default=None, alias="smtpResponse")
    reporting_mta: str | None = Field(default=None, alias="reportingMTA")


class Send(_Model):
    pass


class Reject(_Model):
    reason: str = ""


class Open(_Model):
    timestamp: str | None = None
    ip_address: str | None = Field(default=None, alias="ipAddress")
    user_agent: str | None = Field(default=None, alias="userAgent")


class Click(_Model):
    timestamp: str | None = None
    ip_address: str | None = Field(default=None, alias="ipAddress")
    user_agent: str | None = Field(default=None, alias="userAgent")
    link: str = ""
    link_tags: dict[str, list[str]] | None = Field(default=None, alias="linkTags")


class RenderingFailure(_Model):
    error_message: str = Field(default="", alias="errorMessage")
    template_name: str | None = Field(default=None, alias="templateName")


class DeliveryDelay(_Model):
    timestamp: str | None = None
    delay_type: str = Field(default="", alias="delayType")
    expiration_time: str | None = Field(default=None, alias="expirationTime")
    delayed_recipients: list[Recipient] = Field(default_factory=list, alias="delayedRecipients")
    reporting_mta: str | None = Field(default=None, alias="reportingMTA")


class TopicPreferences(_Model):
    unsubscribe_all: bool = Field(default=False, alias="unsubscribeAll")
    topic_subscription_status: list[dict[str, Any]] = Field(
        default_factory=list, alias="topicSubscriptionStatus"
    )
    topic_default_subscription_status: list[dict[str, Any]] = Field(
        default_factory=list, alias="topicDefaultSubscriptionStatus"
    )


class Subscription(_Model):
    contact_list: str | None = Field(default=None, alias="contactList")
    timestamp: str | None = None
    source: str | None = None
    new_topic_preferences: TopicPreferences | None = Field(default=None, alias="newTopicPreferences")
    old_topic_preferences: TopicPreferences | None = Field(default=None, alias="oldTopicPreferences")


# eventType -> (field holding the type object, its model, mailstep's event type)
EVENT_TYPES: dict[str, tuple[str, type[_Model], str]] = {
    "Send": ("send", Send, "send"),
    "Reject": ("reject", Reject, "reject"),
    "Bounce": ("bounce", Bounce, "bounce"),
    "Complaint": ("complaint", Complaint, "complaint"),
    "Delivery": ("delivery", Delivery, "delivery"),
    "Open": ("open", Open, "open"),
    "Click": ("click", Click, "click"),
    "Rendering Failure": ("failure", RenderingFailure, "rendering_failure"),
    "DeliveryDelay": ("deliveryDelay", DeliveryDelay, "delivery_delay"),
    "Subscription": ("subscription", Subscription, "subscription"),
}
KINDS = tuple(kind for _, _, kind in EVENT_TYPES.values())


class SesEvent(BaseModel):
    """One parsed record. ``kind`` is None for an event type SES added after this module."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    event_type: str
    kind: str | None
    mail: Mail
    detail: Any = None  # the type object (Bounce, Complaint, ...) or None
    raw_detail: dict[str, Any] = Field(default_factory=dict)
    sns_message_id: str | None = None

    @property
    def timestamp(self) -> str:
        """When it happened: the type object's timestamp, else the mail's (Send, Reject...)."""
        value = getattr(self.detail, "timestamp", None) or self.mail.timestamp
        return iso_timestamp(value)

    def recipients(self) -> list[str]:
        """The addresses this event is about (bounce/complaint/delay/delivery name them)."""
        detail = self.detail
        if isinstance(detail, Bounce):
            named = [r.email_address for r in detail.bounced_recipients]
        elif isinstance(detail, Complaint):
            named = [r.email_address for r in detail.complained_recipients]
        elif isinstance(detail, DeliveryDelay):
            named = [r.email_address for r in detail.delayed_recipients]
        elif isinstance(detail, Delivery):
            named = list(detail.recipients)
        else:
            named = []
        return named or list(self.mail.destination)

    def identity(self, recipient: str) -> str:
        """Deterministic id of (this SES event, one recipient): the same record delivered
        again, by SQS or by SNS under another MessageId, gets the same id."""
        body = json.dumps(
            [self.event_type, self.mail.message_id, recipient.lower(), self.raw_detail],
            sort_keys=True,
            separators=(",", ":"),
        )
        return hashlib.sha256(body.encode()).hexdigest()

    @property
    def permanent_bounce(self) -> bool:
        return isinstance(self.detail, Bounce) and self.detail.bounce_type == "Permanent"

    @property
    def transient_bounce(self) -> bool:
        return isinstance(self.detail, Bounce) and self.detail.bounce_type == "Transient"


def iso_timestamp(value: str) -> str:
    """SES timestamps -> ``YYYY-MM-DDTHH:MM:SS.mmmZ`` (UTC), so event sort keys sort by time."""
    try:
        moment = clock.parse_iso(value)
    except (TypeError, ValueError) as exc:
        raise MalformedEvent(f"not an ISO 8601 timestamp: {str(value)[:40]!r}") from exc
    return clock.iso(moment)


def unwrap(body: str | bytes | dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The SES record and the SNS MessageId (None when the record came raw)."""
    try:
        data = json.loads(body) if isinstance(body, str | bytes) else body
    except (TypeError, ValueError) as exc:
        raise MalformedEvent("the record body is not JSON") from exc
    if not isinstance(data, dict):
        raise MalformedEvent("the record body is not a JSON object")
    if data.get("Type") == "Notification" and "Message" in data:
        message = data["Message"]
        try:
            inner = json.loads(message) if isinstance(message, str) else message
        except ValueError as exc:
            raise MalformedEvent("the SNS Message is not JSON") from exc
        if not isinstance(inner, dict):
            raise MalformedEvent("the SNS Message is not a JSON object")
        return inner, str(data.get("MessageId") or "") or None
    return data, None


def parse_record(record: dict[str, Any], sns_message_id: str | None = None) -> SesEvent:
    event_type = record.get("eventType") or record.get("notificationType")
    if not isinstance(event_type, str) or not event_type:
        raise MalformedEvent("no eventType in the record")
    if not isinstance(record.get("mail"), dict):
        raise MalformedEvent("no mail object in the record")
    try:
        mail = Mail.model_validate(record["mail"])
    except ValidationError as exc:
        raise MalformedEvent(f"invalid mail object: {_first_error(exc)}") from None
    known = EVENT_TYPES.get(event_type)
    if known is None:
        return SesEvent(event_type=event_type, kind=None, mail=mail, sns_message_id=sns_message_id)
    field, model, kind = known
    raw = record.get(field)
    if raw is None and field == "send":
        raw = {}
    if not isinstance(raw, dict):
        raise MalformedEvent(f"{event_type} record without its {field!r} object")
    try:
        detail = model.model_validate(raw)
    except ValidationError as exc:
        raise MalformedEvent(f"invalid {field} object: {_first_error(exc)}") from None
    event = SesEvent(
        event_type=event_type,
        kind=kind,
        mail=mail,
        detail=detail,
        raw_detail=raw,  # as SES sent it: identity() hashes it, so a redelivery keeps its id
        sns_message_id=sns_message_id,
    )
    event.timestamp  # noqa: B018 - validates the timestamp now, not later in the consumer
    return event


def parse_body(body: str | bytes | dict[str, Any]) -> SesEvent:
    """An SQS body (SNS envelope or raw record) -> :class:`SesEvent`."""
    record, sns_message_id = unwrap(body)
    return parse_record(record, sns_message_id)


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    return f"{where}: {err['msg']}"
