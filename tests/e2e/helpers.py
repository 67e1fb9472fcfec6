"""What the e2e tests do again and again against the session's local runtime, in one place.

Every wait here has a deadline and fails with an ``AssertionError`` that says what it waited
for, how long, and the last thing it saw. Fixtures live in ``conftest.py``; these are plain
functions taking the :class:`~tests.e2e.conftest.Local` runtime.
"""

from __future__ import annotations

import json
import re
import ssl
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from typing import Any, TypeVar
from urllib.parse import urlsplit

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client

from ops.outbox import read_outbox
from shared.core.specs import STATE_MACHINE_PREFIX
from shared.sending.jobs import SendJob, to_message
from shared.sending.sender import decode_tag_value
from shared.store import keys
from shared.store.pending import mailbox_key
from tests.e2e import forks
from tests.e2e.conftest import ROOT, Local, fresh, subprocess_env
from tests.eventually import eventually

MAIN, EVENTS = "mailstep-main", "mailstep-events"
# Events per POST: each request stays well inside the API function's 29 s timeout even on a loaded
# 2-core machine (10 sequence-starting events took over 29 s there once: a 500, as in AWS).
EVENTS_PER_POST = 5
FORM = "application/x-www-form-urlencoded"
BROWSER_UA = "Mozilla/5.0 (X11; Linux x86_64) mailstep-e2e"  # what ``request`` sends

T = TypeVar("T")


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


def new_audience(local: Local, prefix: str, count: int, domain: str = "example.com") -> tuple[str, list[str]]:
    """``count`` new readers sharing a new tag (``contact.created``: no sequence starts); the tag
    (``<prefix>-<run>``) and their addresses."""
    run = uuid.uuid4().hex[:6]
    readers = [f"{prefix[0]}{i:03d}-{run}@{domain}" for i in range(count)]
    add_contacts(local, readers, f"{prefix}-{run}")
    return f"{prefix}-{run}", readers


def add_contacts(local: Local, emails: list[str], tag: str) -> None:
    """``contact.created`` (no sequence starts) for each of ``emails`` with ``tag``, 100 a request."""
    for start in range(0, len(emails), 100):
        events = [{"type": "contact.created", "email": e, "tags": [tag]} for e in emails[start : start + 100]]
        status, answer = local.http("POST", "/v1/events", {"events": events}, local.api_key)
        assert status == 200, answer


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


@contextmanager
def ses_rate(local: Local, max_send_rate: float) -> Iterator[None]:
    """The local SES accepts ``max_send_rate`` mails/s inside (1,000/s again on the way out)."""
    status, _ = local.http("POST", "/_local/ses", {"max_send_rate": max_send_rate})
    assert status == 200
    try:
        yield
    finally:
        local.http("POST", "/_local/ses", {"max_send_rate": 1000})


# ----- HTTP as a browser or a mail client sends it ----------------------------------------------
class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def request(
    url: str,
    method: str = "GET",
    body: bytes | str | None = None,
    content_type: str | None = None,
    context: ssl.SSLContext | None = None,
) -> tuple[int, dict[str, str], str]:
    """One request, redirects not followed: (status, headers, body text)."""
    data = body.encode() if isinstance(body, str) else body
    headers = {"user-agent": BROWSER_UA}
    if content_type:
        headers["content-type"] = content_type
    opener = urllib.request.build_opener(_NoRedirect, urllib.request.HTTPSHandler(context=context))
    req = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with opener.open(req, timeout=60) as answer:
            return answer.status, {k.lower(): v for k, v in answer.headers.items()}, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read().decode()


def one_click(local: Local, link: str) -> int:
    """RFC 8058 one-click POST of a List-Unsubscribe link, to the same route on the local front."""
    parts = urlsplit(link)
    url = local.api_url + parts.path + (f"?{parts.query}" if parts.query else "")
    return request(url, "POST", "List-Unsubscribe=One-Click", FORM)[0]


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


def broadcast_record(local: Local, broadcast_id: str) -> dict[str, Any]:
    """A broadcast's record as ``mailstep broadcast get`` shows it (less its engagement counters),
    read in this process through the store the operator code uses: a test that polls a record
    does not start an interpreter for each look."""
    from shared.broadcasts.records import BroadcastStore

    store = BroadcastStore(local.state["tables"]["table_name"], client=local.client("dynamodb"))
    record = store.get(broadcast_id)
    assert record is not None, f"no broadcast {broadcast_id}"
    return dict(record.public())


