"""Replies (opt-in per sender): SES inbound mail -> a ``reply`` event for the subscriber.

A sender opts in by giving its mail a ``reply_to`` on the domain whose SES receipt rule
stores incoming mail in S3 and notifies ``INBOUND_TOPIC`` (docs/engagement.md). Then:

    SNS notification ("Received": S3 action, or SNS action with inline content)
      -> the MIME -> the subscriber (From) and the original send: SES gives every message
         it sends ``Message-ID: <SES message id@...amazonses.com>`` (whatever we set), so
         In-Reply-To/References quote SES's id, which the subscriber's ``SENT#`` items
         keep as ``ses_message_id`` (one query of their send log)
      -> ``shared.web.ingest`` as an InboundEvent of type ``reply`` (so ``exit_on: [reply]``
         stops sequences and ``trigger: reply`` starts them, exactly like an API event),
         idempotent on the inbound message id -> optional forwarding.

The subscriber is the reply's From: a reply from another address than the one mailed
(an alias, a forwarded copy) belongs to that address, or to nobody, and is not matched.

Mail from addresses that are not subscribers is acknowledged and logged (no profile is
created from a stranger's mail), as is mail whose spam or virus verdict is FAIL.
A notification that is not SES inbound JSON raises ``MalformedEvent`` (-> DLQ).
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from email import message_from_bytes, policy
from email.message import EmailMessage
from email.utils import parseaddr
from typing import Any

from shared.core.aws import client as aws_client
from shared.core.models import EventBatch, InboundEvent, normalise_email
from shared.core.observability import logger, redact_email
from shared.engagement.ses_events import MalformedEvent, unwrap
from shared.store.send_log import SendLog
from shared.web.ingest import IngestContext, ingest

REPLY_EVENT = "reply"
MAX_SNIPPET = 500
MAX_RAW_BYTES = 10 * 1024 * 1024
# SES's Message-ID: <id@email.amazonses.com> (us-east-1), <id@eu-west-1.amazonses.com>...
_SES_MESSAGE_ID = re.compile(r"<([^<>@\s]+)@(?:[A-Za-z0-9-]+\.)*amazonses\.com>", re.IGNORECASE)

Fetch = Callable[[str, str], bytes]  # (bucket, key) -> raw MIME


def s3_fetch(bucket: str, key: str) -> bytes:
    body = aws_client("s3").get_object(Bucket=bucket, Key=key)["Body"]
    raw = body.read(MAX_RAW_BYTES + 1)
    if len(raw) > MAX_RAW_BYTES:
        raise MalformedEvent("inbound message larger than 10 MiB")
    return bytes(raw)


@dataclass(frozen=True)
class OriginalSend:
    source: str | None
    template: str | None
    send_id: str
    step: str | None = None


@dataclass(frozen=True)
class ReplyOutcome:
    status: str  # recorded | replayed | ignored
    reason: str | None = None
    matched: bool = False
    forwarded: bool = False


@dataclass(frozen=True)
class ReplyContext:
    ingest: IngestContext
    fetch: Fetch = s3_fetch
    forward: Callable[[EmailMessage, str], bool] | None = None  # (message, subscriber) -> sent


def raw_message(record: dict[str, Any], fetch: Fetch) -> bytes:
    """The MIME of a "Received" notification: inline (SNS action) or from S3 (S3 action)."""
    receipt = record.get("receipt") or {}
    action = receipt.get("action") or {}
    if isinstance(record.get("content"), str):
        content: str = record["content"]
        if str(action.get("encoding", "UTF8")).upper() == "BASE64":
            try:
                return base64.b64decode(content, validate=True)
            except ValueError as exc:
                raise MalformedEvent("inbound content is not base64") from exc
        return content.encode("utf-8", "surrogateescape")
    if action.get("type") == "S3" and action.get("bucketName") and action.get("objectKey"):
        return fetch(str(action["bucketName"]), str(action["objectKey"]))
    raise MalformedEvent("inbound notification without content and without an S3 location")


def referenced_ses_ids(message: EmailMessage) -> list[str]:
    """The SES message ids that In-Reply-To, then References (newest first), quote; deduplicated."""
    found: list[str] = []
    for header in ("In-Reply-To", "References"):
        ids = _SES_MESSAGE_ID.findall(str(message.get(header, "")))
        for ses_id in ids if header == "In-Reply-To" else reversed(ids):
            if ses_id not in found:
                found.append(ses_id)
    return found


def find_send(log: SendLog, email: str, message: EmailMessage) -> OriginalSend | None:
    """The ``SENT#`` item of ``email`` whose ``ses_message_id`` the reply quotes (In-Reply-To
    first): one query of the subscriber's send log, however many ids are quoted."""
    wanted = referenced_ses_ids(message)
    if not wanted:
        return None
    sent = {
        str(item["ses_message_id"]): item
        for item in log.entries(email)
        if item.get("ses_message_id") in wanted
    }
    ses_id = next((i for i in wanted if i in sent), None)
    if ses_id is None:
        return None
    item = sent[ses_id]
    return OriginalSend(item.get("source"), item.get("template"), str(item.get("send_id")), item.get("step"))


