"""The webhook event catalog, subscription filters, payloads (version 1) and the mapping from
the tables' change streams to events.

Events come from where things already happen: every state change mailstep makes is a write
to the main table or the events table, and DynamoDB Streams hands each write to the
dispatcher exactly once per change (retried until processed: at least once). The mapping here
is pure: a stream record in, zero or more :class:`WebhookEvent` out, each with an id derived
from the stream record's ``eventID`` (so a redelivered record gives the same ids).

Payload (docs/webhooks.md)::

    {"id": "msg_...", "type": "subscriber.unsubscribed", "version": 1,
     "timestamp": "2026-11-27T00:00:00.000Z", "data": {...}}

``data`` carries ids and the address the event is about, never names, attributes, IP
addresses or user agents.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from boto3.dynamodb.types import TypeDeserializer

from shared.core import clock
from shared.core.errors import FieldProblem, InvalidInput
from shared.store import keys
from shared.store.dynamo import from_dynamo

PAYLOAD_VERSION = 1
EVENT_TYPES: tuple[str, ...] = (
    "subscriber.created",
    "subscriber.updated",
    "subscriber.confirmed",
    "subscriber.unsubscribed",
    "subscriber.resubscribed",
    "subscriber.suppressed",
    "subscriber.deleted",
    "subscriber.cold",
    "topic.opted_in",
    "topic.opted_out",
    "email.sent",
    "email.delivered",
    "email.bounced",
    "email.complained",
    "email.opened",
    "email.clicked",
    "sequence.started",
    "sequence.completed",
    "sequence.exited",
    "broadcast.started",
    "broadcast.completed",
    "broadcast.ab_decided",
    "reputation.paused",
    "reputation.resumed",
)
FAMILIES = tuple(dict.fromkeys(t.split(".")[0] for t in EVENT_TYPES))
MAX_FILTERS = 40
# Events-table item types (SES engagement, the confirm step) -> webhook event type.
TIMELINE_TYPES = {
    "delivery": "email.delivered",
    "bounce": "email.bounced",
    "complaint": "email.complained",
    "open": "email.opened",
    "click": "email.clicked",
    "subscriber.confirmed": "subscriber.confirmed",
    "subscriber.cold": "subscriber.cold",  # list hygiene's sunset (docs/hygiene.md)
}
# Profile attributes whose change is a subscriber.updated (named in ``changed``, values not sent).
UPDATED_FIELDS = ("first_name", "attributes", "tags")
_DESER = TypeDeserializer()


@dataclass(frozen=True)
class WebhookEvent:
    id: str
    type: str
    timestamp: str
    data: dict[str, Any]

    def body(self) -> str:
        """The payload as sent (compact JSON; the signature covers exactly these bytes)."""
        payload = {
            "id": self.id,
            "type": self.type,
            "version": PAYLOAD_VERSION,
            "timestamp": self.timestamp,
            "data": self.data,
        }
        return json.dumps(payload, separators=(",", ":"), sort_keys=True)


def parse_filters(raw: Iterable[str] | str, *, field: str = "events") -> tuple[str, ...]:
    """``subscriber.created``, ``subscriber.*`` or ``*`` (comma-separated or a list) ->
    the filters, deduplicated. Raises InvalidInput naming ``field``."""
    items = [p.strip() for p in (raw.split(",") if isinstance(raw, str) else raw)]
    items = [p for p in items if p]
    if not items:
        problem = FieldProblem(field, "name at least one event type or family.*")
        raise InvalidInput(f"{field}: {problem.message}", [problem])
    if len(items) > MAX_FILTERS:
        problem = FieldProblem(field, f"at most {MAX_FILTERS} entries")
        raise InvalidInput(f"{field}: {problem.message}", [problem])
    for item in items:
        if item == "*" or item in EVENT_TYPES:
            continue
        if item.endswith(".*") and item[:-2] in FAMILIES:
            continue
        problem = FieldProblem(field, f"{item[:60]!r} is not an event type or family.* (docs/webhooks.md)")
        raise InvalidInput(f"{field}: {problem.message}", [problem])
    return tuple(dict.fromkeys(items))


def matches(filters: Sequence[str], event_type: str) -> bool:
    family = event_type.split(".")[0]
    return any(f == "*" or f == event_type or f == f"{family}.*" for f in filters)


# ----- stream records -> events ------------------------------------------------------------


def _image(record: Mapping[str, Any], which: str) -> dict[str, Any]:
    raw = record.get("dynamodb", {}).get(which) or {}
    return {name: _DESER.deserialize(value) for name, value in raw.items()}


def _moment(record: Mapping[str, Any], item: Mapping[str, Any]) -> str:
    """When the change happened: the stream's time (epoch seconds, as Lambda gives it), else the
    item's own time. Never "now": the delivery's key holds it, and a record delivered again
    must find its delivery."""
    value = record.get("dynamodb", {}).get("ApproximateCreationDateTime")
    if isinstance(value, int | float):
        return clock.iso(datetime.fromtimestamp(float(value), UTC))
    for candidate in (value, item.get("updated_at"), item.get("at"), item.get("created_at")):
        if isinstance(candidate, str) and candidate:
            try:
                return clock.iso(clock.parse_iso(candidate))
            except ValueError:
                continue
    return "1970-01-01T00:00:00.000Z"


def event_id(record_id: str, event_type: str, discriminator: str = "") -> str:
    """``msg_`` + 32 hex characters: the same for the same change, whatever the delivery."""
    digest = hashlib.sha256(f"{record_id}|{event_type}|{discriminator}".encode()).hexdigest()
    return "msg_" + digest[:32]


def from_stream_record(record: Mapping[str, Any]) -> list[WebhookEvent]:
    """The webhook events one DynamoDB stream record (Lambda's event format) stands for."""
    record_id = str(record.get("eventID") or "")
    if not record_id:
        return []
    name = record.get("eventName")
    old, new = _image(record, "OldImage"), _image(record, "NewImage")
    item = new or old
    pk, sk = str(item.get("PK", "")), str(item.get("SK", ""))
    at = _moment(record, item)
    found: list[tuple[str, dict[str, Any], str]] = []  # (type, data, discriminator)
    if sk.startswith(f"{keys.EVT}{keys.SEP}") and name == "INSERT":
        found += _timeline(new)
    elif pk.startswith(f"{keys.SUB}{keys.SEP}"):
        email = keys.email_from_sub(pk)
        if sk == keys.PROFILE:
            found += _profile(str(name), email, old, new)
        elif sk == keys.SUPPRESSION and name == "INSERT":
            found.append(("subscriber.suppressed", {"email": email, "reason": new.get("reason")}, ""))
        elif sk.startswith(keys.SENT_PREFIX) and name == "INSERT":
            found.append(("email.sent", _email_data(email, new), ""))
        elif sk.startswith(keys.EXEC_PREFIX) and name in ("INSERT", "REMOVE"):
            sequence = keys.sequence_from_exec(sk)
            if name == "INSERT":
                found.append(("sequence.started", {"email": email, "sequence": sequence}, ""))
            elif old.get("ended") == keys.EXECUTION_COMPLETED:
                found.append(("sequence.completed", {"email": email, "sequence": sequence}, ""))
            else:
                found.append(("sequence.exited", {"email": email, "sequence": sequence}, ""))
    elif pk == keys.BROADCAST and name in ("INSERT", "MODIFY"):
        found += _broadcast(old, new)
    elif pk == keys.REPUTATION and name in ("INSERT", "MODIFY"):
        found += _reputation(old, new)
    return [
        WebhookEvent(
            id=event_id(record_id, kind, discriminator),
            type=kind,
            timestamp=at,
            data={k: v for k, v in from_dynamo(data).items() if v not in (None, "")},
        )
        for kind, data, discriminator in found
    ]


def _email_data(email: str, item: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "email": email,
        "message_id": item.get("ses_message_id"),
        "template": item.get("template"),
        "source": item.get("source"),
    }


def _timeline(item: Mapping[str, Any]) -> list[tuple[str, dict[str, Any], str]]:
    kind = TIMELINE_TYPES.get(str(item.get("type", "")))
    if kind is None:
        return []
    email = keys.email_from_sub(str(item["PK"]))
    if kind == "subscriber.confirmed":
        return [(kind, {"email": email}, "")]
    if kind == "subscriber.cold":
        return [
            (kind, {"email": email, "last_engaged_day": (item.get("data") or {}).get("last_engaged_day")}, "")
        ]
    data = _email_data(email, item)
    if kind == "email.bounced":
        data |= {"bounce_type": item.get("bounce_type"), "bounce_sub_type": item.get("bounce_sub_type")}
    if kind == "email.clicked":
        data["link"] = item.get("link")
    if kind in ("email.opened", "email.clicked") and item.get("machine"):
        data["machine"] = item.get("machine")  # a machine made it (docs/hygiene.md): mpp, hidden_link...
    return [(kind, data, "")]


def _profile(
    name: str, email: str, old: Mapping[str, Any], new: Mapping[str, Any]
) -> list[tuple[str, dict[str, Any], str]]:
    if name == "INSERT":
        return [
            (
                "subscriber.created",
                {"email": email, "status": new.get("status"), "version": new.get("version")},
                "",
            )
        ]
    if name == "REMOVE":
        return [("subscriber.deleted", {"email": email}, "")]
    found: list[tuple[str, dict[str, Any], str]] = []
    version = new.get("version")
    before, after = old.get("status"), new.get("status")
    if before != after and after == "unsubscribed":
        data = {"email": email, "version": version}
        if _sunset(old, new):
            data["reason"] = "sunset"  # list hygiene unsubscribed a reader still cold (docs/hygiene.md)
        found.append(("subscriber.unsubscribed", data, ""))
    elif before == "unsubscribed" and after == "subscribed":
        found.append(("subscriber.resubscribed", {"email": email, "version": version}, ""))
    changed = [f for f in UPDATED_FIELDS if old.get(f) != new.get(f)]
    if changed:
        found.append(("subscriber.updated", {"email": email, "changed": changed, "version": version}, ""))
    for attribute, kind in (("topics_in", "topic.opted_in"), ("topics_out", "topic.opted_out")):
        for topic in sorted(set(new.get(attribute) or ()) - set(old.get(attribute) or ())):
            found.append((kind, {"email": email, "topic": topic, "version": version}, topic))
    return found


def _sunset(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """The sunset's own unsubscribe: the same write takes ``cold`` away and adds ``sunset``
    (shared.engagement.sunset.sunset_event); a cold reader's own unsubscribe keeps ``cold``."""
    before, after = set(old.get("tags") or ()), set(new.get("tags") or ())
    return "cold" in before and "cold" not in after and "sunset" in after


def _broadcast(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[tuple[str, dict[str, Any], str]]:
    if new.get("ab_decision") and not old.get("ab_decision"):  # stored once (shared.broadcasts.decide)
        return [
            ("broadcast.ab_decided", {"broadcast_id": new.get("id"), **json.loads(new["ab_decision"])}, "")
        ]
    before, after = old.get("status"), new.get("status")
    if before == after:
        return []
    data = {"broadcast_id": new.get("id"), "template": new.get("template")}
    if after == "resolving" and before in (None, "scheduled"):
        return [("broadcast.started", data, "")]
    if after == "done":
        data |= {
            "sent": new.get("sent"),
            "failed": new.get("failed"),
            "audience_size": new.get("audience_size"),
        }
        return [("broadcast.completed", data, str(new.get("round", "")))]
    return []


def _reputation(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[tuple[str, dict[str, Any], str]]:
    """The guardrail's record flipped ``paused`` (docs/reputation.md)."""
    before, after = bool(old.get("paused", False)), bool(new.get("paused", False))
    if before == after:
        return []
    data: dict[str, Any] = {"configuration_set": new.get("configuration_set")}
    if after:
        data |= {
            "alarm": new.get("alarm"),
            "metric": new.get("metric"),
            "threshold": new.get("threshold"),
            "paused_at": new.get("paused_at"),
        }
        return [("reputation.paused", data, str(new.get("paused_at", "")))]
    data |= {"resumed_at": new.get("resumed_at"), "forced": new.get("forced")}
    return [("reputation.resumed", data, str(new.get("resumed_at", "")))]