def events_of(local: Local, email: str) -> list[dict[str, Any]]:
    """The subscriber's timeline as ``mailstep events <email> --json`` prints it, read in this
    process through the same store call (tests poll it; ``tests/e2e/test_topics.py`` runs the
    command itself)."""
    from shared.core.models import normalise_email
    from shared.store.subscribers import SubscriberStore

    tables = local.state["tables"]
    ddb = local.client("dynamodb")
    store = SubscriberStore(tables["table_name"], tables["events_table_name"], client=ddb)
    return list(json.loads(json.dumps(store.list_events(normalise_email(email)), default=str)))


def wait_for_events(local: Local, email: str, kind: str, what: str = "") -> list[dict[str, Any]]:
    """The subscriber's events of type ``kind``, once there is one."""
    return eventually(
        lambda: [e for e in events_of(local, email) if e["type"] == kind], what=what or f"the {kind} event"
    )


def engage(local: Local, email: str, *actions: str) -> None:
    """``mailstep local open|click <email>`` for each of ``actions`` (the subscriber's mail is
    delivered), then wait until each one is an event of the subscriber."""
    kinds = set(actions)

    def count() -> int:
        return sum(e["type"] in kinds for e in events_of(local, email))

    before = count()
    for action in actions:
        result = ops(local, "local", action, email)
        assert result.returncode == 0, result.stderr
    eventually(lambda: count() == before + len(actions), what=f"{len(actions)} more {'/'.join(kinds)} events")


def suppressed_by_bounce(local: Local, email: str) -> None:
    """Wait until a permanent bounce of a mail to ``email`` suppressed it: the SUPPRESSION
    item, then the bounce event (the consumer writes the event item last)."""
    eventually(lambda: item(local, f"SUB#{email}", "SUPPRESSION"), what="the bounce's SUPPRESSION record")
    wait_for_events(local, email, "bounce")


def run_status(local: Local, arn: str) -> str | None:
    """An execution's status (RUNNING, SUCCEEDED, ABORTED, ...), None when there is none."""
    try:
        return str(local.client("stepfunctions").describe_execution(executionArn=arn)["status"])
    except local.client("stepfunctions").exceptions.ExecutionDoesNotExist:
        return None


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


def age_signup_cooldown(local: Local, email: str, seconds: int = 7200) -> None:
    """The cooldown of ``email``'s mailbox passed: its last confirmation mail ``seconds`` back
    (the sign-up cooldown is per mailbox: ``shared.store.pending.mailbox_key``)."""
    local.client("dynamodb").update_item(
        TableName=MAIN,
        Key={"PK": {"S": keys.signup_mailbox_pk(mailbox_key(email))}, "SK": {"S": keys.COOLDOWN}},
        UpdateExpression="SET last_mail_at = last_mail_at - :seconds",
        ExpressionAttributeValues={":seconds": {"N": str(seconds)}},
    )


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


def failed_execution(local: Local, sequence_id: str, run: str) -> str:
    """An execution ``run`` of a state machine named like the one of sequence ``sequence_id``
    (with a role of that name) whose only state fails; its ARN once it FAILED."""
    sfn = local.client("stepfunctions")
    role = local.client("iam").create_role(
        RoleName=sequence_id,
        AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []}),
    )["Role"]["Arn"]
    definition = {"StartAt": "Boom", "States": {"Boom": {"Type": "Fail", "Error": "E2E", "Cause": "test"}}}
    machine = sfn.create_state_machine(
        name=f"{STATE_MACHINE_PREFIX}{sequence_id}", definition=json.dumps(definition), roleArn=role
    )["stateMachineArn"]
    arn = str(sfn.start_execution(stateMachineArn=machine, name=run, input="{}")["executionArn"])
    eventually(
        lambda: sfn.describe_execution(executionArn=arn)["status"] == "FAILED",
        what=f"the execution {run} of {sequence_id} to fail",
    )
    return arn


def profile_status(local: Local, email: str) -> str:
    found = item(local, f"SUB#{email}", "PROFILE")
    assert found is not None, f"no profile for {email}"
    return str(found["status"]["S"])


# ----- SQS --------------------------------------------------------------------------------------
def queue_url(local: Local, name: str) -> str:
    return str(local.client("sqs").get_queue_url(QueueName=name)["QueueUrl"])


