"""The local runtime's Retry intervals run on the virtual clock and, as on Step Functions, end
when their execution is stopped (``local_aws.hooks._RetryTime``): moto's interpreter, with the
runtime's hooks, on a paused clock that would otherwise hold the interval for ever."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from unittest import mock

import pytest
from moto.core.config import default_user_config
from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl

from local_aws import hooks
from local_aws.clock import VirtualClock
from shared.core.aws import client
from tests.eventually import eventually

# A state that fails every time (its one branch is a Fail state), retried after 30 s, 3 times
ALWAYS_RETRIED = {
    "StartAt": "Try",
    "States": {
        "Try": {
            "Type": "Parallel",
            "Branches": [{"StartAt": "Boom", "States": {"Boom": {"Type": "Fail", "Error": "Boom"}}}],
            "Retry": [{"ErrorEquals": ["States.ALL"], "IntervalSeconds": 30, "MaxAttempts": 3}],
            "End": True,
        }
    },
}


@pytest.fixture
def paused(aws: None) -> Iterator[VirtualClock]:
    clock = VirtualClock()
    clock.pause()
    previous = dict(default_user_config.get("stepfunctions", {}))
    default_user_config.setdefault("stepfunctions", {})["execute_state_machine"] = True
    with (
        mock.patch.object(hooks.ACTIVE, "clock", clock),
        mock.patch.object(retrier_decl, "time", hooks._RetryTime()),
        mock.patch.object(retrier_decl.RetrierDecl, "_eval_body", hooks._retrier_eval_body),
    ):
        yield clock
        clock.resume()  # whatever the test left held goes on
    default_user_config["stepfunctions"] = previous


def test_an_execution_stopped_during_a_retry_interval_ends_aborted_at_once(paused: VirtualClock) -> None:
    sfn = client("stepfunctions")
    machine = sfn.create_state_machine(
        name=f"retry-stop-{uuid.uuid4().hex[:8]}",
        definition=json.dumps(ALWAYS_RETRIED),
        roleArn="arn:aws:iam::123456789012:role/sfn",
    )["stateMachineArn"]
    arn = sfn.start_execution(stateMachineArn=machine)["executionArn"]
    # Given its first Retry interval held by the paused clock
    eventually(lambda: paused.held == 1, 10, "the retry interval held by the paused clock", interval_s=0.02)
    # When it is stopped
    sfn.stop_execution(executionArn=arn, error="operator", cause="stopped by hand")
    # Then it ends ABORTED while the clock stays paused, the interval not served
    eventually(
        lambda: sfn.describe_execution(executionArn=arn)["status"] == "ABORTED",
        10,
        "the stopped execution ABORTED",
        interval_s=0.05,
    )
    assert paused.paused and paused.held == 0 and paused.waits == []
    sfn.delete_state_machine(stateMachineArn=machine)
