"""A faithful local SES v2, running inside the emulated endpoint.

moto's own ``send_email`` drops configuration sets, EmailTags, headers and text parts and
never publishes events. :class:`LocalSes` takes over ``SendEmail`` (see
``local_aws.hooks``), so product code keeps talking plain boto3 to the endpoint:

- every accepted message lands in ``<outbox>/<message-id>.eml`` (the MIME as sent; Simple
  content becomes equivalent MIME) plus ``<message-id>.json`` (configuration set,
  EmailTags, from, destination, timestamp and the SES ``mail`` object); like SES, the
  message's ``Message-ID`` is SES's own, ``<message-id@region.amazonses.com>``, whatever
  the caller set (replies quote that one);
- events are published in the SES event-publishing format to the SNS topics of the
  configuration set's event destinations: Send, then Delivery/Bounce/Complaint as the
  mailbox simulator says;
- MaxSendRate (a token bucket shared by every thread) and Max24HourSend throttle like SES
  and ``GetAccount`` reports them.
"""

from __future__ import annotations

import base64
import json
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from email import message_from_bytes, policy
from email.message import EmailMessage, Message
from email.utils import formatdate, getaddresses, parseaddr
from pathlib import Path
from typing import Any

from local_aws import ses_events as ev
from local_aws.reputation import ReputationMonitor, Window

DEFAULT_MAX_SEND_RATE = 14.0
DEFAULT_MAX_24_HOUR_SEND = 50_000
MAX_RECIPIENTS = 50
_TAG_CHARS = re.compile(r"^[A-Za-z0-9_-]{1,256}$")


