"""Callback Tasks on the local runtime: a send and the wait after it are one Task that the
one-time EventBridge Scheduler schedule it created resumes (SendTaskSuccess) on the virtual clock
(docs/sequences.md, "Shapes tried"; docs/local-runtime.md, "EventBridge Scheduler").

The clock is paused to hold executions in their callback; every test uses its own addresses.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from shared.core import specs
from shared.sequences.schedules import SEND_TASK_SUCCESS_TARGET, schedule_name
from shared.sequences.sfn import state_transitions
from tests.e2e.conftest import Local
from tests.e2e.helpers import eventually, mails, paused_clock, post, run_status
from tests.e2e.helpers import unique_email as unique
from tests.e2e.test_sequences import by_source, pair, waiting

GROUP = specs.schedule_group_name(specs.STACK_NAME)
DAY = 86400


def schedule(local: Local, execution: str, step: str) -> dict[str, Any] | None:
    """The schedule that resumes ``step``'s callback Task of ``execution``; None once it is gone."""
    try:
        found: dict[str, Any] = local.client("scheduler").get_schedule(
            GroupName=GROUP, Name=schedule_name(step, execution)
        )
    except ClientError as exc:
        assert exc.response["Error"]["Code"] == "ResourceNotFoundException", exc
        return None
    return found


def subscribe(local: Local, email: str) -> str:
    (result,) = post(local, {"type": "subscriber.subscribed", "email": email, "id": f"s-{email}"})
    assert result["sequences_started"] == ["onboarding"]
    arn = pair(local, email, "onboarding")
    assert arn is not None
    return arn


def test_the_callback_resumes_at_the_wake_up_time_on_the_virtual_clock_and_not_before(local: Local) -> None:
    email = unique("callback-wake")
    with paused_clock(local):
        started = datetime.now(UTC)
        arn = subscribe(local, email)
        # Given the welcome sent and its callback Task waiting for its schedule
        eventually(lambda: waiting(local, arn), what="the welcome's callback Task to wait")
        found = schedule(local, arn, "S1")
        assert found is not None
        # Then the schedule is one-time, at the wake-up a day later, resuming this Task's token
        at = datetime.fromisoformat(found["ScheduleExpression"].removeprefix("at(").removesuffix(")"))
        at = at.replace(tzinfo=UTC)
        assert started + timedelta(days=1) <= at + timedelta(seconds=1)
        assert at <= datetime.now(UTC) + timedelta(days=1, seconds=1)
        assert found["ActionAfterCompletion"] == "DELETE" and found["FlexibleTimeWindow"] == {"Mode": "OFF"}
        assert found["Target"]["Arn"] == SEND_TASK_SUCCESS_TARGET
        assert set(json.loads(found["Target"]["Input"])) == {"TaskToken", "Output"}
        # ... and while virtual time stands still, the execution does not go on
        eventually(lambda: local.status()["clock"]["held"] >= 1, what="the clock to hold the schedule")
        assert by_source(mails(local, {email})[email]) == {"onboarding": ["onboarding/welcome"]}
        assert waiting(local, arn) and run_status(local, arn) == "RUNNING"
        advanced = local.status()["clock"]["advanced_s"]
    # When the clock goes on, the schedule fires: the Task resumes, and the drip runs to its end
    eventually(lambda: run_status(local, arn) == "SUCCEEDED", what="the onboarding to end")
    sent = by_source(mails(local, {email})[email])["onboarding"]
    assert sent[:2] == ["onboarding/welcome", "onboarding/tips"] and len(sent) == 4
    assert local.status()["clock"]["advanced_s"] - advanced >= (1 + 2 + 7) * DAY - 3 * 2
    # ... each schedule deleted itself after it fired
    eventually(lambda: schedule(local, arn, "S1") is None, what="the welcome's schedule to be deleted")
    assert schedule(local, arn, "S3") is None and schedule(local, arn, "S5") is None
    # ... and the run cost one transition per mail: 4 Tasks, no Wait state
    history = local.client("stepfunctions").get_execution_history(executionArn=arn, maxResults=1000)["events"]
    assert state_transitions(history) == 4
    # ... the schedules resumed it with the scheduler role, whose policy allowed SendTaskSuccess on
    # this state machine, and the step function created them passing that role
    status, report = local.http("GET", "/_local/iam")
    assert status == 200
    machine = arn.replace(":execution:", ":stateMachine:").rsplit(":", 1)[0]
    resumed = [
        c for c in report["calls"] if c["action"] == "states:SendTaskSuccess" and c["resource"] == machine
    ]
    assert (
        resumed and all(c["allowed"] for c in resumed) and not resumed[0]["function"].startswith("mailstep-")
    )
    passed = {c["function"] for c in report["calls"] if c["action"] == "iam:PassRole" and c["allowed"]}
    assert passed == {"mailstep-sequence-step"}


def test_a_stopped_members_schedule_fires_into_a_dead_token_and_changes_nothing(local: Local) -> None:
    email = unique("callback-stop")
    with paused_clock(local):
        arn = subscribe(local, email)
        eventually(lambda: waiting(local, arn), what="the welcome's callback Task to wait")
        assert schedule(local, arn, "S1") is not None
        # When the member unsubscribes: the execution stops while its schedule still waits
        (result,) = post(local, {"type": "subscriber.unsubscribed", "email": email})
        assert result["sequences_stopped"] == ["onboarding"]
        eventually(lambda: run_status(local, arn) == "ABORTED", what="the onboarding to be stopped")
        assert schedule(local, arn, "S1") is not None
    # Then the schedule fires when the clock goes on, into the stopped execution's token: it is
    # refused, the schedule is gone, and nothing else happens
    eventually(lambda: schedule(local, arn, "S1") is None, what="the stopped member's schedule to fire")
    history = local.client("stepfunctions").get_execution_history(executionArn=arn, maxResults=1000)["events"]
    assert history[-1]["type"] == "ExecutionAborted" and run_status(local, arn) == "ABORTED"
    assert by_source(mails(local, {email})[email]) == {"onboarding": ["onboarding/welcome"]}
    assert pair(local, email, "onboarding") is None


def test_a_callback_delivered_twice_sends_nothing_twice(local: Local) -> None:
    email = unique("callback-twice")
    sfn = local.client("stepfunctions")
    with paused_clock(local):
        arn = subscribe(local, email)
        eventually(lambda: waiting(local, arn), what="the welcome's callback Task to wait")
        found = schedule(local, arn, "S1")
        assert found is not None
        request = json.loads(found["Target"]["Input"])
        # Given the callback delivered once (as the schedule would: its token and output) ...
        sfn.send_task_success(taskToken=request["TaskToken"], output=request["Output"])
        eventually(
            lambda: len(mails(local, {email})[email]) == 2 and waiting(local, arn),
            what="the tips mail and its callback Task to wait",
        )
        before = sfn.get_execution_history(executionArn=arn, maxResults=1000)["events"]
    # When the schedule fires as well (the same token again, a second delivery) and the clock goes on
    eventually(lambda: schedule(local, arn, "S1") is None, what="the welcome's schedule to fire")
    eventually(lambda: run_status(local, arn) == "SUCCEEDED", what="the onboarding to end")
    # Then every step sent once, and the duplicate added no transition
    sent = by_source(mails(local, {email})[email])["onboarding"]
    assert len(sent) == 4 and len(set(sent)) == 4, sent
    after = sfn.get_execution_history(executionArn=arn, maxResults=1000)["events"]
    assert after[: len(before)] == before
    assert state_transitions(after) == 4
