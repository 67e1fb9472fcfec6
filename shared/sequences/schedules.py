"""The one-time schedules that resume a callback Task: EventBridge Scheduler calls Step Functions'
SendTaskSuccess with the task token at the wake-up time (docs/sequences.md, "Shapes tried").

A schedule's name is derived from the execution and the step, so a retried Task (a new task
token) updates the schedule its first attempt created instead of adding a second one. The
schedule deletes itself after it fired (``ActionAfterCompletion: DELETE``). A schedule that fires
into a token that is no longer waiting (the execution was stopped, or the callback came twice)
is refused by Step Functions (``TaskTimedOut`` / ``InvalidToken``) and changes nothing.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from shared.core.aws import client as aws_client

# The universal target for Step Functions' SendTaskSuccess (EventBridge Scheduler User Guide,
# "Using universal targets": arn:aws:scheduler:::aws-sdk:<service>:<apiAction>); its Input is the
# API's request: {"TaskToken", "Output"} as the SDK names them (PascalCase, Scheduler's rule).
SEND_TASK_SUCCESS_TARGET = "arn:aws:scheduler:::aws-sdk:sfn:sendTaskSuccess"
NAME_MAX = 64  # CreateSchedule Name: 1-64 characters of [0-9a-zA-Z-_.]
THROTTLED = ("ThrottlingException", "TooManyRequestsException", "ServiceQuotaExceededException")


class ScheduleThrottled(Exception):
    """EventBridge Scheduler refused the schedule for now (its request rate or quota)."""


def schedule_name(step: str, execution_arn: str) -> str:
    """``<step code>-<hash of the execution>``: the same for every attempt of one Task."""
    digest = hashlib.sha256(f"{execution_arn}\n{step}".encode()).hexdigest()
    return f"{step}-{digest}"[:NAME_MAX]


def at_expression(moment: datetime) -> str:
    """``at(yyyy-mm-ddThh:mm:ss)`` in UTC (the wake-up times are whole seconds already)."""
    return f"at({moment.astimezone(UTC):%Y-%m-%dT%H:%M:%S})"


@dataclass
class Resumer:
    """Creates (or, for a retried Task, updates) the schedule that resumes a callback Task."""

    group: str  # the deployment's schedule group
    role_arn: str  # the role EventBridge Scheduler calls SendTaskSuccess with
    client: Any = None  # a boto3 scheduler client; None: the Lambdas' own

    def resume_at(self, name: str, moment: datetime, token: str, output: dict[str, Any]) -> None:
        if not self.group or not self.role_arn:
            raise ValueError("a callback Task needs the schedule group and scheduler role settings")
        scheduler = self.client or aws_client("scheduler")
        params: dict[str, Any] = {
            "Name": name,
            "GroupName": self.group,
            "ScheduleExpression": at_expression(moment),
            "ScheduleExpressionTimezone": "UTC",
            "FlexibleTimeWindow": {"Mode": "OFF"},
            "ActionAfterCompletion": "DELETE",
            "Target": {
                "Arn": SEND_TASK_SUCCESS_TARGET,
                "RoleArn": self.role_arn,
                "Input": json.dumps({"TaskToken": token, "Output": json.dumps(output, sort_keys=True)}),
            },
        }
        try:
            try:
                scheduler.create_schedule(**params)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "ConflictException":
                    raise
                scheduler.update_schedule(**params)  # a retried Task: its new token, the same name
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in THROTTLED:
                raise ScheduleThrottled(str(exc.response["Error"].get("Code"))) from exc
            raise
