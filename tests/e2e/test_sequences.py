"""Sequences on the local runtime, through its HTTP API: events start and stop the state
machines generated from ``sequences/*.yaml``, executions walk their waits on the virtual
clock, and mail lands in the local SES outbox.

Executions are held mid-sequence by pausing the virtual clock (``POST /_local/clock``):
a paused Wait state does not end until the clock resumes, unless its execution is
stopped. Every test uses its own addresses, so it reads only its own mail and pairs.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from email import policy
from email.parser import BytesParser
from typing import Any
from urllib.parse import urlsplit

import pytest

from shared.core.specs import STATE_MACHINE_PREFIX
from shared.sending.sender import decode_tag_value
from shared.sequences.engine import execution_name
from shared.sequences.sfn import execution_arn
from tests.e2e.conftest import Local

MAIN = "mailstep-main"
BATCH = 10  # events per POST: keeps each request well inside the client timeout
WALKERS = 50
DAY = 86400
ONBOARDING_WAITS_S = DAY + 2 * DAY + 7 * DAY
CHECK_IN_SUBJECTS = {"How is it going?", "Quick check-in"}  # the step and its A/B variant


# ----- helpers ------------------------------------------------------------------------------
def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}@example.com"


def wait_for(check: Callable[[], Any], timeout_s: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)


def post(local: Local, *events: dict[str, Any]) -> list[dict[str, Any]]:
    """POST /v1/events in batches; the results of every event, in order."""
    results: list[dict[str, Any]] = []
    for start in range(0, len(events), BATCH):
        status, answer = local.http(
            "POST", "/v1/events", {"events": list(events[start : start + BATCH])}, local.api_key
        )
        assert status == 200, answer
        results += answer["results"]
    return results


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


_MACHINES: dict[str, dict[str, str]] = {}  # endpoint -> state machine name -> ARN
_CLIENTS: dict[tuple[str, str], Any] = {}


def aws(local: Local, service: str) -> Any:
    """One boto3 client per service and runtime (making a client costs more than a call)."""
    key = (local.state["endpoint"], service)
    if key not in _CLIENTS:
        _CLIENTS[key] = local.client(service)
    return _CLIENTS[key]


def machine_arn(local: Local, sequence_id: str) -> str:
    endpoint = local.state["endpoint"]
    if endpoint not in _MACHINES:
        machines = aws(local, "stepfunctions").list_state_machines()["stateMachines"]
        _MACHINES[endpoint] = {m["name"]: m["stateMachineArn"] for m in machines}
    return _MACHINES[endpoint][f"{STATE_MACHINE_PREFIX}{sequence_id}"]


def run_arn(local: Local, sequence_id: str, email: str, event_id: str) -> str:
    """The execution a trigger event with this id starts (the documented deterministic name)."""
    return execution_arn(machine_arn(local, sequence_id), execution_name(sequence_id, email, event_id))


def runs_for(local: Local, sequence_id: str, email: str, since: datetime) -> list[str]:
    """Every execution of the sequence started since ``since`` for this subscriber."""
    sfn, found = aws(local, "stepfunctions"), []
    pages = sfn.get_paginator("list_executions").paginate(stateMachineArn=machine_arn(local, sequence_id))
    for page in pages:
        for run in page["executions"]:
            if run["startDate"] >= since:
                described = sfn.describe_execution(executionArn=run["executionArn"])
                if json.loads(described["input"])["email"] == email:
                    found.append(str(run["executionArn"]))
    return found


def run_status(local: Local, arn: str) -> str | None:
    try:
        return str(aws(local, "stepfunctions").describe_execution(executionArn=arn)["status"])
    except aws(local, "stepfunctions").exceptions.ExecutionDoesNotExist:
        return None


def waiting(local: Local, arn: str) -> bool:
    """The execution sits in a Wait state (entered, not left)."""
    history = aws(local, "stepfunctions").get_execution_history(executionArn=arn)["events"]
    return bool(history) and history[-1]["type"] == "WaitStateEntered"


def exec_items(local: Local, emails: set[str]) -> list[tuple[str, str]]:
    """Every EXEC pair item (both halves) of these subscribers, scanned through the endpoint."""
    ddb, found = aws(local, "dynamodb"), []
    kwargs: dict[str, Any] = {}
    while True:
        page = ddb.scan(TableName=MAIN, ConsistentRead=True, **kwargs)
        for item in page["Items"]:
            pk, sk = item["PK"]["S"], item["SK"]["S"]
            subscriber = (pk if pk.startswith("SUB#") else sk).removeprefix("SUB#")
            if "EXEC#" in pk + sk and subscriber in emails:
                found.append((pk, sk))
        if "LastEvaluatedKey" not in page:
            return found
        kwargs = {"ExclusiveStartKey": page["LastEvaluatedKey"]}


def members(local: Local, sequence_id: str) -> set[str]:
    """Subscribers with an active execution: the ``EXEC#<id>`` partition (one small query)."""
    pages = (
        aws(local, "dynamodb")
        .get_paginator("query")
        .paginate(
            TableName=MAIN,
            KeyConditionExpression="PK = :pk",
            ExpressionAttributeValues={":pk": {"S": f"EXEC#{sequence_id}"}},
            ConsistentRead=True,
        )
    )
    return {i["SK"]["S"].removeprefix("SUB#") for page in pages for i in page["Items"]}