def receipt(email: str, source: str, step: str, order_id: str = "A-1", total: str = "$9") -> SendJob:
    """A transactional ``transactional/receipt`` job, as a shop queues it for an order."""
    data = {"order_id": order_id, "total": total}
    return SendJob(
        email=email, template="transactional/receipt", source=source, step=step, transactional=True, data=data
    )


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
    eventually(lambda: drained(sqs, url), timeout_s, f"{url} to hold no message", interval_s=0.3)


def settled(local: Local, *queues: str) -> None:
    """Before asserting that nothing more happened: every message of ``queues`` (local names; the
    send queue when none) consumed, none waiting, none in a function's hands. A function deletes
    its message only after its work, so what a message could still cause has happened."""
    sqs = local.client("sqs")
    for name in queues or ("mailstep-send",):
        wait_until_drained(sqs, queue_url(local, name))


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
def ses_send(
    local: Local,
    to: str,
    *,
    template: str = "onboarding_welcome",
    source: str = "e2e",
    text: str = "Hi there",
    retries: int = 1,
    **extra: Any,
) -> str:
    """A simple mail through the runtime's SES and the ``mailstep`` configuration set, tagged
    like the send pipeline tags its mail (as another system sharing the set would send it);
    ``extra``: more SendEmail parameters. Returns the SES message id."""
    return str(
        local.client("sesv2", retries=retries).send_email(
            FromEmailAddress="Acme <hello@acme.test>",
            Destination={"ToAddresses": [to]},
            Content={"Simple": {"Subject": {"Data": "Hello"}, "Body": {"Text": {"Data": text}}}},
            ConfigurationSetName="mailstep",
            EmailTags=[{"Name": "template", "Value": template}, {"Name": "source", "Value": source}],
            **extra,
        )["MessageId"]
    )


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


def unsubscribe_targets(msg: EmailMessage) -> list[str]:
    """The targets of a message's List-Unsubscribe header, the one-click https link first."""
    return [t.strip().removeprefix("<").removesuffix(">") for t in str(msg["List-Unsubscribe"]).split(",")]


def link(local: Local, meta: dict[str, Any], path: str) -> str:
    """The first https link to ``path`` (``/c/`` or ``/u/``) in a mail's HTML part."""
    message = eml(local, meta)
    html = message.get_body(("html",)).get_content()  # type: ignore[union-attr]
    found = re.search(r'href="(https://[^"]+' + re.escape(path) + r'[^"]+)"', html)
    assert found, f"no {path} link in {meta['message_id']}"
    return found.group(1).replace("&amp;", "&")


def public(local: Local, url: str) -> str:
    """A link of a mail (PUBLIC_BASE_URL is the runtime's https front) as a URL to request."""
    parts = urlsplit(url)
    assert local.public_url.startswith(f"{parts.scheme}://{parts.netloc}"), url
    return url


# ----- the MCP server ---------------------------------------------------------------------------
class Tools:
    """The tools of a ``mailstep mcp`` session, called through the official SDK's client."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session

    async def call(self, name: str, **arguments: Any) -> Any:
        result = await self.session.call_tool(name, arguments)
        assert not result.is_error, f"{name}: {result.content}"
        structured = result.structured_content
        assert structured is not None, name
        # A list result arrives as {"result": [...]}, a dict as itself; the text blocks agree.
        value = structured["result"] if set(structured) == {"result"} else structured
        texts = [json.loads(c.text) for c in result.content]  # type: ignore[union-attr]
        assert texts == (value if isinstance(value, list) else [value])
        return value

    async def error(self, name: str, **arguments: Any) -> str:
        result = await self.session.call_tool(name, arguments)
        assert result.is_error, f"{name} should have failed: {result.content}"
        return str(result.content[0].text)  # type: ignore[union-attr]


def run_session(local: Local, body: Callable[[Tools], Awaitable[None]]) -> None:
    """Start ``mailstep mcp`` on stdio against the runtime and run ``body`` with its tools."""
    args = ["mcp", "--state-dir", str(local.state_dir)]
    env = subprocess_env()
    command = [sys.executable, "-m", "cli.main", *args] if fresh() else forks.shim(args, cwd=ROOT, env=env)
    params = StdioServerParameters(command=command[0], args=command[1:], env=env, cwd=str(ROOT))

    async def main() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await body(Tools(session))

    anyio.run(main)
