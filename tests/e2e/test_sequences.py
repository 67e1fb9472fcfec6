"""Sequences on the local runtime, through its HTTP API: events start and stop the state
machines generated from ``sequences/*.yaml``, executions walk their waits on the virtual
clock, and mail lands in the local SES outbox.

Executions are held mid-sequence by pausing the virtual clock (``POST /_local/clock``):
a paused Wait state does not end until the clock resumes, unless its execution is
stopped. Every test uses its own addresses, so it reads only its own mail and pairs.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.core.specs import STATE_MACHINE_PREFIX
from shared.sequences.engine import execution_name
from shared.sequences.sfn import execution_arn
from tests.e2e.conftest import Local
from tests.e2e.helpers import (
    MAIN,
    eml,
    eventually,
    item,
    mails,
    one_click,
    partition,
    paused_clock,
    post,
    profile_status,
    run_status,
    scan_all,
    unsubscribe_targets,
)
from tests.e2e.helpers import unique_email as unique

WALKERS = 20  # both A/B check-in subjects are picked (all 20 alike: 2 in a million)
DAY = 86400
ONBOARDING_WAITS_S = DAY + 2 * DAY + 7 * DAY
CHECK_IN_SUBJECTS = {"How is it going?", "Quick check-in"}  # the step and its A/B variant


# ----- helpers ------------------------------------------------------------------------------
_MACHINES: dict[str, dict[str, str]] = {}  # endpoint -> state machine name -> ARN


def machine_arn(local: Local, sequence_id: str) -> str:
    endpoint = local.state["endpoint"]
    if endpoint not in _MACHINES:
        machines = local.client("stepfunctions").list_state_machines()["stateMachines"]
        _MACHINES[endpoint] = {m["name"]: m["stateMachineArn"] for m in machines}
    return _MACHINES[endpoint][f"{STATE_MACHINE_PREFIX}{sequence_id}"]


def run_arn(local: Local, sequence_id: str, email: str, event_id: str) -> str:
    """The execution a trigger event with this id starts (the documented deterministic name)."""
    return execution_arn(machine_arn(local, sequence_id), execution_name(sequence_id, email, event_id))


def runs_for(local: Local, sequence_id: str, email: str, since: datetime) -> list[str]:
    """Every execution of the sequence started since ``since`` for this subscriber."""
    sfn, found = local.client("stepfunctions"), []
    pages = sfn.get_paginator("list_executions").paginate(stateMachineArn=machine_arn(local, sequence_id))
    for page in pages:
        for run in page["executions"]:
            if run["startDate"] >= since:
                described = sfn.describe_execution(executionArn=run["executionArn"])
                if json.loads(described["input"])["email"] == email:
                    found.append(str(run["executionArn"]))
    return found


def waiting(local: Local, arn: str) -> bool:
    """The execution sits in a wait: a Wait state entered and not left, or a callback Task (a send
    and the wait after it) whose step function returned and which waits for its schedule
    (``TaskSubmitted`` is its last event)."""
    history = local.client("stepfunctions").get_execution_history(executionArn=arn)["events"]
    return bool(history) and history[-1]["type"] in ("WaitStateEntered", "TaskSubmitted")


def exec_items(local: Local, emails: set[str]) -> list[tuple[str, str]]:
    """Every EXEC pair item (both halves) of these subscribers, scanned through the endpoint."""
    found = []
    for found_item in scan_all(local):
        pk, sk = found_item["PK"]["S"], found_item["SK"]["S"]
        subscriber = (pk if pk.startswith("SUB#") else sk).removeprefix("SUB#")
        if "EXEC#" in pk + sk and subscriber in emails:
            found.append((pk, sk))
    return found


def members(local: Local, sequence_id: str) -> set[str]:
    """Subscribers with an active execution: the ``EXEC#<id>`` partition (one small query)."""
    return {i["SK"]["S"].removeprefix("SUB#") for i in partition(local, f"EXEC#{sequence_id}")}


def pair(local: Local, email: str, sequence_id: str) -> str | None:
    found = item(local, f"SUB#{email}", f"EXEC#{sequence_id}")
    return None if found is None else str(found["execution_arn"]["S"])


def by_source(messages: list[dict[str, Any]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for meta in messages:
        out.setdefault(meta["source"], []).append(meta["template"])
    return out


# ----- onboarding, 20 subscribers -----------------------------------------------------------
def test_twenty_subscribers_walk_onboarding_through_every_wait_with_their_branch(local: Local) -> None:
    run = unique("walk").removesuffix("@example.com")
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
    eventually(lambda: not members(local, "onboarding") & emails, 150, "every onboarding execution to end")
    for email, _, _ in readers:  # the last step removes the pair; its execution ends just after
        arn = run_arn(local, "onboarding", email, f"signup-{email}")
        eventually(lambda arn=arn: run_status(local, arn) != "RUNNING", 30, f"{email}'s execution to end")
        assert run_status(local, arn) == "SUCCEEDED"
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
    tagged = local.client("dynamodb").query(
        TableName=MAIN,
        KeyConditionExpression="PK = :pk",
        ExpressionAttributeValues={":pk": {"S": "TAG#onboarded"}},
        ConsistentRead=True,
    )["Items"]
    assert emails <= {i["SK"]["S"].removeprefix("SUB#") for i in tagged}  # the last step's tag change
    # each wait is a callback Task's schedule: its time less the moment it was armed, within 2 s
    # of the step's duration (the wake-up is rounded to the second; docs/local-runtime.md)
    assert local.status()["clock"]["advanced_s"] - advanced_before >= WALKERS * (ONBOARDING_WAITS_S - 3 * 2)
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
        eventually(
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
            assert one_click(local, unsubscribe_targets(eml(local, welcome))[0]) == 200

        assert eventually(lambda: run_status(local, marketing) == "ABORTED", what="onboarding to be stopped")
        assert pair(local, email, "onboarding") is None
        assert pair(local, email, "order-shipped") == transactional
        assert run_status(local, transactional) == "RUNNING"
    eventually(lambda: run_status(local, transactional) == "SUCCEEDED", what="the order mails to finish")

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
        eventually(
            lambda: all(waiting(local, str(arn)) for arn in runs.values()),
            what="both trials in their 11d wait",
        )

        (purchase,) = post(local, {"type": "purchase.completed", "email": buyer, "id": f"p-{buyer}"})

        assert purchase["sequences_stopped"] == ["trial-expiring"] and purchase["sequences_started"] == []
        assert pair(local, buyer, "trial-expiring") is None
    eventually(
        lambda: run_status(local, str(runs[browser])) == "SUCCEEDED", what="the browser's trial to end"
    )
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
    eventually(lambda: run_status(local, first) == "SUCCEEDED", what="onboarding to finish")
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
