"""Broadcasts: the schedule state machine behind ``--at`` and the alarms on the broadcast
dead-letter queues. The queues and the resolver/worker functions come from
``shared.specs`` (Messaging, Functions); ``shared.broadcasts.schedule.definition`` is the
same two states for the local runtime."""

from __future__ import annotations

from aws_cdk import Acknowledgment, CfnOutput, Duration, RemovalPolicy, Validations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from shared import specs
from shared.broadcasts.schedule import START_STATE, WAIT_STATE

SCHEDULE_OUTPUT = "BroadcastScheduleArn"


class Broadcasts(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        queues: dict[specs.QueueSpec, sqs.Queue],
        dead_letter_queues: dict[specs.QueueSpec, sqs.Queue],
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
            self, "ScheduleLogs", retention=logs.RetentionDays.ONE_MONTH, removal_policy=RemovalPolicy.DESTROY
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
        self.alarms = [
            cloudwatch.Alarm(
                self,
                f"{spec.id}DeadLettersAlarm",
                alarm_description=f"mailstep: messages in the dead-letter queue of {spec.id} (redrive them)",
                metric=dead_letter_queues[spec].metric_approximate_number_of_messages_visible(
                    period=Duration.minutes(5), statistic="Maximum"
                ),
                threshold=0,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                evaluation_periods=1,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            )
            for spec in (specs.BROADCAST_QUEUE, specs.BROADCAST_CONTROL_QUEUE)
        ]
        CfnOutput(
            self,
            SCHEDULE_OUTPUT,
            value=self.schedule.state_machine_arn,
            description="settings field broadcast_schedule_arn",
        ).override_logical_id(SCHEDULE_OUTPUT)