def pair(local: Local, email: str, sequence_id: str) -> str | None:
    item = (
        aws(local, "dynamodb")
        .get_item(
            TableName=MAIN,
            Key={"PK": {"S": f"SUB#{email}"}, "SK": {"S": f"EXEC#{sequence_id}"}},
            ConsistentRead=True,
        )
        .get("Item")
    )
    return None if item is None else str(item["execution_arn"]["S"])


def mails(local: Local, emails: set[str]) -> dict[str, list[dict[str, Any]]]:
    """Outbox metadata per recipient, oldest first, with the decoded template and source."""
    found: dict[str, list[dict[str, Any]]] = {e: [] for e in emails}
    for path in local.outbox.glob("*.json"):
        meta = json.loads(path.read_text())
        (to,) = meta["destination"]
        if to in found:
            tags = meta["email_tags"]
            meta["template"] = decode_tag_value(tags["template"])
            meta["source"] = decode_tag_value(tags["source"])
            found[to].append(meta)
    for messages in found.values():
        messages.sort(key=lambda m: (m["timestamp"], m["message_id"]))
    return found


def by_source(messages: list[dict[str, Any]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for meta in messages:
        out.setdefault(meta["source"], []).append(meta["template"])
    return out


def eml(local: Local, meta: dict[str, Any]) -> Any:
    return BytesParser(policy=policy.default).parsebytes(
        (local.outbox / f"{meta['message_id']}.eml").read_bytes()
    )


def profile_status(local: Local, email: str) -> str:
    item = aws(local, "dynamodb").get_item(
        TableName=MAIN, Key={"PK": {"S": f"SUB#{email}"}, "SK": {"S": "PROFILE"}}, ConsistentRead=True
    )["Item"]
    return str(item["status"]["S"])


def one_click(local: Local, link: str) -> int:
    """RFC 8058 one-click POST of a List-Unsubscribe link, to the same route on the local front."""
    parts = urlsplit(link)
    request = urllib.request.Request(  # noqa: S310 - the local HTTP front
        local.api_url + parts.path + (f"?{parts.query}" if parts.query else ""),
        data=b"List-Unsubscribe=One-Click",
        headers={"content-type": "application/x-www-form-urlencoded"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


# ----- onboarding, 50 subscribers -----------------------------------------------------------
def test_fifty_subscribers_walk_onboarding_through_every_wait_with_their_branch(local: Local) -> None:
    run = uuid.uuid4().hex[:8]
    readers = [(f"walk{i:02d}-{run}@example.com", f"Reader{i:02d}", i % 2 == 1) for i in range(WALKERS)]
    emails = {email for email, _, _ in readers}
    advanced_before = local.status()["clock"]["advanced_s"]

    results = post(
        local,
        *(
            {
                "type": "subscriber.subscribed",
                "email": email,
                "first_name": name,
                "id": f"signup-{email}",
                **({"tags": {"add": ["pro"]}} if pro else {}),
            }
            for email, name, pro in readers
        ),
    )

    assert [r["sequences_started"] for r in results] == [["onboarding"]] * WALKERS
    wait_for(lambda: not members(local, "onboarding") & emails, 150, "every onboarding execution to end")
    for email, _, _ in readers:
        assert run_status(local, run_arn(local, "onboarding", email, f"signup-{email}")) == "SUCCEEDED"
    received = mails(local, emails)
    for email, name, pro in readers:
        got = [(m["template"], m["subject"]) for m in received[email]]
        branch = (
            ("onboarding/pro-tips", "Getting the most out of Pro")
            if pro
            else ("onboarding/upgrade", "What Pro adds")
        )
        assert got[:3] == [
            ("onboarding/welcome", f"Welcome, {name}"),
            ("onboarding/tips", "Three tips for your first week"),
            branch,
        ], email
        assert len(got) == 4 and got[3][0] == "onboarding/check-in" and got[3][1] in CHECK_IN_SUBJECTS, got
        assert {(m["source"], m["email_tags"]["kind"]) for m in received[email]} == {
            ("onboarding", "marketing")
        }
    assert {received[e][3]["subject"] for e in emails} == CHECK_IN_SUBJECTS  # both A/B variants were picked
    tagged = aws(local, "dynamodb").query(
        TableName=MAIN,
        KeyConditionExpression="PK = :pk",
        ExpressionAttributeValues={":pk": {"S": "TAG#onboarded"}},
        ConsistentRead=True,
    )["Items"]
    assert emails <= {i["SK"]["S"].removeprefix("SUB#") for i in tagged}  # the last step's tag change
    assert local.status()["clock"]["advanced_s"] - advanced_before >= WALKERS * ONBOARDING_WAITS_S
    assert exec_items(local, emails) == []


# ----- stops ---------------------------------------------------------------------------------
@pytest.mark.parametrize("via", ["event", "one-click-link"])
def test_unsubscribing_mid_sequence_stops_marketing_and_transactional_continues(
    local: Local, via: str
) -> None:
    email = unique(f"unsub-{via}")
    with paused_clock(local):
        results = post(
            local,
            {"type": "subscriber.subscribed", "email": email, "first_name": "Una", "id": f"s-{email}"},
            {"type": "order.shipped", "email": email, "id": f"o-{email}", "data": {"order_id": "A-17"}},
        )
        assert [r["sequences_started"] for r in results] == [["onboarding"], ["order-shipped"]]
        marketing, transactional = pair(local, email, "onboarding"), pair(local, email, "order-shipped")
        assert marketing and transactional
        wait_for(
            lambda: waiting(local, marketing) and waiting(local, transactional),
            what="both in their first wait",
        )
        first = mails(local, {email})[email]
        assert by_source(first) == {
            "onboarding": ["onboarding/welcome"],
            "order-shipped": ["transactional/shipped"],
        }

        if via == "event":
            (result,) = post(local, {"type": "subscriber.unsubscribed", "email": email})
            assert result["sequences_stopped"] == ["onboarding"]
        else:
            welcome = next(m for m in first if m["source"] == "onboarding")
            link = str(eml(local, welcome)["List-Unsubscribe"]).split(",")[0].strip().strip("<>")
            assert one_click(local, link) == 200

        assert wait_for(lambda: run_status(local, marketing) == "ABORTED", what="onboarding to be stopped")
        assert pair(local, email, "onboarding") is None
        assert pair(local, email, "order-shipped") == transactional
        assert run_status(local, transactional) == "RUNNING"
    wait_for(lambda: run_status(local, transactional) == "SUCCEEDED", what="the order mails to finish")

    received = mails(local, {email})[email]
    assert by_source(received) == {
        "onboarding": ["onboarding/welcome"],  # nothing after the unsubscribe
        "order-shipped": ["transactional/shipped", "transactional/delivery-check"],
    }
    shipped = [m for m in received if m["source"] == "order-shipped"]
    assert [m["subject"] for m in shipped] == ["Your order A-17 is on its way", "Did your order arrive?"]
    assert all(eml(local, m)["List-Unsubscribe"] is None for m in shipped)
    assert profile_status(local, email) == "unsubscribed"
    assert exec_items(local, {email}) == []


def test_a_purchase_exits_trial_expiring_before_its_first_mail(local: Local) -> None:
    buyer, browser = unique("buyer"), unique("browser")
    with paused_clock(local):
        started = post(
            local,
            *(
                {"type": "trial.started", "email": e, "id": f"t-{e}", "data": {"trial_ends_on": "Friday"}}
                for e in (buyer, browser)
            ),
        )
        assert [r["sequences_started"] for r in started] == [["trial-expiring"]] * 2
        runs = {e: pair(local, e, "trial-expiring") for e in (buyer, browser)}
        wait_for(
            lambda: all(waiting(local, str(arn)) for arn in runs.values()),
            what="both trials in their 11d wait",
        )

        (purchase,) = post(local, {"type": "purchase.completed", "email": buyer, "id": f"p-{buyer}"})

        assert purchase["sequences_stopped"] == ["trial-expiring"] and purchase["sequences_started"] == []
        assert pair(local, buyer, "trial-expiring") is None
    wait_for(lambda: run_status(local, str(runs[browser])) == "SUCCEEDED", what="the browser's trial to end")
    assert run_status(local, str(runs[buyer])) == "ABORTED"
    received = mails(local, {buyer, browser})
    assert received[buyer] == []
    assert [m["template"] for m in received[browser]] == ["trial/expiring", "trial/last-day"]
    assert exec_items(local, {buyer, browser}) == []


# ----- starts ---------------------------------------------------------------------------------
def test_a_trigger_posted_three_times_starts_one_execution_and_onboarding_is_entered_once(
    local: Local,
) -> None:
    email, since = unique("once"), datetime.now(UTC) - timedelta(seconds=1)
    signup = {"type": "subscriber.subscribed", "email": email, "first_name": "Otto", "id": f"signup-{email}"}
    with paused_clock(local):
        outcomes = [post(local, signup)[0] for _ in range(3)]
        # the retries get the stored outcome of the first POST (idempotency) and start nothing
        assert [(o["sequences_started"], o["replayed"]) for o in outcomes] == [
            (["onboarding"], False),
            (["onboarding"], True),
            (["onboarding"], True),
        ]
        first = run_arn(local, "onboarding", email, signup["id"])
        assert runs_for(local, "onboarding", email, since) == [first]
        assert pair(local, email, "onboarding") == first

        (again,) = post(local, {**signup, "id": f"signup-again-{email}"})  # a new event while active

        assert again["sequences_started"] == [] and not again["replayed"]
        assert runs_for(local, "onboarding", email, since) == [first]
        assert pair(local, email, "onboarding") == first
    wait_for(lambda: run_status(local, first) == "SUCCEEDED", what="onboarding to finish")
    assert exec_items(local, {email}) == []

    (later,) = post(local, {**signup, "id": f"signup-later-{email}"})  # after the end

    assert later["sequences_started"] == [] and not later["replayed"]
    assert runs_for(local, "onboarding", email, since) == [first]
    assert exec_items(local, {email}) == []
    assert [m["template"] for m in mails(local, {email})[email]] == [
        "onboarding/welcome",
        "onboarding/tips",
        "onboarding/upgrade",
        "onboarding/check-in",
    ]