class SesError(Exception):
    """An SES v2 API error: ``error_type`` and HTTP ``status`` as the real service answers."""

    def __init__(self, error_type: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message
        self.status = status


@dataclass(frozen=True)
class SentMessage:
    message_id: str
    eml: Path  # the raw MIME message, as an .eml file of the outbox
    meta: Path  # JSON beside it: envelope, tags, each recipient's simulated outcome


Publisher = Callable[[str, str], None]  # (topic ARN, message) -> None


class LocalSes:
    def __init__(
        self,
        outbox: Path,
        *,
        account_id: str,
        region: str,
        publish: Publisher,
        max_send_rate: float = DEFAULT_MAX_SEND_RATE,
        max_24_hour_send: int = DEFAULT_MAX_24_HOUR_SEND,
        sandbox: bool = False,
    ) -> None:
        self.outbox = outbox
        # The account is in the SES sandbox: mail only to verified identities (and the mailbox
        # simulator); GetAccount reports ProductionAccessEnabled false.
        self.sandbox = sandbox
        self.outbox.mkdir(parents=True, exist_ok=True)
        self.account_id = account_id
        self.region = region
        self.publish = publish
        self.max_send_rate = float(max_send_rate)
        self.max_24_hour_send = int(max_24_hour_send)
        self._tokens = self.max_send_rate
        self.throttled = 0  # TooManyRequests answers (bench)
        self.refused_unverified = 0  # sends refused: the sending identity waits for verification
        self.refused_daily_quota = 0  # sends refused: the 24-hour quota was spent
        self._refilled = time.monotonic()
        self._sent = Window()  # (wall time, recipients) of the last 24 h, and their sum
        self._lock = threading.Lock()
        # configuration set -> destination name -> EventDestination (SES v2 shape)
        self.destinations: dict[str, dict[str, dict[str, Any]]] = {}
        self.sends = 0
        self.events: list[dict[str, Any]] = []  # every record published (tests, bench)
        # Configuration sets whose sending was disabled (SES v2 PutConfigurationSetSendingOptions)
        # -> when; each set's reputation rates and the alarms on them (local_aws.reputation).
        self.paused_sets: dict[str, str] = {}
        self.fresh_starts: dict[str, str] = {}
        self.reputation = ReputationMonitor(publish, account=account_id, region=region)
        # Identities waiting for verification (`mailstep dev --identity-pending`; a new domain
        # whose DKIM records SES has not seen yet): a send from one is refused as SES refuses it,
        # until `mailstep local verify IDENTITY`.
        self.pending_identities: set[str] = set()

    # ----- quota -------------------------------------------------------------------------
    def configure(self, *, max_send_rate: float | None = None, max_24_hour_send: int | None = None) -> None:
        with self._lock:
            if max_send_rate is not None:
                self.max_send_rate = float(max_send_rate)
                self._tokens = min(self._tokens, self.max_send_rate)
            if max_24_hour_send is not None:
                self.max_24_hour_send = int(max_24_hour_send)

    @staticmethod
    def _now() -> float:
        """The quota's clock: the runtime's calendar (the wall clock plus every `mailstep local
        advance`), so a spent 24-hour quota frees as the calendar's days pass."""
        return time.time() + ev.CALENDAR["offset_s"]

    # ----- identities waiting for verification ----------------------------------------------
    def hold_identity(self, identity: str) -> None:
        with self._lock:
            self.pending_identities.add(identity.lower())

    def verify_identity(self, identity: str) -> bool:
        """``identity`` is verified now; whether it was waiting."""
        with self._lock:
            waiting = identity.lower() in self.pending_identities
            self.pending_identities.discard(identity.lower())
            return waiting

    def identity_pending(self, identity: str) -> bool:
        return identity.lower() in self.pending_identities

    def _sender_check(self, source: str) -> None:
        """A send from an identity that waits for verification (the address, or its domain when
        the address is not an identity of its own) is refused: ``MessageRejected``, HTTP 400,
        "Email address is not verified. The following identities failed the check in region
        REGION: ..." (re:Post knowledge center "ses-554-400-message-rejected-error"; SES
        Developer Guide "Amazon SES email sending errors")."""
        if not self.pending_identities:
            return
        address = parseaddr(source)[1].lower()
        if address in self.pending_identities or address.rsplit("@", 1)[-1] in self.pending_identities:
            with self._lock:
                self.refused_unverified += 1
            raise SesError(
                "MessageRejected",
                "Email address is not verified. The following identities failed the check in region "
                f"{self.region.upper()}: {address}",
            )

    def _sent_last_24h(self, now: float) -> int:
        return self._sent.since(now - 86400)

    def _take(self, recipients: int) -> None:
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.max_send_rate, self._tokens + (now - self._refilled) * self.max_send_rate)
            self._refilled = now
            wall = self._now()
            if self._sent_last_24h(wall) + recipients > self.max_24_hour_send:
                self.refused_daily_quota += 1
                # "a ThrottlingException error ... Daily message quota exceeded" (SES Developer
                # Guide, "Errors related to the sending quotas for your Amazon SES account")
                raise SesError("ThrottlingException", "Daily message quota exceeded.")
            if self._tokens < recipients:
                self.throttled += 1
                raise SesError("TooManyRequestsException", "Maximum sending rate exceeded.", 429)
            self._tokens -= recipients
            self._sent.add(wall, recipients)

    def _sandbox_check(self, recipients: list[str], verified: Callable[[str], bool]) -> None:
        """In the SES sandbox every recipient must be a verified identity (the address or its
        domain) or a mailbox simulator address; else SES refuses the whole send."""
        failed = [
            r
            for r in recipients
            if not r.lower().endswith("@" + ev.SIMULATOR_DOMAIN)
            and not verified(r.lower())
            and not verified(r.rsplit("@", 1)[-1].lower())
        ]
        if failed:
            raise SesError(
                "MessageRejected",
                "Email address is not verified. The following identities failed the check in region "
                f"{self.region.upper()}: {', '.join(failed)}",
            )

    def account(self) -> dict[str, Any]:
        with self._lock:
            sent = self._sent_last_24h(self._now())
        return {
            "DedicatedIpAutoWarmupEnabled": False,
            "EnforcementStatus": "HEALTHY",
            "ProductionAccessEnabled": not self.sandbox,
            "SendQuota": {
                "Max24HourSend": float(self.max_24_hour_send),
                "MaxSendRate": float(self.max_send_rate),
                "SentLast24Hours": float(sent),
            },
            "SendingEnabled": True,
        }

    # ----- configuration set sending (the reputation guardrail) -----------------------------
    def set_sending(self, configuration_set: str, enabled: bool) -> None:
        """SES v2 PutConfigurationSetSendingOptions. Re-enabling gives the set a fresh start: its
        reputation rates start over (SES reports it as ``ReputationOptions.LastFreshStart``)."""
        with self._lock:
            was_paused = configuration_set in self.paused_sets
            if not enabled:
                self.paused_sets.setdefault(configuration_set, ev.iso())
            else:
                self.paused_sets.pop(configuration_set, None)
                if was_paused:
                    self.fresh_starts[configuration_set] = ev.iso()
        if enabled and was_paused:
            self.reputation.fresh_start(configuration_set)

    def sending_enabled(self, configuration_set: str) -> bool:
        with self._lock:
            return configuration_set not in self.paused_sets

    # ----- event destinations ------------------------------------------------------------
    def put_destination(self, configuration_set: str, name: str, destination: dict[str, Any]) -> None:
        with self._lock:
            self.destinations.setdefault(configuration_set, {})[name] = {"Name": name, **destination}

    def delete_destination(self, configuration_set: str, name: str) -> None:
        with self._lock:
            if name not in self.destinations.get(configuration_set, {}):
                raise SesError("NotFoundException", f"Event destination {name} does not exist.", 404)
            del self.destinations[configuration_set][name]

    def list_destinations(self, configuration_set: str) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(d) for d in self.destinations.get(configuration_set, {}).values()]

    def emit(self, record: dict[str, Any]) -> int:
        """Publish ``record`` to every enabled destination of its configuration set that
        matches its type; returns how many topics received it."""
        configuration_set = (record["mail"]["tags"].get("ses:configuration-set") or [None])[0]
        if not configuration_set:
            return 0
        kind = ev.destination_event_type(record)
        published = 0
        for destination in self.list_destinations(configuration_set):
            topic = (destination.get("SnsDestination") or {}).get("TopicArn")
            if (
                destination.get("Enabled", False)
                and topic
                and kind in destination.get("MatchingEventTypes", [])
            ):
                self.publish(topic, json.dumps(record))
                published += 1
        with self._lock:
            self.events.append(record)
        self.reputation.observe(record)
        return published

    # ----- sending -----------------------------------------------------------------------
    def send(
        self,
        params: dict[str, Any],
        configuration_set_exists: Callable[[str], bool],
        verified: Callable[[str], bool] = lambda identity: False,
    ) -> SentMessage:
        """Accept one SES v2 ``SendEmail`` request (already JSON-decoded). ``verified``: whether
        an identity (address or domain) of the account is verified (the sandbox's check)."""
        source = params.get("FromEmailAddress")
        content = params.get("Content") or {}
        destination = params.get("Destination") or {}
        configuration_set = params.get("ConfigurationSetName")
        tags = params.get("EmailTags") or []
        for tag in tags:
            if not _TAG_CHARS.match(str(tag.get("Name", ""))) or not _TAG_CHARS.match(
                str(tag.get("Value", ""))
            ):
                raise SesError(
                    "BadRequestException",
                    "Tag name and value may contain only ASCII letters, numbers, underscores and dashes "
                    f"(got {tag.get('Name')!r}={tag.get('Value')!r}).",
                )
        if configuration_set and not configuration_set_exists(configuration_set):
            raise SesError(
                "NotFoundException", f"Configuration set <{configuration_set}> does not exist.", 404
            )
        if configuration_set and not self.sending_enabled(configuration_set):
            # SES v2 answers a send through a set whose sending is disabled with
            # SendingPausedException, HTTP 400 (the v2 API model's only "paused" error of
            # SendEmail; v1 has ConfigurationSetSendingPausedException). The message text is
            # not documented; this one names the set (docs/local-runtime.md).
            raise SesError(
                "SendingPausedException",
                f"Sending is paused for configuration set {configuration_set}.",
            )

        raw: bytes | None = None
        if "Raw" in content:
            raw = base64.b64decode(content["Raw"]["Data"])
            message = message_from_bytes(raw, policy=policy.compat32)
        elif "Simple" in content:
            message = _simple_to_mime(
                source, destination, content["Simple"], params.get("ReplyToAddresses") or []
            )
        else:
            raise SesError(
                "BadRequestException", "Content must contain Raw or Simple (templates are not emulated)."
            )

        recipients = _recipients(destination, message)
        if not source:
            source = message.get("From")
        if not source:
            raise SesError("BadRequestException", "Missing FromEmailAddress.")
        if not recipients:
            raise SesError("BadRequestException", "Missing final recipients.")
        if len(recipients) > MAX_RECIPIENTS:
            raise SesError("BadRequestException", f"Recipient count exceeds {MAX_RECIPIENTS}.")
        self._sender_check(str(source))
        if self.sandbox:
            self._sandbox_check(recipients, verified)

        self._take(len(recipients))
        message_id = ev.feedback_id()
        # SES replaces any Message-ID the caller set with its own (see ses_message_id_header)
        del message["Message-ID"]
        added = [("Message-ID", ses_message_id_header(message_id, self.region))]
        if message.get("Date") is None:
            added.append(("Date", formatdate(usegmt=True)))
        for name, value in added:
            message[name] = value
        if raw is None:
            mime = message.as_bytes()
        else:  # byte-exact: the message as sent, without its Message-ID, SES's headers in front
            mime = b"".join(f"{n}: {v}\r\n".encode() for n, v in added) + _without_header(raw, "Message-ID")
        timestamp = ev.iso()
        mail = ev.mail_object(
            message_id=message_id,
            timestamp=timestamp,
            source=source,
            destination=recipients,
            message=message,
            configuration_set=configuration_set,
            email_tags={t["Name"]: t["Value"] for t in tags},
            account_id=self.account_id,
            region=self.region,
        )
        eml = self.outbox / f"{message_id}.eml"
        meta = self.outbox / f"{message_id}.json"
        _write_atomically(eml, mime)
        _write_atomically(
            meta,
            json.dumps(
                {
                    "message_id": message_id,
                    "timestamp": timestamp,
                    "configuration_set": configuration_set,
                    "email_tags": {t["Name"]: t["Value"] for t in tags},
                    "from": source,
                    "destination": recipients,
                    "subject": message.get("Subject", ""),
                    "outcomes": {r: ev.simulated_outcome(r) for r in recipients},
                    "mail": mail,
                },
                indent=2,
            ).encode(),
        )
        with self._lock:
            self.sends += 1
        self._publish_outcomes(mail, recipients)
        return SentMessage(message_id=message_id, eml=eml, meta=meta)

    def _publish_outcomes(self, mail: dict[str, Any], recipients: list[str]) -> None:
        outcomes = {r: ev.simulated_outcome(r) for r in recipients}
        self.emit(ev.send_event(mail))
        delivered = [r for r, o in outcomes.items() if o in (ev.DELIVERED, ev.COMPLAINED)]
        bounced = [r for r, o in outcomes.items() if o == ev.BOUNCED]
        suppressed = [r for r, o in outcomes.items() if o == ev.SUPPRESSED]
        complained = [r for r, o in outcomes.items() if o == ev.COMPLAINED]
        if delivered:
            self.emit(ev.delivery_event(mail, delivered))
        if bounced:
            self.emit(ev.bounce_event(mail, bounced))
        if suppressed:
            self.emit(ev.bounce_event(mail, suppressed, sub_type="OnAccountSuppressionList"))
        if complained:
            self.emit(ev.complaint_event(mail, complained))


