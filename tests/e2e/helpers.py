"""What the e2e tests do again and again against the session's local runtime, in one place.

Every wait here has a deadline and fails with an ``AssertionError`` that says what it waited
for, how long, and the last thing it saw. Fixtures live in ``conftest.py``; these are plain
functions taking the :class:`~tests.e2e.conftest.Local` runtime.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from typing import Any, TypeVar

from cli.local.ses import read_outbox
from shared.sending.jobs import SendJob, to_message
from shared.sending.sender import decode_tag_value
from tests.e2e.conftest import Local

MAIN, EVENTS = "mailstep-main", "mailstep-events"
EVENTS_PER_POST = 10  # keeps each request well inside the client timeout

T = TypeVar("T")


# ----- waiting ----------------------------------------------------------------------------------
def wait_for(
    check: Callable[[], T], timeout_s: float = 30.0, what: str = "condition", interval_s: float = 0.1
) -> T:
    """Call ``check`` until it returns something truthy (returned) or ``timeout_s`` passed: then
    fail naming ``what`` and the last value seen. ``check`` runs once more at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what} (last: {value!r:.300})")
        time.sleep(interval_s)


def unique(prefix: str) -> str:
    """``<prefix>-<8 hex>``: names no other test (or run against the same runtime) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def unique_email(prefix: str) -> str:
    return f"{unique(prefix)}@example.com"


# ----- the events API ---------------------------------------------------------------------------
def post(local: Local, *events: dict[str, Any]) -> list[dict[str, Any]]:
    """POST /v1/events in batches; the result of every event, in order (a non-200 fails)."""
    results: list[dict[str, Any]] = []
    for start in range(0, len(events), EVENTS_PER_POST):
        batch = {"events": list(events[start : start + EVENTS_PER_POST])}
        status, answer = local.http("POST", "/v1/events", batch, local.api_key)
        assert status == 200, answer
        results += answer["results"]
    return results


def subscribe(local: Local, email: str, **extra: Any) -> dict[str, Any]:
    """``subscriber.subscribed`` for ``email`` (starts onboarding); the event's result."""
    (result,) = post(local, {"type": "subscriber.subscribed", "email": email, **extra})
    return result


def add_contact(local: Local, email: str, **extra: Any) -> dict[str, Any]:
    """Create or update the subscriber with an event that triggers no sequence (onboarding's
    mails would mix with the ones a test sends itself); the event's result."""
    (result,) = post(local, {"type": "contact.created", "email": email, **extra})
    assert result["sequences_started"] == [], result
    return result


@contextmanager
def paused_clock(local: Local) -> Iterator[None]:
    """Virtual time stands still inside: executions stop at their next Wait."""
    status, clock = local.http("POST", "/_local/clock", {"paused": True})
    assert status == 200 and clock["paused"] is True
    try:
        yield
    finally:
        status, clock = local.http("POST", "/_local/clock", {"paused": False})
        assert status == 200 and clock["paused"] is False


# ----- the CLI ----------------------------------------------------------------------------------
def ops(local: Local, *args: str, timeout: float = 90) -> Any:
    """``mailstep <args> --state-dir <the runtime's>``, as an operator runs it."""
    return local.cli(*args, "--state-dir", str(local.state_dir), timeout=timeout)


def as_json(result: Any) -> Any:
    """The JSON a command printed (no output fails with its exit code and stderr)."""
    assert result.stdout.strip(), f"exit {result.returncode}, no output; stderr: {result.stderr[-2000:]}"
    return json.loads(result.stdout)


def ok_json(result: Any) -> Any:
    """The JSON of a command that must exit 0."""
    assert result.returncode == 0, (
        f"exit {result.returncode}: {result.stdout[-1500:]} {result.stderr[-1500:]}"
    )
    return json.loads(result.stdout)


def events_of(local: Local, email: str) -> list[dict[str, Any]]:
    """The subscriber's timeline (``mailstep events <email> --json``)."""
    return list(ok_json(ops(local, "events", email, "--json")))


# ----- DynamoDB ---------------------------------------------------------------------------------
def scan_all(local: Local, table: str = MAIN) -> list[dict[str, Any]]:
    """Every item of ``table`` (paged, consistent: the session's tables outgrow one page)."""
    pages = local.client("dynamodb").get_paginator("scan").paginate(TableName=table, ConsistentRead=True)
    return [item for page in pages for item in page["Items"]]


