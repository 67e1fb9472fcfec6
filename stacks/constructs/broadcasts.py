"""Broadcasts: the schedule state machine behind ``--at`` and the alarms on the broadcast
dead-letter queues. The queues and the resolver/worker functions come from
``shared.core.specs`` (Messaging, Functions); ``shared.broadcasts.schedule.definition`` is the
same two states for the local runtime."""

from __future__ import annotations

from aws_cdk import Acknowledgment, Duration, RemovalPolicy, Validations
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from shared.broadcasts.schedule import START_STATE, WAIT_STATE
from shared.core import specs

SCHEDULE_OUTPUT = specs.BROADCAST_SCHEDULE_OUTPUT


class Broadcasts(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        queues: dict[specs.QueueSpec, sqs.Queue],
        dead_letter_queues: dict[specs.QueueSpec, sqs.Queue],
        log_retention: logs.RetentionDays = logs.RetentionDays.THREE_MONTHS,
    ) -> None:
        super().__init__(scope, construct_id)
        wait = sfn.Wait(self, WAIT_STATE, time=sfn.WaitTime.timestamp_path("$.at"))
        start = tasks.SqsSendMessage(
            self,
            START_STATE,
            queue=queues[specs.BROADCAST_CONTROL_QUEUE],
            message_body=sfn.TaskInput.from_json_path_at("$.message"),
        )
        start.add_retry(errors=["States.ALL"], interval=Duration.seconds(5), max_attempts=8, backoff_rate=2.0)
        log_group = logs.LogGroup(
            self, "ScheduleLogs", retention=log_retention, removal_policy=RemovalPolicy.DESTROY
        )
        self.schedule = sfn.StateMachine(
            self,
            "Schedule",
            state_machine_type=sfn.StateMachineType.STANDARD,
            definition_body=sfn.DefinitionBody.from_chainable(wait.next(start)),
            comment="mailstep broadcast schedule: wait until the send time, then start resolving",
            logs=sfn.LogOptions(destination=log_group, level=sfn.LogLevel.ALL),
            tracing_enabled=True,
        )
        Validations.of(self.schedule.role).acknowledge(
            Acknowledgment(
                id="AwsSolutions-IAM5[Resource::*]",
                reason="X-Ray tracing of the schedule: xray:PutTraceSegments/PutTelemetryRecords/"
                "GetSamplingRules/GetSamplingTargets support no resource-level permissions.",
            )
        )
