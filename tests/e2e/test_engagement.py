"""Engagement on the local runtime: the send queue -> local SES -> SNS -> engagement queue ->
engagement function, then the CLI reads the result."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from shared.sending.jobs import SendJob
from shared.store.stats import StatsStore
from tests.e2e.conftest import Local
from tests.e2e.helpers import (
    EVENTS,
    MAIN,
    add_contact,
    engage,
    enqueue,
    item,
    ok_json,
    ops,
    outbox,
    paused_clock,
    post,
    run_status,
    ses_send,
    subscribe,
    suppressed_by_bounce,
    wait_for_events,
)
from tests.eventually import eventually


def queue_send(local: Local, email: str, source: str, step: str) -> None:
    enqueue(
        local,
        SendJob(
            email=email,
            template="onboarding/welcome",
            source=source,
            step=step,
            subject="Hello",
            transactional=True,
        ),
    )


def mailed(local: Local, local_part: str, source_prefix: str, until: str) -> tuple[str, str]:
    """A new contact and a source of their own, and one welcome mail of that source queued to
    them; returns (email, source) once the subscriber has an event of type ``until``."""
    email = f"{local_part}-{uuid.uuid4().hex[:8]}@example.com"
    source = f"{source_prefix}-{uuid.uuid4().hex[:6]}"
    add_contact(local, email)
    queue_send(local, email, source, "welcome")
    wait_for_events(local, email, until)
    return email, source


@pytest.mark.parametrize(("local_part", "reason"), [("bounce", "bounce"), ("complaint", "complaint")])
def test_a_simulator_bounce_or_complaint_suppresses_stops_executions_and_skips_the_next_send(
    local: Local, local_part: str, reason: str
) -> None:
    email = f"{local_part}+{uuid.uuid4().hex[:8]}@simulator.amazonses.com"
    source = f"e2e-{reason}"
    audience = f"e2e-{reason}-{uuid.uuid4().hex[:6]}"  # a tag only this subscriber has
    with paused_clock(local):  # onboarding waits after its welcome mail, a running execution
        (answer,) = post(local, {"type": "subscriber.subscribed", "email": email, "tags": [audience]})
        assert answer["sequences_started"] == ["onboarding"]
        running = item(local, f"SUB#{email}", "EXEC#onboarding")
        assert running is not None
        # the welcome mail reaches the simulator, whose bounce/complaint comes back through SES
        # events; the event item is written last (after flag, SUPPRESSION item and stops)
        wait_for_events(local, email, reason)
        assert item(local, f"SUB#{email}", "SUPPRESSION") is not None
        profile = item(local, f"SUB#{email}", "PROFILE")
        assert profile is not None and profile["suppressed"]["BOOL"] is True
        assert item(local, f"SUB#{email}", "EXEC#onboarding") is None
        assert item(local, "EXEC#onboarding", f"SUB#{email}") is None
        # the real execution stopped, not just its pair: the stop can reach it while its welcome
        # Task's function is still returning, and moto ends it when that Task comes back
        arn = running["execution_arn"]["S"]
        eventually(lambda: run_status(local, arn) == "ABORTED", what="the onboarding execution aborted")
    queue_send(local, email, source, "second")
    skipped = wait_for_events(local, email, "send_skipped")
    assert skipped[0]["reason"] == "suppressed"
    listed = ok_json(ops(local, "suppression", "list", "--json"))
    assert email in [s["email"] for s in listed]
    # The next broadcast to them skips them with the reason, and sends nothing
    answer = ops(
        local, "broadcast", "send", "--template", "newsletter/monthly", "--tag", audience, "--id", audience,
        "--yes", timeout=150,
    )  # fmt: skip
    assert answer.returncode == 0, answer.stdout + answer.stderr
    stored = ok_json(ops(local, "broadcast", "get", audience))
    assert (stored["status"], stored["sent"], stored["skipped"]) == ("done", 0, {"suppressed": 1}), stored


def test_two_opens_of_one_mail_give_total_two_unique_one_and_stats_match_the_events(local: Local) -> None:
    email, source = mailed(local, "reader", "e2e-opens", until="delivery")
    engage(local, email, "open", "open", "click")

    def counted() -> dict[str, Any] | None:  # the send and its Delivery: the stats fold's, seconds later
        found = {r["metric"]: r for r in ok_json(ops(local, "stats", "--sequence", source, "--json"))["rows"]}
        return found if found["sent"]["total"] == found["delivered"]["total"] == 1 else None

    rows = eventually(counted, timeout_s=60, what="the send and its Delivery counted by the stats fold")
    assert (rows["opened"]["total"], rows["opened"]["unique"]) == (2, 1)
    assert (rows["clicked"]["total"], rows["clicked"]["unique"]) == (1, 1)
    assert (rows["sent"]["total"], rows["delivered"]["total"], rows["delivered"]["rate"]) == (1, 1, 1.0)
    stats = StatsStore(MAIN, EVENTS, client=local.client("dynamodb"))
    recomputed = stats.recompute(source=source)
    assert recomputed.rows() == stats.source(source).event_metrics().rows()
    recounted = {r["metric"]: r["total"] for r in recomputed.rows()}
    assert recounted["sent"] is None and recounted["delivered"] is None  # not an event, not indexed
    since = ops(local, "stats", "--sequence", source, "--since", "2020-01-01")
    assert since.returncode == 0 and "n/a" in since.stdout, since.stdout
    table = ops(local, "stats", "--template", "onboarding/welcome")
    assert table.returncode == 0 and "opened" in table.stdout


def test_a_local_reply_becomes_a_reply_event_matched_to_the_send(local: Local) -> None:
    email, source = mailed(local, "replier", "e2e-replies", until="send")
    result = ops(local, "local", "reply", email, "--body", "Yes, tell me more")
    assert result.returncode == 0, result.stderr
    (reply,) = wait_for_events(local, email, "reply")
    assert reply["data"]["source"] == source and reply["data"]["template"] == "onboarding/welcome"
    assert reply["data"]["snippet"] == "Yes, tell me more"


def bounce_unknown_address(local: Local) -> str:
    """A mail to an address mailstep has no subscriber for (sent through the configuration set,
    as another system sharing it would), whose permanent bounce then reaches the engagement
    function through SES events -> SNS -> SQS. Returns the address once it is suppressed."""
    email = f"bounce+{uuid.uuid4().hex[:8]}@simulator.amazonses.com"
    assert item(local, f"SUB#{email}", "PROFILE") is None
    ses_send(local, email, template="onboarding_swelcome", source="elsewhere", text="Hi", retries=3)
    suppressed_by_bounce(local, email)
    return email


def test_a_bounced_address_that_later_subscribes_is_never_mailed(local: Local) -> None:
    # Given a permanent bounce for an address that was no subscriber
    email = bounce_unknown_address(local)
    mailed_before = [m["message_id"] for m in outbox(local) if email in m["destination"]]
    assert len(mailed_before) == 1  # the mail that bounced

    # When the address subscribes afterwards
    result = subscribe(local, email)

    # Then no sequence starts, a mail queued for it is skipped as suppressed, nothing is sent
    assert result["sequences_started"] == [], result
    profile = item(local, f"SUB#{email}", "PROFILE")
    assert profile is not None and profile["suppressed"]["BOOL"] is True
    queue_send(local, email, f"e2e-after-bounce-{uuid.uuid4().hex[:6]}", "welcome")
    skipped = wait_for_events(local, email, "send_skipped")
    assert [e["reason"] for e in skipped] == ["suppressed"]
    assert [m["message_id"] for m in outbox(local) if email in m["destination"]] == mailed_before


def test_a_bounce_for_an_address_that_is_no_subscriber_creates_no_subscriber(local: Local) -> None:
    email = bounce_unknown_address(local)

    assert item(local, f"SUB#{email}", "PROFILE") is None
    missing = ops(local, "subscribers", "get", email)
    assert missing.returncode == 1 and "no such subscriber" in missing.stderr
