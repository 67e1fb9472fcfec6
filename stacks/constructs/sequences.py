"""Sequences: one Step Functions state machine per file of ``sequences/`` (found at synth).

- definitions come from the one compiler (``shared.sequences.compiler``); the step function
  ARN is a definition substitution; invalid YAML fails synthesis with the validator's
  file:line:step message (``SequenceInvalid``);
- names are ``state_machine_prefix(<stack name>) + sequence id`` (``<stack name>-seq-<id>``,
  at most 80 characters), so two copies of the stack in one account and region do not
  collide and the dispatcher derives every ARN from one setting (``state_machine_arn_prefix``)
  without a lookup;
- each machine logs ALL events to its own log group (execution data excluded: it holds
  the subscriber's address) and has a role that may invoke only the step function;
- an EventBridge rule sends FAILED / TIMED_OUT / ABORTED executions of these machines to
  the cleanup function, which removes the EXEC pair; an event EventBridge cannot deliver, and an
  invocation that still fails after Lambda's retries, end in ``SEQUENCE_CLEANUP_FAILURES``
  (docs/operations.md: a stale pair would block the sequence's restart);
- the functions that start or stop executions get the ARN prefix in their environment and
  exactly the states actions their spec grants (``stacks.constructs.functions``).
"""

from __future__ import annotations

from pathlib import Path

from aws_cdk import Acknowledgment, ArnFormat, Duration, RemovalPolicy, Stack, Validations
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from shared.core import specs
from shared.sending.rendering import TEMPLATES_DIR
from shared.sequences import SEQUENCES_DIR
from shared.sequences.compiler import SUBSTITUTION_KEY, definition_json
from shared.sequences.validate import require_catalog
from stacks.constructs.functions import nag_arn

ENDED_STATUSES = ["FAILED", "TIMED_OUT", "ABORTED"]


def _pascal(name: str) -> str:
    return "".join(part.capitalize() for part in name.replace(".", "-").replace("_", "-").split("-"))


class StateMachineNameTooLong(ValueError):
    """A sequence's state machine name would exceed the Step Functions limit."""


def state_machine_arn_prefix(scope: Construct) -> str:
    """``arn:<partition>:states:<region>:<account>:stateMachine:<stack name>-seq-`` (+ sequence id)."""
    stack = Stack.of(scope)
    return stack.format_arn(
        service="states",
        resource="stateMachine",
        resource_name=specs.state_machine_prefix(stack.stack_name),
        arn_format=ArnFormat.COLON_RESOURCE_NAME,
    )


def state_machine_name(stack_name: str, sequence_id: str) -> str:
    name = f"{specs.state_machine_prefix(stack_name)}{sequence_id}"
    if len(name) > specs.STATE_MACHINE_NAME_MAX:
        raise StateMachineNameTooLong(
            f"state machine name {name!r} of sequence {sequence_id!r} has {len(name)} characters; "
            f"Step Functions allows {specs.STATE_MACHINE_NAME_MAX}: shorten the stack name "
            f"(mailstep:stackName) or the sequence id"
        )
    return name


class CallbackSchedules(Construct):
    """What resumes a callback Task (docs/sequences.md): the stack's schedule group, where the step
    function creates one one-time schedule per callback, and the role EventBridge Scheduler calls
    SendTaskSuccess with: trusted by ``scheduler.amazonaws.com`` for this account only (the
    confused-deputy condition of the Scheduler User Guide's execution role), allowed
    ``states:SendTaskSuccess`` on this stack's sequence state machines only (what CDK's
    ``StateMachine.grantTaskResponse`` grants on a machine, without the failure and heartbeat
    actions, which nothing sends)."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.group = scheduler.CfnScheduleGroup(
            self, "Group", name=specs.schedule_group_name(stack.stack_name)
        )
        self.group_name = specs.schedule_group_name(stack.stack_name)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal(
                "scheduler.amazonaws.com", conditions={"StringEquals": {"aws:SourceAccount": stack.account}}
            ),
            description="mailstep: EventBridge Scheduler resumes sequence callback Tasks (SendTaskSuccess)",
        )
        prefix = state_machine_arn_prefix(self)
        self.role.add_to_policy(
            iam.PolicyStatement(actions=["states:SendTaskSuccess"], resources=[f"{prefix}*"])
        )
        Validations.of(self.role).acknowledge(
            Acknowledgment(
                id=f"AwsSolutions-IAM5[Resource::{_nag_machines(stack)}]",
                reason="Resumes callback Tasks of this stack's sequence state machines (name prefix); the "
                "machines are generated from sequences/ at synth time.",
            )
        )


def _nag_machines(stack: Stack) -> str:
    """How cdk-nag spells the sequence state machines' ARN pattern in a finding id."""
    return nag_arn(stack, "states", f"stateMachine:{specs.state_machine_prefix(stack.stack_name)}*")


