"""Engagement on the local runtime: the send queue -> local SES -> SNS -> engagement queue ->
engagement function, then the CLI reads the result."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from shared.sending.jobs import SendJob, to_message
from shared.store.stats import StatsStore
from tests.e2e.conftest import ROOT, Local, subprocess_env
from tests.e2e.test_sequences import paused_clock

MAIN, EVENTS = "mailstep-main", "mailstep-events"


def wait_for(check: Callable[[], Any], timeout_s: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def run(local: Local, module: str, *args: str) -> subprocess.CompletedProcess[str]:
    """One of the engagement CLI modules, as ``mailstep <command>`` runs it."""
    return subprocess.run(
        [sys.executable, "-m", module, *args, "--state-dir", str(local.state_dir)],
        cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def subscribe(local: Local, email: str, tags: list[str] | None = None) -> None:
    """Create the subscriber with an event that triggers no sequence (``subscriber.subscribed``
    would start onboarding, whose mails would mix with the ones these tests send)."""
    event = {"type": "contact.created", "email": email, "tags": tags or []}
    code, _ = local.http("POST", "/v1/events", event, key=local.api_key)
    assert code == 200


def queue_send(local: Local, email: str, source: str, step: str) -> None:
    sqs = local.client("sqs")
    url = sqs.get_queue_url(QueueName="mailstep-send")["QueueUrl"]
    job = SendJob(
        email=email,
        template="onboarding/welcome",
        source=source,
        step=step,
        subject="Hello",
        transactional=True,
    )
    sqs.send_message(QueueUrl=url, MessageBody=to_message(job))


def events_of(local: Local, email: str) -> list[dict[str, Any]]:
    result = run(local, "cli.events_cmd", email, "--json")
    assert result.returncode == 0, result.stderr
    return list(json.loads(result.stdout))


def item(local: Local, pk: str, sk: str) -> dict[str, Any] | None:
    return (
        local.client("dynamodb").get_item(TableName=MAIN, Key={"PK": {"S": pk}, "SK": {"S": sk}}).get("Item")
    )


@pytest.mark.parametrize(("local_part", "reason"), [("bounce", "bounce"), ("complaint", "complaint")])
def test_a_simulator_bounce_or_complaint_suppresses_stops_executions_and_skips_the_next_send(
    local: Local, local_part: str, reason: str
) -> None:
    email = f"{local_part}+{uuid.uuid4().hex[:8]}@simulator.amazonses.com"
    source = f"e2e-{reason}"
    audience = f"e2e-{reason}-{uuid.uuid4().hex[:6]}"  # a tag only this subscriber has
    with paused_clock(local):  # onboarding waits after its welcome mail, a running execution
        event = {"type": "subscriber.subscribed", "email": email, "tags": [audience]}
        code, answer = local.http("POST", "/v1/events", event, key=local.api_key)
        assert code == 200 and answer["results"][0]["sequences_started"] == ["onboarding"]
        running = item(local, f"SUB#{email}", "EXEC#onboarding")
        assert running is not None
        # the welcome mail reaches the simulator, whose bounce/complaint comes back through SES
        # events; the event item is written last (after flag, SUPPRESSION item and stops)
        wait_for(
            lambda: any(e["type"] == reason for e in events_of(local, email)), what=f"the {reason} event"
        )
        assert item(local, f"SUB#{email}", "SUPPRESSION") is not None
        profile = item(local, f"SUB#{email}", "PROFILE")
        assert profile is not None and profile["suppressed"]["BOOL"] is True
        assert item(local, f"SUB#{email}", "EXEC#onboarding") is None
        assert item(local, "EXEC#onboarding", f"SUB#{email}") is None
        execution = local.client("stepfunctions").describe_execution(
            executionArn=running["execution_arn"]["S"]
        )
        assert execution["status"] == "ABORTED"  # the real execution stopped, not just its pair
    queue_send(local, email, source, "second")
    skipped = wait_for(
        lambda: [e for e in events_of(local, email) if e["type"] == "send_skipped"], what="the skipped send"
    )
    assert skipped[0]["reason"] == "suppressed"
    listed = run(local, "cli.suppression_cmd", "list", "--json")
    assert email in [s["email"] for s in json.loads(listed.stdout)]
    # The next broadcast to them skips them with the reason, and sends nothing
    answer = local.cli(
        "broadcast", "send", "--template", "newsletter/monthly", "--tag", audience, "--id", audience,
        "--yes", "--state-dir", str(local.state_dir), timeout=150,
    )  # fmt: skip
    assert answer.returncode == 0, answer.stdout + answer.stderr
    got = local.cli("broadcast", "get", audience, "--state-dir", str(local.state_dir))
    stored = json.loads(got.stdout)
    assert (stored["status"], stored["sent"], stored["skipped"]) == ("done", 0, {"suppressed": 1}), stored


def test_two_opens_of_one_mail_give_total_two_unique_one_and_stats_match_the_events(local: Local) -> None:
    email = f"reader-{uuid.uuid4().hex[:8]}@example.com"
    source = f"e2e-opens-{uuid.uuid4().hex[:6]}"
    subscribe(local, email)
    queue_send(local, email, source, "welcome")
    wait_for(lambda: any(e["type"] == "delivery" for e in events_of(local, email)), what="the delivery")
    for _ in range(2):
        result = local.cli("local", "open", email, "--state-dir", str(local.state_dir))
        assert result.returncode == 0, result.stderr
    result = local.cli("local", "click", email, "--state-dir", str(local.state_dir))
    assert result.returncode == 0, result.stderr
    wait_for(
        lambda: sum(e["type"] in ("open", "click") for e in events_of(local, email)) == 3, what="3 events"
    )

    shown = run(local, "cli.stats_cmd", "--sequence", source, "--json")
    assert shown.returncode == 0, shown.stderr
    rows = {r["metric"]: r for r in json.loads(shown.stdout)["rows"]}
    assert (rows["opened"]["total"], rows["opened"]["unique"]) == (2, 1)
    assert (rows["clicked"]["total"], rows["clicked"]["unique"]) == (1, 1)
    assert (rows["sent"]["total"], rows["delivered"]["total"], rows["delivered"]["rate"]) == (1, 1, 1.0)
    stats = StatsStore(MAIN, EVENTS, client=local.client("dynamodb"))
    recomputed = stats.recompute(source=source)
    assert recomputed.rows() == stats.source(source).event_metrics().rows()
    assert {r["metric"]: r["total"] for r in recomputed.rows()}["sent"] is None  # not an SES event
    since = run(local, "cli.stats_cmd", "--sequence", source, "--since", "2020-01-01")
    assert since.returncode == 0 and "n/a" in since.stdout, since.stdout
    table = run(local, "cli.stats_cmd", "--template", "onboarding/welcome")
    assert table.returncode == 0 and "opened" in table.stdout


def test_a_local_reply_becomes_a_reply_event_matched_to_the_send(local: Local) -> None:
    email = f"replier-{uuid.uuid4().hex[:8]}@example.com"
    source = f"e2e-replies-{uuid.uuid4().hex[:6]}"
    subscribe(local, email)
    queue_send(local, email, source, "welcome")
    wait_for(lambda: any(e["type"] == "send" for e in events_of(local, email)), what="the send log")
    result = run(local, "cli.replies_cmd", email, "--body", "Yes, tell me more")
    assert result.returncode == 0, result.stderr
    (reply,) = wait_for(
        lambda: [e for e in events_of(local, email) if e["type"] == "reply"], what="the reply"
    )
    assert reply["data"]["source"] == source and reply["data"]["template"] == "onboarding/welcome"
    assert reply["data"]["snippet"] == "Yes, tell me more"
