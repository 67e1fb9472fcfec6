"""Day one on a new AWS account, on the local runtime (docs/deploy.md, "Day one"; docs/sending.md,
"Held, not failed").

The runtime is this file's own: ``mailstep dev --identity-pending --ses-sandbox
--max-24-hour-send 60`` (the sending domain waits for verification, mail only to verified
identities, 60 a day: the sandbox's 200 at a size that keeps the test short).

1. While the identity waits, a subscribe's welcome (a sequence step) and a sign-up's confirmation
   (the sender function) are refused as SES refuses them; nothing is sent, no execution fails and
   nothing reaches a dead-letter queue. After `mailstep local verify example.com` each of them
   is delivered once.
2. A broadcast to 150 (two batches) under the 60-a-day quota sends 60, is ``held``
   (``daily_quota``) with the time it looks again, goes on as the calendar's days pass and
   completes on the third day with 150 mails to 150 readers, 0 failed; a sequence step that
   meets the spent quota waits (its Retry, held by the paused clock here) and sends once when
   the quota frees.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from shared.core import specs
from tests.e2e.conftest import (
    Local,
    dev_runtime,
)
from tests.e2e.helpers import (
    broadcast_record,
    eventually,
    new_audience,
    ops,
    outbox,
    paused_clock,
    sent_by,
    subscribe,
    unique_email,
)
from tests.e2e.test_signup import CONFIRM_TEMPLATE, sign_up

DAILY_QUOTA = 60
# A held broadcast looks again after an hour of the virtual clock (its SQS delay); instant waits
# would make that a loop of refused rounds while the calendar stands still between `advance`s.
# Not faster: the quota is SES's last 24 hours, so a day's sends must span well under a virtual
# day. At 1,800x a loaded machine spread one day's 60 sends over more than a virtual day, the
# next day's quota freed bit by bit, and the broadcast went past its second day's 120 at once.
HOUR_PER_6_S = 600
AUDIENCE = 150
DOMAIN = "example.com"  # the sending domain (hello@example.com) and the readers' (verified with it)


@pytest.fixture(scope="module")
def day_one(tmp_path_factory: pytest.TempPathFactory, artifact: Any) -> Iterator[Local]:
    with dev_runtime(
        tmp_path_factory.mktemp("mailstep-day-one"),
        "--identity-pending",
        "--ses-sandbox",  # DAILY_QUOTA a day (not its 200), at 200 a second (not its 1): to be quick
        *("--speed", str(HOUR_PER_6_S)),
        *("--max-24-hour-send", str(DAILY_QUOTA), "--max-send-rate", "200", "--no-reputation-alarms"),
        report=(tmp_path_factory, "day-one"),
    ) as local:
        yield local


def ses_status(local: Local) -> dict[str, Any]:
    return dict(local.status()["ses"])


def failed_executions(local: Local) -> list[str]:
    sfn = local.client("stepfunctions")
    machines = sfn.list_state_machines()["stateMachines"]
    return [
        e["name"]
        for m in machines
        for e in sfn.list_executions(stateMachineArn=m["stateMachineArn"], statusFilter="FAILED")[
            "executions"
        ]
    ]


def dead_letters(local: Local) -> dict[str, int]:
    """Messages waiting in each dead-letter queue (none may hold any)."""
    sqs = local.client("sqs")
    found = {}
    for url in sqs.list_queues().get("QueueUrls", []):
        if "dead" in url.lower() or "dlq" in url.lower():
            attributes = sqs.get_queue_attributes(
                QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"]
            )
            found[url.rsplit("/", 1)[-1]] = int(attributes["Attributes"]["ApproximateNumberOfMessages"])
    return found


def mails_to(local: Local, email: str) -> list[dict[str, Any]]:
    return [m for m in outbox(local) if email in m["destination"]]


FAILURE_DETAILS = ("lambdaFunctionFailedEventDetails", "taskFailedEventDetails")


def held_welcome(local: Local) -> bool:
    """An onboarding execution still running whose send step failed with ``SendPaused`` (a plain
    Task's failure is a Lambda function's; a callback Task's, the welcome's, a task's)."""
    sfn = local.client("stepfunctions")
    machines = [m for m in sfn.list_state_machines()["stateMachines"] if m["name"].endswith("onboarding")]
    for machine in machines:
        for execution in sfn.list_executions(
            stateMachineArn=machine["stateMachineArn"], statusFilter="RUNNING"
        )["executions"]:
            events = sfn.get_execution_history(executionArn=execution["executionArn"])["events"]
            failures = [e.get(d, {}) for e in events for d in FAILURE_DETAILS]
            if any("SendPaused" in json.dumps(failure) for failure in failures):
                return True
    return False


def welcomes(local: Local, email: str) -> list[dict[str, Any]]:
    return [m for m in mails_to(local, email) if m["template"] == "onboarding/welcome"]


def test_mail_before_the_identity_is_verified_is_held_then_delivered_once(day_one: Local) -> None:
    local = day_one
    assert ses_status(local)["pending_identities"] == [DOMAIN]
    ann, bob = unique_email("welcome"), unique_email("confirm")
    with paused_clock(local):  # the step's Retry waits on the virtual clock: held here
        subscribe(local, ann, first_name="Ann")
        status, _, _ = sign_up(local, {"email": bob}, as_json=True)
        assert status == 200
        # the state asserted: the welcome's execution runs on, its send refused as paused (its
        # Retry waits), and SES refused both mails (the emulator's count of its refusals)
        eventually(lambda: held_welcome(local), 60, "the welcome's step held by its Retry")
        eventually(
            lambda: ses_status(local)["refused_unverified"] >= 2, 60, "both mails refused as unverified"
        )
        assert mails_to(local, ann) == [] and mails_to(local, bob) == []
        assert failed_executions(local) == []
        verify = ops(local, "local", "verify", DOMAIN)
        assert verify.returncode == 0, verify.stderr
        assert "held mail goes out now" in verify.stdout
    assert ses_status(local)["pending_identities"] == []

    welcome = eventually(lambda: welcomes(local, ann), 60, "the welcome")
    confirm = eventually(
        lambda: [m for m in mails_to(local, bob) if m["template"] == CONFIRM_TEMPLATE], 60, "the confirmation"
    )
    assert len(welcome) == 1 and len(confirm) == 1
    assert failed_executions(local) == []
    assert not any(dead_letters(local).values()), dead_letters(local)
    # the held confirmation's job is settled: nothing more arrives for bob
    eventually(lambda: _queue_empty(local, specs.SEND_QUEUE.local_name), 60, "the send queue drained")
    assert len([m for m in mails_to(local, bob) if m["template"] == CONFIRM_TEMPLATE]) == 1


def _queue_empty(local: Local, name: str) -> bool:
    sqs = local.client("sqs")
    url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return all(
        attributes[k] == "0"
        for k in (
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        )
    )


def test_a_broadcast_over_the_daily_quota_sends_over_three_days_once_each(day_one: Local) -> None:
    local = day_one
    tag, readers = new_audience(local, "quota", AUDIENCE, DOMAIN)
    # the day starts with the whole quota: what the first test sent is a day old
    ops(local, "local", "advance", "--days", "1", timeout=600)
    assert ses_status(local)["SentLast24Hours"] == 0

    broadcast_id = tag
    sent = ops(
        local, "broadcast", "send", "--template", "newsletter/monthly", "--tag", tag, "--id", broadcast_id,
        "--yes", "--no-wait",
    )  # fmt: skip
    assert sent.returncode == 0, sent.stdout + sent.stderr

    for day, total in ((1, DAILY_QUOTA), (2, 2 * DAILY_QUOTA)):
        held = eventually(
            lambda: (
                (b := broadcast_record(local, broadcast_id))["status"] == "held"
                and len(sent_by(local, broadcast_id)) == total
                and b
            ),
            240,
            f"day {day}: {total} sent and the broadcast held",
        )
        assert held["hold_reason"] == "daily_quota" and held["resume_at"], held
        assert held["failed"] == 0
        # the next day frees the quota: the held broadcast goes on by itself
        advanced = ops(local, "local", "advance", "--days", "1", timeout=600)
        assert advanced.returncode == 0, advanced.stderr

    done = eventually(
        lambda: (b := broadcast_record(local, broadcast_id))["status"] == "done" and b,
        240,
        "the broadcast done",
    )
    assert done["failed"] == 0 and done["sent"] == AUDIENCE
    delivered = [d for m in sent_by(local, broadcast_id) for d in m["destination"]]
    assert sorted(delivered) == sorted(readers)  # each reader once
    assert not any(dead_letters(local).values()), dead_letters(local)

    # a sequence step that meets the spent quota waits, and sends once when the quota frees
    spent = int(ses_status(local)["SentLast24Hours"])
    local.http("POST", "/_local/ses", {"max_24_hour_send": spent})
    carol = unique_email("quota-step")
    with paused_clock(local):
        before = ses_status(local)["refused_daily_quota"]
        subscribe(local, carol, first_name="Carol")
        eventually(
            lambda: ses_status(local)["refused_daily_quota"] > before, 120, "the welcome refused: quota"
        )
        assert mails_to(local, carol) == []
        local.http("POST", "/_local/ses", {"max_24_hour_send": spent + 20})
    welcome = eventually(lambda: welcomes(local, carol), 120, "the welcome")
    assert len(welcome) == 1
    assert failed_executions(local) == []
