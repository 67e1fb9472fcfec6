"""Send jobs: the typed input of the send pipeline, and their queue envelope.

On the send queue a job travels as a versioned envelope (DESIGN.md section 6b)::

    {"contract": "send.job", "version": 1, "email": "...", "template": "onboarding/welcome",
     "source": "onboarding", "step": "welcome", "subject": null, "transactional": false,
     "topic": "product-updates", "sender": null, "data": {}}

It carries ids and the event data the mail is about, never profile state: the worker
loads the current profile. An unknown contract or version, malformed JSON or a missing
field raises :class:`InvalidInput` (the consumer fails only that record).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from shared.core import clock
from shared.core.aws import client as aws_client
from shared.core.envelopes import decode, encode
from shared.core.models import Email, TemplateKey, validate_data, validate_name

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import SendMessageBatchRequestEntryTypeDef


CONTRACT = "send.job"
STEP_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
MAX_SUBJECT_TEMPLATE = 500
SQS_BATCH = 10


class SenderOverride(BaseModel):
    """A sequence's or broadcast's own sender (``{"from": "Acme <hello@acme.test>", "reply_to": ...}``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    from_: str = Field(alias="from", min_length=3, max_length=320)
    reply_to: str = Field(default="", max_length=320)


class SendJob(BaseModel):
    """One mail to one subscriber. ``(email, source, step)`` is the send-once key."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    email: Email
    template: TemplateKey  # e.g. onboarding/welcome
    source: str  # sequence id, broadcast id, or "test"
    step: str = "0"  # step id within the source (sequences: execution-scoped if re-entry may resend)
    subject: str | None = Field(default=None, max_length=MAX_SUBJECT_TEMPLATE)  # overrides front matter
    transactional: bool = False
    # The topic the mail belongs to (topics.yaml): a reader who opted out is skipped with
    # ``topic_opt_out``; transactional mail is never topic-gated.
    topic: str | None = None
    sender: SenderOverride | None = None
    data: dict[str, Any] = Field(default_factory=dict)
    # When SES first said "not yet" for this job (the sender function's hold: :func:`hold`).
    held_since: str | None = Field(default=None, max_length=40)

    @field_validator("source")
    @classmethod
    def _source(cls, value: str) -> str:
        return validate_name(value, "source")

    @field_validator("topic")
    @classmethod
    def _topic(cls, value: str | None) -> str | None:
        return None if value is None else validate_name(value, "topic")

    @field_validator("step")
    @classmethod
    def _step(cls, value: str) -> str:
        if not STEP_RE.fullmatch(value):
            raise ValueError("step must be 1-128 characters of letters, digits and _.:- (no '#')")
        return value

    @field_validator("held_since")
    @classmethod
    def _held_since(cls, value: str | None) -> str | None:
        if value is not None:
            clock.parse_iso(value)  # ValueError: not a time
        return value

    @field_validator("data", mode="before")
    @classmethod
    def _data(cls, value: Any) -> dict[str, Any]:
        return validate_data(value if value is not None else {})


# A held job (shared.sending.sender.HOLD_STATUSES) goes back on the send queue this long later
# (SQS's largest DelaySeconds), each time as a new message, so SQS's receive count (and with it
# the dead-letter queue) counts real failures only; after HOLD_MAX_DAYS it is retried like any
# deferred job and ends in the dead-letter queue if SES still says "not yet".
HOLD_DELAY_S = 900
HOLD_MAX_DAYS = 7


def hold(job: SendJob, queue_url: str, *, now: datetime, client: SQSClient | None = None) -> bool:
    """Put ``job`` back on the send queue, delayed :data:`HOLD_DELAY_S`, with the time it was
    first held; False (nothing put) once it has been held :data:`HOLD_MAX_DAYS`."""
    since = job.held_since or clock.iso(now)
    if now - clock.parse_iso(since) >= timedelta(days=HOLD_MAX_DAYS):
        return False
    body = to_message(job.model_copy(update={"held_since": since}))
    send_bodies(client or aws_client("sqs"), queue_url, [body], what="a held send job", delay_s=HOLD_DELAY_S)
    return True


def to_message(job: SendJob) -> str:
    """The queue body of ``job``."""
    return encode(CONTRACT, job, by_alias=True)


def from_message(body: str) -> SendJob:
    """Parse and validate a queue body; InvalidInput names what is wrong."""
    return decode(body, CONTRACT, SendJob)


def enqueue(jobs: Iterable[SendJob], queue_url: str, client: SQSClient | None = None) -> int:
    """Put jobs on the send queue (batches of 10). Returns how many were accepted; raises
    if SQS refused any (the caller's own retry then re-enqueues; send-once makes that safe)."""
    bodies = [to_message(job) for job in jobs]
    send_bodies(client or aws_client("sqs"), queue_url, bodies, what="send jobs")
    return len(bodies)


def send_bodies(sqs: SQSClient, queue_url: str, bodies: list[str], *, what: str, delay_s: int = 0) -> None:
    """Put ``bodies`` on ``queue_url``, ``SQS_BATCH`` a request, each delayed ``delay_s`` (at
    most SQS's 900); raise at the first request SQS refused any of (``what`` names them)."""
    for start in range(0, len(bodies), SQS_BATCH):
        chunk = bodies[start : start + SQS_BATCH]
        entries: list[SendMessageBatchRequestEntryTypeDef] = []
        for i, body in enumerate(chunk):
            entry: SendMessageBatchRequestEntryTypeDef = {"Id": str(i), "MessageBody": body}
            if delay_s:
                entry["DelaySeconds"] = delay_s
            entries.append(entry)
        failed = sqs.send_message_batch(QueueUrl=queue_url, Entries=entries).get("Failed") or []
        if failed:
            raise RuntimeError(f"SQS refused {len(failed)} {what}: {failed[0].get('Code')}")
