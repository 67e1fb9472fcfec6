"""List hygiene: the daily EventBridge schedule of the sunset run (docs/hygiene.md).

An EventBridge rule with a cron schedule (``shared.core.specs.HYGIENE_SCHEDULE``, UTC) invokes the
hygiene function asynchronously with a Scheduled Event whose ``time`` is the run's day. A failed
invocation is retried by EventBridge (``retry_attempts``) within ``max_event_age``; a run that still
fails is picked up by the next day's, which reads every day bucket since the last complete run.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from shared.core import specs


class Hygiene(Construct):
    def __init__(
        self, scope: Construct, construct_id: str, *, function: lambda_.IFunction, dead_letters: sqs.IQueue
    ) -> None:
        super().__init__(scope, construct_id)
        self.schedule = events.Rule(
            self,
            "Daily",
            description="List hygiene: marks subscribers without human engagement cold, unsubscribes them "
            "after the grace period (docs/hygiene.md)",
            schedule=events.Schedule.expression(specs.HYGIENE_SCHEDULE),
            targets=[
                targets.LambdaFunction(
                    function,
                    retry_attempts=2,  # few: the next day's run resumes from the checkpoint
                    max_event_age=Duration.hours(6),
                    dead_letter_queue=dead_letters,  # CDK adds the queue policy for this rule
                )
            ],
        )
