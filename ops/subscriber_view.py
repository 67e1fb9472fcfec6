"""A subscriber's timeline as an operator reads it (the console's subscriber page): the events
grouped per mail, subjects decoded, and an engagement summary.

Subjects: a mail's subject header is 7-bit ASCII, non-ASCII text written as RFC 2047 encoded
words (``=?utf-8?q?...?=``; SES API reference, ``Message.Subject``). Whether SES hands it to
event destinations decoded in ``mail.commonHeaders.subject`` is not documented (the local SES
copies the raw header), so it is decoded here either way: decoding a plain subject changes
nothing. The send log's subject (the rendered one, never encoded) is preferred when present.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from email.errors import HeaderParseError
from email.header import decode_header, make_header
from typing import Any

HUMAN = ("open", "click")  # engagement a machine may fake (the item's ``machine`` verdict)


def decoded_subject(value: Any) -> str:
    """``=?utf-8?q?Gr=C3=BC=C3=9Fe?=`` -> ``Grüße``; a plain subject as it is."""
    text = str(value or "")
    if "=?" not in text:
        return text
    try:
        return str(make_header(decode_header(text)))
    except (HeaderParseError, LookupError, UnicodeDecodeError, ValueError):
        return text


@dataclass
class Mail:
    """One mail and what happened to it, its events oldest first."""

    message_id: str
    at: str = ""  # sent (or its first event's time)
    subject: str = ""
    template: str = ""
    source: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)

    def outcome(self) -> list[tuple[str, int, bool]]:
        """(event type, how many, made by a machine only) after the send, in the order first seen."""
        found: dict[str, list[bool]] = {}
        for event in self.events:
            if event.get("type") != "send":
                found.setdefault(str(event.get("type")), []).append(bool(event.get("machine")))
        return [(kind, len(machines), all(machines)) for kind, machines in found.items()]

    def links(self) -> list[str]:
        clicked = (e for e in self.events if e.get("type") == "click" and e.get("link"))
        return list(dict.fromkeys(str(e["link"]) for e in clicked))


@dataclass(frozen=True)
class Summary:
    sent: int
    opened: int  # mails a person opened
    clicked: int  # mails a person clicked in
    opens: int  # a person's opens
    clicks: int
    machine: int  # opens and clicks machines made (Apple MPP, scanners)
    last_open: str | None
    last_click: str | None
    bounces: int
    complaints: int


def timeline(events: list[dict[str, Any]]) -> list[Mail | dict[str, Any]]:
    """``SubscriberStore.list_events`` (oldest first) newest first: each mail (its SES message id)
    once with its events, an event of no mail (a sign-up, an unsubscribe through the API) alone."""
    mails: dict[str, Mail] = {}
    rows: list[Mail | dict[str, Any]] = []
    for event in events:
        message_id = str(event.get("ses_message_id") or "")
        if not message_id:
            rows.append(event)
            continue
        mail = mails.get(message_id)
        if mail is None:
            mail = mails[message_id] = Mail(message_id, at=str(event.get("at") or ""))
            rows.append(mail)
        mail.events.append(event)
        if event.get("type") == "send":
            mail.at = str(event.get("at") or mail.at)
        if event.get("subject") and (event.get("type") == "send" or not mail.subject):
            mail.subject = decoded_subject(event["subject"])
        mail.template = mail.template or str(event.get("template") or "")
        mail.source = mail.source or str(event.get("source") or "")
    return sorted(rows, key=lambda r: r.at if isinstance(r, Mail) else str(r.get("at") or ""), reverse=True)


def summary(events: list[dict[str, Any]]) -> Summary:
    def people(kind: str) -> list[dict[str, Any]]:
        return [e for e in events if e.get("type") == kind and not e.get("machine")]

    opens, clicks = people("open"), people("click")
    return Summary(
        sent=sum(e.get("type") == "send" for e in events),
        opened=len({e.get("ses_message_id") for e in opens}),
        clicked=len({e.get("ses_message_id") for e in clicks}),
        opens=len(opens),
        clicks=len(clicks),
        machine=sum(e.get("type") in HUMAN and bool(e.get("machine")) for e in events),
        last_open=max((str(e.get("at")) for e in opens), default=None),
        last_click=max((str(e.get("at")) for e in clicks), default=None),
        bounces=sum(e.get("type") == "bounce" for e in events),
        complaints=sum(e.get("type") == "complaint" for e in events),
    )
