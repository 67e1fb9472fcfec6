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
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

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

    @field_validator("data", mode="before")
    @classmethod
    def _data(cls, value: Any) -> dict[str, Any]:
        return validate_data(value if value is not None else {})


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


def send_bodies(sqs: SQSClient, queue_url: str, bodies: list[str], *, what: str) -> None:
    """Put ``bodies`` on ``queue_url``, ``SQS_BATCH`` a request; raise at the first request
    SQS refused any of (``what`` names them in the error)."""
    for start in range(0, len(bodies), SQS_BATCH):
        chunk = bodies[start : start + SQS_BATCH]
        entries: list[SendMessageBatchRequestEntryTypeDef] = [
            {"Id": str(i), "MessageBody": body} for i, body in enumerate(chunk)
        ]
        failed = sqs.send_message_batch(QueueUrl=queue_url, Entries=entries).get("Failed") or []
        if failed:
            raise RuntimeError(f"SQS refused {len(failed)} {what}: {failed[0].get('Code')}")
