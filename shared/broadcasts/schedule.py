"""``--at``: a Step Functions execution that waits until the send time and then puts the
first ``broadcast.resolve`` message on the control queue. No polling: the Wait state is the
timer (a standard workflow waits up to a year; 3 state transitions per broadcast), and in
the local runtime it runs on the virtual clock.

The CDK construct (``stacks/constructs/broadcasts.py``) builds the same two states;
:func:`definition` is the ASL for the local runtime and the tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shared.broadcasts.model import Broadcast
from shared.sequences.sfn import StepFunctions

STATE_MACHINE_NAME = "mailstep-broadcast-schedule"
WAIT_STATE = "WaitUntilSendTime"
START_STATE = "StartResolving"


def definition(control_queue_url: str) -> dict[str, Any]:
    return {
        "Comment": "mailstep broadcast schedule: wait until the send time, then start resolving",
        "StartAt": WAIT_STATE,
        "States": {
            WAIT_STATE: {"Type": "Wait", "TimestampPath": "$.at", "Next": START_STATE},
            START_STATE: {
                "Type": "Task",
                "Resource": "arn:aws:states:::sqs:sendMessage",
                "Parameters": {"QueueUrl": control_queue_url, "MessageBody.$": "$.message"},
                "Retry": [
                    {
                        "ErrorEquals": ["States.ALL"],
                        "IntervalSeconds": 5,
                        "MaxAttempts": 8,
                        "BackoffRate": 2.0,
                    }
                ],
                "End": True,
            },
        },
    }


def execution_name(record: Broadcast) -> str:
    return f"{record.id}-r{record.round}"


@dataclass(frozen=True)
class Scheduler:
    state_machine_arn: str
    sfn: StepFunctions = field(default_factory=StepFunctions)

    def schedule(self, record: Broadcast, first_message: str) -> str:
        """Start the waiting execution (a retried call finds it by its name)."""
        if record.at is None:
            raise ValueError("the broadcast has no send time")
        result = self.sfn.start(
            self.state_machine_arn, execution_name(record), {"at": record.at, "message": first_message}
        )
        return result.execution_arn

    def unschedule(self, execution_arn: str) -> bool:
        return self.sfn.stop(execution_arn, error="mailstep.cancelled", cause="broadcast cancelled")