def process_notification(body: str | bytes | dict[str, Any], ctx: ReplyContext) -> ReplyOutcome:
    record, _ = unwrap(body)
    if record.get("notificationType") != "Received" or not isinstance(record.get("mail"), dict):
        raise MalformedEvent("not an SES inbound (Received) notification")
    receipt = record.get("receipt") or {}
    for verdict in ("spamVerdict", "virusVerdict"):
        if (receipt.get(verdict) or {}).get("status") == "FAIL":
            logger.info("inbound mail dropped", verdict=verdict)
            return ReplyOutcome("ignored", reason=verdict)
    message = message_from_bytes(raw_message(record, ctx.fetch), policy=policy.default)
    assert isinstance(message, EmailMessage)
    _, sender = parseaddr(str(message.get("From", "")))
    try:
        email = normalise_email(sender)
    except ValueError:
        logger.info("inbound mail without a usable From address")
        return ReplyOutcome("ignored", reason="no_sender")
    store = ctx.ingest.store
    if store.get_profile(email) is None:
        logger.info("inbound mail from a non-subscriber ignored", sender=redact_email(email))
        return ReplyOutcome("ignored", reason="not_a_subscriber")
    original = find_send(store.send_log, email, message)
    inbound_id = str(record["mail"].get("messageId") or message.get("Message-ID") or "")
    data: dict[str, Any] = {
        "subject": str(message.get("Subject", ""))[:200],
        "snippet": snippet(message),
        "inbound_message_id": inbound_id[:200],
    }
    if original is not None:
        data.update({k: v for k, v in original.__dict__.items() if v is not None})
    event = InboundEvent(
        type=REPLY_EVENT,
        email=email,
        id="reply-" + hashlib.sha256(inbound_id.encode()).hexdigest()[:32],
        data=data,
    )
    (result,) = ingest(EventBatch(events=[event]), ctx.ingest)
    replayed = bool(result.get("replayed"))
    forwarded = False
    if ctx.forward is not None and not replayed:
        forwarded = ctx.forward(message, email)
    logger.info(
        "reply recorded",
        subscriber=redact_email(email),
        matched=original is not None,
        source=original.source if original else None,
        stopped=result.get("sequences_stopped"),
        replayed=replayed,
    )
    return ReplyOutcome(
        "replayed" if replayed else "recorded", matched=original is not None, forwarded=forwarded
    )


def snippet(message: EmailMessage) -> str:
    part = message.get_body(preferencelist=("plain",))
    if part is None:
        return ""
    try:
        text = str(part.get_content())
    except (LookupError, ValueError):
        return ""
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith(">")]
    return " ".join(" ".join(lines).split())[:MAX_SNIPPET]


def forwarder(sender: Any, forward_to: str, from_address: str) -> Callable[[EmailMessage, str], bool]:
    """Forward a reply to ``forward_to`` from mailstep's own address (the subscriber's domain
    would fail SPF/DMARC), with Reply-To set to the subscriber so answering reaches them."""

    def forward(message: EmailMessage, subscriber: str) -> bool:
        out = EmailMessage()
        _, from_email = parseaddr(from_address)
        out["From"] = from_address
        out["To"] = forward_to
        out["Reply-To"] = subscriber
        out["Subject"] = f"Reply from {subscriber}: {str(message.get('Subject', ''))[:150]}"
        part = message.get_body(preferencelist=("plain",))
        out.set_content(
            (str(part.get_content()) if part is not None else "") or "(the reply has no text part)"
        )
        result = sender.send_raw(
            out.as_bytes(),
            from_email=from_email,
            to_email=forward_to,
            tags={"kind": "reply-forward"},
            transactional=True,  # the operator's own mail: never held by the marketing pause
        )
        return bool(result.status == "sent")

    return forward


def context_from_settings(settings: Any) -> ReplyContext:
    """Production wiring: the ingest context (idempotency + sequences) and forwarding."""
    from shared.sending.sender import SesSender
    from shared.sequences import SEQUENCES_DIR
    from shared.sequences.engine import SequenceEngine
    from shared.sequences.validate import require_catalog, templates_checked_at_synth
    from shared.store.subscribers import SubscriberStore
    from shared.web.ingest import make_idempotency

    store = SubscriberStore(settings.table_name, settings.events_table_name)
    idempotency, persistence = make_idempotency(settings.table_name, settings.idempotency_ttl_seconds)
    engine = SequenceEngine(
        catalog=require_catalog(SEQUENCES_DIR, templates=templates_checked_at_synth),
        arn_prefix=settings.state_machine_arn_prefix,
        store=store,
    )
    ingest_ctx = IngestContext(
        store=store,
        data_ttl_days=settings.data_ttl_days,
        idempotency=idempotency,
        persistence=persistence,
        sequences=engine,
    )
    forward = None
    if settings.reply_forward_to:
        forward = forwarder(
            SesSender(
                settings.configuration_set,
                transactional_configuration_set=settings.transactional_configuration_set,
            ),
            settings.reply_forward_to,
            settings.default_from,
        )
    return ReplyContext(ingest=ingest_ctx, forward=forward)