class Sequences(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        step_function: lambda_.IFunction,
        cleanup_function: lambda_.IFunction,
        cleanup_dead_letters: sqs.IQueue | None = None,
        sequences_dir: Path = SEQUENCES_DIR,
        templates_dir: Path = TEMPLATES_DIR,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
    ) -> None:
        super().__init__(scope, construct_id)
        catalog = require_catalog(sequences_dir, templates_dir)  # raises: synth fails with file:line
        self.arn_prefix = state_machine_arn_prefix(self)
        self.stack_name = Stack.of(self).stack_name
        self.state_machines: dict[str, sfn.CfnStateMachine] = {}
        for sequence in catalog:
            self.state_machines[sequence.id] = self._machine(
                sequence.id, definition_json(sequence), step_function, log_retention
            )

        self.cleanup_rule = events.Rule(
            self,
            "ExecutionEnded",
            description="Sequence executions that failed, timed out or were aborted: remove the EXEC pair",
            event_pattern=events.EventPattern(
                source=["aws.states"],
                detail_type=["Step Functions Execution Status Change"],
                detail={"status": ENDED_STATUSES, "stateMachineArn": [{"prefix": self.arn_prefix}]},
            ),
            targets=[
                targets.LambdaFunction(
                    cleanup_function,
                    retry_attempts=8,
                    max_event_age=Duration.hours(24),
                    dead_letter_queue=cleanup_dead_letters,  # CDK adds the queue policy for this rule
                )
            ],
        )

    def _machine(
        self,
        sequence_id: str,
        definition: str,
        step_function: lambda_.IFunction,
        retention: logs.RetentionDays,
    ) -> sfn.CfnStateMachine:
        scope = Construct(self, _pascal(sequence_id))
        log_group = logs.LogGroup(scope, "Logs", retention=retention, removal_policy=RemovalPolicy.DESTROY)
        role = iam.Role(
            scope,
            "Role",
            assumed_by=iam.ServicePrincipal("states.amazonaws.com"),
            description=f"mailstep sequence {sequence_id}: invoke the step function, write its logs",
        )
        role.add_to_policy(
            iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[step_function.function_arn])
        )
        role.add_to_policy(  # CloudWatch Logs delivery for Step Functions needs these on "*"
            iam.PolicyStatement(
                actions=[
                    "logs:CreateLogDelivery",
                    "logs:GetLogDelivery",
                    "logs:UpdateLogDelivery",
                    "logs:DeleteLogDelivery",
                    "logs:ListLogDeliveries",
                    "logs:PutResourcePolicy",
                    "logs:DescribeResourcePolicies",
                    "logs:DescribeLogGroups",
                ],
                resources=["*"],
            )
        )
        Validations.of(role).acknowledge(
            Acknowledgment(
                id="AwsSolutions-IAM5[Resource::*]",
                reason="Step Functions log delivery and X-Ray actions support no resource-level permissions.",
            )
        )
        machine = sfn.CfnStateMachine(
            scope,
            "StateMachine",
            state_machine_name=state_machine_name(self.stack_name, sequence_id),
            state_machine_type="STANDARD",
            role_arn=role.role_arn,
            definition_string=definition,
            definition_substitutions={SUBSTITUTION_KEY: step_function.function_arn},
            logging_configuration=sfn.CfnStateMachine.LoggingConfigurationProperty(
                level="ALL",
                include_execution_data=False,
                destinations=[
                    sfn.CfnStateMachine.LogDestinationProperty(
                        cloud_watch_logs_log_group=sfn.CfnStateMachine.CloudWatchLogsLogGroupProperty(
                            log_group_arn=log_group.log_group_arn
                        )
                    )
                ],
            ),
            tracing_configuration=sfn.CfnStateMachine.TracingConfigurationProperty(enabled=True),
        )
        # The machine must wait for its role's policy (its RoleArn GetAtt already orders the role).
        machine.node.add_dependency(role.node.find_child("DefaultPolicy"))
        role.add_to_policy(
            iam.PolicyStatement(
                actions=[
                    "xray:PutTraceSegments",
                    "xray:PutTelemetryRecords",
                    "xray:GetSamplingRules",
                    "xray:GetSamplingTargets",
                ],
                resources=["*"],
            )
        )
        return machine
