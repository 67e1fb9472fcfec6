"""A stopped execution ends ABORTED, as on Step Functions, even when a Task fails while the stop
lands (``local_aws.hooks._set_error``): moto skips the failing Task's Retry and Catch (they
evaluate only while the execution runs) and then replaced the stop with the Task's error, so the
execution ended FAILED. In a deployment's flow: a sequence's step that finds the subscriber's
pair gone while their unsubscribe stops the execution (the console listed it as a failure)."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from moto.awslambda.models import LambdaFunction
from moto.core.config import default_user_config
from moto.stepfunctions.parser.asl.eval.environment import Environment
from moto.stepfunctions.responses import StepFunctionResponse

from local_aws import hooks
from shared.core.aws import client
from tests.eventually import eventually
from tests.integration.conftest import in_process_function


def definition(function_arn: str) -> dict[str, Any]:
    """One Task, its every error caught (the sequences' Tasks catch ``SequenceHalted`` so)."""
    return {
        "StartAt": "Step",
        "States": {
            "Step": {
                "Type": "Task",
                "Resource": function_arn,
                "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Caught"}],
                "End": True,
            },
            "Caught": {"Type": "Succeed"},
        },
    }


class Step:
    """The function: it answers, with an error, only once the test let it (after the stop)."""

    def __init__(self) -> None:
        self.called = threading.Event()
        self.answer = threading.Event()

    def invoke(self, function: Any, event: Any = None) -> tuple[str, bool, str]:
        self.called.set()
        self.answer.wait(10)
        error = {"errorType": "SequenceHalted", "errorMessage": "the EXEC pair is gone"}
        return json.dumps(error), True, ""


@pytest.fixture
def step(aws: None) -> Iterator[tuple[Step, str, str]]:
    previous = dict(default_user_config.get("stepfunctions", {}))
    default_user_config.setdefault("stepfunctions", {})["execute_state_machine"] = True
    name = f"stop-stays-{uuid.uuid4().hex[:8]}"
    function_arn, role = in_process_function(name, name)
    fake = Step()
    with (
        mock.patch.object(
            LambdaFunction, "_invoke_lambda", lambda self, event=None: fake.invoke(self, event)
        ),
        mock.patch.object(StepFunctionResponse, "stop_execution", hooks._stop_execution),
        mock.patch.object(Environment, "set_error", hooks._set_error),
    ):
        yield fake, function_arn, role
        fake.answer.set()
    client("lambda").delete_function(FunctionName=name)
    default_user_config["stepfunctions"] = previous


def test_an_execution_stopped_while_its_task_fails_ends_aborted_with_the_stop_s_cause(
    step: tuple[Step, str, str],
) -> None:
    fake, function_arn, role = step
    sfn = client("stepfunctions")
    machine = sfn.create_state_machine(
        name=f"stop-stays-{uuid.uuid4().hex[:8]}",
        definition=json.dumps(definition(function_arn)),
        roleArn=role,
    )["stateMachineArn"]
    arn = sfn.start_execution(stateMachineArn=machine)["executionArn"]
    # Given its Task's function running
    assert fake.called.wait(10), "the Task's function was not invoked"
    # When the execution is stopped, and then the function fails
    sfn.stop_execution(executionArn=arn, error="mailstep.stopped", cause="unsubscribed")
    fake.answer.set()
    # Then it ends ABORTED with the stop's error and cause, not FAILED with the Task's error
    found = eventually(
        lambda: (d := sfn.describe_execution(executionArn=arn))["status"] != "RUNNING" and d,
        10,
        "the stopped execution ended",
        interval_s=0.05,
    )
    assert (found["status"], found.get("error"), found.get("cause")) == (
        "ABORTED",
        "mailstep.stopped",
        "unsubscribed",
    )
    events = sfn.get_execution_history(executionArn=arn)["events"]
    assert [e["type"] for e in events if e["type"].startswith("Execution")] == [
        "ExecutionStarted",
        "ExecutionAborted",
    ]
    sfn.delete_state_machine(stateMachineArn=machine)