def item(local: Local, pk: str, sk: str, table: str = MAIN) -> dict[str, Any] | None:
    """One item by key, read consistently (None when absent)."""
    key = {"PK": {"S": pk}, "SK": {"S": sk}}
    found = local.client("dynamodb").get_item(TableName=table, Key=key, ConsistentRead=True).get("Item")
    return None if found is None else dict(found)


def partition(local: Local, pk: str, table: str = MAIN) -> list[dict[str, Any]]:
    """Every item of one partition (paged, consistent)."""
    pages = (
        local.client("dynamodb")
        .get_paginator("query")
        .paginate(
            TableName=table,
            KeyConditionExpression="PK = :pk",
            ExpressionAttributeValues={":pk": {"S": pk}},
            ConsistentRead=True,
        )
    )
    return [i for page in pages for i in page["Items"]]


def profile_status(local: Local, email: str) -> str:
    found = item(local, f"SUB#{email}", "PROFILE")
    assert found is not None, f"no profile for {email}"
    return str(found["status"]["S"])


# ----- SQS --------------------------------------------------------------------------------------
def queue_url(local: Local, name: str) -> str:
    return str(local.client("sqs").get_queue_url(QueueName=name)["QueueUrl"])


def enqueue(local: Local, job: SendJob, times: int = 1, queue: str = "mailstep-send") -> None:
    """Put a send job on the send queue, as a sequence step or the API does."""
    sqs, url = local.client("sqs"), queue_url(local, queue)
    for _ in range(times):
        sqs.send_message(QueueUrl=url, MessageBody=to_message(job))


def drained(sqs: Any, url: str) -> bool:
    """The queue holds no message, visible or in flight."""
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
    return all(attributes[name] == "0" for name in names)


def wait_until_drained(sqs: Any, url: str, timeout_s: float = 60) -> None:
    wait_for(lambda: drained(sqs, url), timeout_s, f"{url} to hold no message", interval_s=0.3)


def receive_all(sqs: Any, url: str, want: int, timeout_s: float = 10) -> list[dict[str, Any]]:
    """The first ``want`` SNS-enveloped SES records of a test queue (fewer within ``timeout_s``
    fails, naming the ones that came)."""
    records: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    while len(records) < want and time.monotonic() < deadline:
        answer = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        for message in answer.get("Messages", []):
            records.append(json.loads(json.loads(message["Body"])["Message"]))
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    got = [r.get("eventType") for r in records]
    assert len(records) >= want, f"{len(records)} of {want} SES records within {timeout_s} s: {got}"
    return records


# ----- the local SES outbox ---------------------------------------------------------------------
def outbox(local: Local) -> list[dict[str, Any]]:
    """Metadata of every message in the outbox, oldest first, with ``template`` and ``source``
    decoded from the SES tags (None for a message sent without them)."""
    found = read_outbox(local.outbox)
    for meta in found:
        tags = meta.get("email_tags", {})
        meta["template"], meta["source"] = _decoded(tags.get("template")), _decoded(tags.get("source"))
    return found


def _decoded(value: str | None) -> str | None:
    """A tag value as the send pipeline encoded it; a test's own raw send keeps its value."""
    if value is None:
        return None
    try:
        return decode_tag_value(value)
    except ValueError:
        return value


def sent_by(local: Local, source: str) -> list[dict[str, Any]]:
    """Outbox metadata of the messages of one source (a sequence, a broadcast, a test's own)."""
    return [m for m in outbox(local) if m["source"] == source]


def mails(local: Local, emails: set[str]) -> dict[str, list[dict[str, Any]]]:
    """Outbox metadata per recipient, oldest first."""
    found: dict[str, list[dict[str, Any]]] = {e: [] for e in emails}
    for meta in outbox(local):
        for to in meta["destination"]:
            if to in found:
                found[to].append(meta)
    for messages in found.values():
        messages.sort(key=lambda m: (m["timestamp"], m["message_id"]))
    return found


def eml(local: Local, meta: dict[str, Any]) -> EmailMessage:
    """The message as the recipient gets it (the ``.eml`` beside the metadata)."""
    raw = (local.outbox / f"{meta['message_id']}.eml").read_bytes()
    return BytesParser(policy=policy.default).parsebytes(raw)  # type: ignore[return-value]


def messages(local: Local, source: str) -> list[tuple[dict[str, Any], EmailMessage]]:
    """(metadata, parsed message) of every message of ``source``, oldest first."""
    return [(meta, eml(local, meta)) for meta in sent_by(local, source)]
