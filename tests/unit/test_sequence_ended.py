"""A sequence's executions that ended early, told apart (``ops.sequence_view.ended``): an exit
on one of its exit events is its goal reached, listed with the subscriber, not as a failure."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from ops.admin import FailedExecution
from ops.sequence_view import ended


class Described:
    """Step Functions' DescribeExecution of a few executions (what AWS keeps of a stop)."""

    def __init__(self, answers: dict[str, dict[str, Any]]) -> None:
        self.answers = answers

    def describe_execution(self, executionArn: str) -> dict[str, Any]:  # noqa: N803 - boto3's name
        return self.answers[executionArn]


def execution(arn: str, status: str) -> FailedExecution:
    return FailedExecution(
        "onboarding", status, arn[-8:], arn, "2026-11-01T00:00:00+00:00", "2026-11-02T00:00:00+00:00"
    )


def test_an_exit_on_a_goal_event_is_an_exit_with_the_subscriber_not_a_failure() -> None:
    def given(email: str, **stop: str) -> dict[str, Any]:
        return {"input": json.dumps({"email": email, "sequence": "onboarding"}), **stop}

    sfn: Any = SimpleNamespace(
        client=Described(
            {
                "arn:goal": given(
                    "ann@example.com", error="mailstep.stopped", cause="event purchase.completed"
                ),
                "arn:unsub": given("bob@example.com", error="mailstep.stopped", cause="unsubscribed (SES)"),
                "arn:fault": given("cy@example.com", error="States.TaskFailed", cause="boom"),
                "arn:bare": given("di@example.com"),  # a stop whose cause is not kept
            }
        )
    )
    found = ended(
        sfn,
        [
            execution("arn:goal", "ABORTED"),
            execution("arn:unsub", "ABORTED"),
            execution("arn:fault", "FAILED"),
            execution("arn:bare", "ABORTED"),
        ],
    )
    assert [(e.kind, e.email, e.reason) for e in found] == [
        ("exit", "ann@example.com", "goal reached: purchase.completed"),
        ("stopped", "bob@example.com", "unsubscribed (SES)"),
        ("failed", "cy@example.com", "failed States.TaskFailed boom"),
        ("stopped", "di@example.com", "stopped (no reason recorded)"),
    ]
    assert ended(sfn, []) == []


class History:
    """GetExecutionHistory, newest first: the state each execution entered last."""

    def __init__(self, entered: dict[str, str]) -> None:
        self.entered = entered

    def get_execution_history(self, executionArn: str, **_: Any) -> dict[str, Any]:  # noqa: N803
        name = self.entered[executionArn]
        return {"events": [{"id": 2, "type": "WaitStateEntered", "stateEnteredEventDetails": {"name": name}}]}


def test_a_subscriber_s_executions_say_the_step_they_are_at() -> None:
    from ops.sequence_view import current_steps
    from shared.sequences import SEQUENCES_DIR
    from shared.sequences.validate import load_catalog

    catalog, _ = load_catalog(SEQUENCES_DIR)
    sfn: Any = SimpleNamespace(client=History({"arn:1": "S2_wait", "arn:2": "S3_send"}))
    executions = [
        SimpleNamespace(sequence_id="onboarding", execution_arn="arn:1"),
        SimpleNamespace(sequence_id="onboarding", execution_arn="arn:2"),
        SimpleNamespace(sequence_id="gone", execution_arn="arn:3"),  # no longer in the catalog
    ]
    assert current_steps(sfn, catalog, executions) == {
        "arn:1": "wait 1d",
        "arn:2": "send onboarding/tips",
        "arn:3": "",
    }