def ses_message_id_header(message_id: str, region: str) -> str:
    """The ``Message-ID`` SES gives a message it accepted, replacing the caller's.

    AWS documents only that SES overrides a ``Message-ID`` header with its own value
    ("Amazon SES header fields"). Messages SES delivers carry
    ``<{MessageId}@{region}.amazonses.com>`` with the MessageId that ``SendEmail`` returned
    and that events carry as ``mail.messageId``; us-east-1, SES's first region, uses
    ``email.amazonses.com`` instead (e.g. ``<0100018288804c9f-...-000000@email.amazonses.com>``
    next to ``Feedback-ID: 1.us-east-1...``, and ``<0102...-000000@eu-west-1.amazonses.com>``).
    """
    domain = "email" if region == "us-east-1" else region
    return f"<{message_id}@{domain}.amazonses.com>"


def _without_header(raw: bytes, name: str) -> bytes:
    """``raw`` without the header field ``name`` (with its folded lines); the rest byte-exact."""
    ends = [i + len(sep) // 2 for sep in (b"\r\n\r\n", b"\n\n") if (i := raw.find(sep)) >= 0]
    end = min(ends, default=len(raw))  # the header block with its last line's line break
    prefix = name.lower().encode() + b":"
    kept: list[bytes] = []
    dropping = False
    for line in raw[:end].splitlines(keepends=True):
        if line[:1] in (b" ", b"\t"):  # a folded continuation of the field above
            if not dropping:
                kept.append(line)
            continue
        dropping = line.lower().startswith(prefix)
        if not dropping:
            kept.append(line)
    return b"".join(kept) + raw[end:]


def _recipients(destination: dict[str, Any], message: Message) -> list[str]:
    listed = [
        *destination.get("ToAddresses", []),
        *destination.get("CcAddresses", []),
        *destination.get("BccAddresses", []),
    ]
    if listed:
        return [str(a) for a in listed]
    headers = [str(v) for h in ("To", "Cc", "Bcc") for v in (message.get_all(h) or [])]
    return [addr for _, addr in getaddresses(headers) if addr]


def _simple_to_mime(
    source: str | None, destination: dict[str, Any], simple: dict[str, Any], reply_to: list[str]
) -> EmailMessage:
    message = EmailMessage()
    message["From"] = source or ""
    if destination.get("ToAddresses"):
        message["To"] = ", ".join(destination["ToAddresses"])
    if destination.get("CcAddresses"):
        message["Cc"] = ", ".join(destination["CcAddresses"])
    if reply_to:
        message["Reply-To"] = ", ".join(reply_to)
    message["Subject"] = simple.get("Subject", {}).get("Data", "")
    message["Date"] = formatdate(usegmt=True)
    for header in simple.get("Headers", []) or []:
        message[header["Name"]] = header["Value"]
    body = simple.get("Body", {})
    text = body.get("Text", {}).get("Data")
    html = body.get("Html", {}).get("Data")
    if text is not None:
        message.set_content(text)
        if html is not None:
            message.add_alternative(html, subtype="html")
    elif html is not None:
        message.set_content(html, subtype="html")
    else:
        message.set_content("")
    return message


def _write_atomically(path: Path, data: bytes) -> None:
    """Readers of the outbox (``read_outbox``, the CLI, tests) never see a half-written file."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_bytes(data)
    os.replace(partial, path)
