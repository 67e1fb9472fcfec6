"""A sequence's executions that ended early, told apart (``ops.sequence_view.ended``): an exit
on one of its exit events is its goal reached, listed with the subscriber, not as a failure."""

from __future__ import annotations

import json
from datetime import UTC, datetime
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


def test_a_function_error_s_cause_reads_as_its_message_without_the_stack_trace() -> None:
    trace = ['  File "/var/task/shared/sequences/steps.py", line 261, in _require_pair\n']
    cause = {"errorMessage": "the EXEC pair is gone", "errorType": "SequenceHalted", "stackTrace": trace}
    long = "x" * 500
    sfn: Any = SimpleNamespace(
        client=Described(
            {
                "arn:lambda": {"input": "{}", "error": "SequenceHalted", "cause": json.dumps(cause)},
                "arn:long": {"input": "{}", "error": "States.Runtime", "cause": long},
                "arn:list": {"input": "{}", "error": "States.Runtime", "cause": "[1, 2]"},
                "arn:deep": {"input": "[" * 5000, "error": "States.Runtime", "cause": "[" * 5000},
            }
        )
    )
    found = ended(
        sfn, [execution(arn, "FAILED") for arn in ("arn:lambda", "arn:long", "arn:list", "arn:deep")]
    )
    assert [e.reason for e in found] == [
        "failed SequenceHalted the EXEC pair is gone",
        "failed States.Runtime " + "x" * 200,
        "failed States.Runtime [1, 2]",
        "failed States.Runtime " + "[" * 200,  # nested too deep to parse: as it is, and no address
    ]
    assert found[3].email == ""


class History:
    """GetExecutionHistory, newest first: the state each execution entered last, when, and with
    what input."""

    def __init__(self, entered: dict[str, tuple[str, dict[str, Any]]]) -> None:
        self.entered = entered

    def get_execution_history(self, executionArn: str, **_: Any) -> dict[str, Any]:  # noqa: N803
        name, given = self.entered[executionArn]
        details = {"name": name, "input": json.dumps(given)}
        event = {"id": 2, "type": "StateEntered", "timestamp": ENTERED, "stateEnteredEventDetails": details}
        return {"events": [event]}


ENTERED = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)


def test_a_subscriber_s_executions_say_the_step_they_are_at_and_what_comes_next_when() -> None:
    from ops.sequence_view import current_steps
    from shared.sequences import SEQUENCES_DIR
    from shared.sequences.validate import load_catalog

    catalog, _ = load_catalog(SEQUENCES_DIR)
    sfn: Any = SimpleNamespace(
        client=History(
            {
                "arn:1": ("S2_wait_1d", {}),
                "arn:2": ("S3_send_onboarding-tips", {}),
                "arn:3": ("S5T1_send_onboarding-pro-tips", {}),  # the then-branch's last step
                "arn:4": ("S8_tag", {}),
            }
        )
    )
    executions = [
        SimpleNamespace(sequence_id="onboarding", execution_arn=f"arn:{n}") for n in range(1, 5)
    ] + [SimpleNamespace(sequence_id="gone", execution_arn="arn:9")]  # no longer in the catalog
    found = current_steps(sfn, catalog, executions)
    assert found["arn:1"] == {
        "step": "wait 1d",
        "next": "send onboarding/tips",
        "next_condition": None,
        "next_at": "2026-11-21T09:00:00.000Z",  # its entry plus a day
    }
    assert (found["arn:2"]["step"], found["arn:2"]["next"], found["arn:2"]["next_at"]) == (
        "send onboarding/tips",
        "wait 2d",
        None,  # running now
    )
    assert found["arn:3"]["next"] == "wait 1w"  # not the else-branch's send
    assert found["arn:4"]["next"] == "end"
    assert found["arn:9"]["step"] == ""


def test_with_a_send_window_a_wait_ends_when_its_schedule_task_said() -> None:
    from ops.sequence_view import Position, StepNode, whereabouts

    nodes = [StepNode("S1", "send", "send a", 0), StepNode("S2", "wait", "wait 1d", 0, wait_s=86400),
             StepNode("S3", "send", "send b", 0)]  # fmt: skip
    waiting = Position("S2_wait_1d", ENTERED, {"r": {"wake": "2026-11-21T14:00:00.000Z"}})
    assert whereabouts(nodes, waiting, windowed=True)["next_at"] == "2026-11-21T14:00:00.000Z"
    assert whereabouts(nodes, waiting)["next_at"] == "2026-11-21T09:00:00.000Z"
    assert whereabouts(nodes, None) == {"step": "", "next": "", "next_condition": None, "next_at": None}


def test_a_callback_task_that_mailed_is_in_its_wait_from_when_it_was_submitted() -> None:
    """A send and the wait after it are one callback Task: while the step function runs the
    execution is sending; once it returned (``TaskSubmitted``) it waits, in the step its payload's
    ``wait_step`` names, from then on."""
    from ops.sequence_view import current_steps
    from shared.sequences import SEQUENCES_DIR
    from shared.sequences.validate import load_catalog

    submitted_at = datetime(2026, 11, 20, 9, 0, 5, tzinfo=UTC)
    parameters = json.dumps({"FunctionName": "step", "Payload": {"action": "send", "wait_step": "S2"}})
    entered = {
        "id": 2,
        "type": "StateEntered",
        "timestamp": ENTERED,
        "stateEnteredEventDetails": {"name": "S1_send_onboarding-welcome", "input": "{}"},
    }
    scheduled = {"id": 3, "type": "TaskScheduled", "taskScheduledEventDetails": {"parameters": parameters}}
    submitted = {"id": 5, "type": "TaskSubmitted", "timestamp": submitted_at}
    histories = {"arn:sending": [scheduled, entered], "arn:waiting": [submitted, scheduled, entered]}
    sfn: Any = SimpleNamespace(
        client=SimpleNamespace(
            get_execution_history=lambda executionArn, **_: {"events": histories[executionArn]}
        )
    )
    catalog, _ = load_catalog(SEQUENCES_DIR)
    executions = [SimpleNamespace(sequence_id="onboarding", execution_arn=arn) for arn in histories]
    found = current_steps(sfn, catalog, executions)
    assert (found["arn:sending"]["step"], found["arn:sending"]["next_at"]) == (
        "send onboarding/welcome",
        None,
    )
    assert found["arn:waiting"] == {
        "step": "wait 1d",
        "next": "send onboarding/tips",
        "next_condition": None,
        "next_at": "2026-11-21T09:00:05.000Z",  # a day after the Task was submitted
    }
