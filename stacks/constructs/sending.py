"""Sending: SES configuration sets (``shared.specs.CONFIGURATION_SETS``) publishing their
sending events to SNS topics, and the SES permission of functions that send mail."""

from __future__ import annotations

from aws_cdk import Acknowledgment, Stack, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_ses as ses
from aws_cdk import aws_sns as sns
from constructs import Construct

from shared import specs
from stacks.config import MailstepConfig
from stacks.constructs.resources import pin_logical_id

SES_SEND_ACTIONS = ("ses:SendEmail", "ses:SendRawEmail")


class Sending(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        topics: dict[specs.TopicSpec, sns.Topic],
        config: MailstepConfig,
    ) -> None:
        super().__init__(scope, construct_id)
        self.config = config
        self.configuration_sets = {
            spec: self._configuration_set(spec, topics) for spec in specs.CONFIGURATION_SETS
        }

    def _configuration_set(
        self, spec: specs.ConfigurationSetSpec, topics: dict[specs.TopicSpec, sns.Topic]
    ) -> ses.ConfigurationSet:
        configuration_set = ses.ConfigurationSet(self, spec.id, reputation_metrics=True)
        pin_logical_id(configuration_set, spec.id)
        configuration_set.add_event_destination(
            f"{spec.id}Events",
            destination=ses.EventDestination.sns_topic(topics[spec.event_topic]),
            events=[ses.EmailSendingEvent(e) for e in spec.event_types],
        )
        return configuration_set

    def grant_send(self, fn: lambda_.Function) -> None:
        """SendEmail/SendRawEmail through mailstep's configuration sets from the configured domain."""
        stack = Stack.of(self)
        identity = self.config.ses_domain or "*"
        resources = [stack.format_arn(service="ses", resource="identity", resource_name=identity)]
        resources += [
            stack.format_arn(
                service="ses", resource="configuration-set", resource_name=c.configuration_set_name
            )
            for c in self.configuration_sets.values()
        ]
        fn.add_to_role_policy(iam.PolicyStatement(actions=list(SES_SEND_ACTIONS), resources=resources))
        if not self.config.ses_domain:
            Validations.of(fn.role).acknowledge(
                Acknowledgment(
                    id="AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ses:<AWS::Region>:<AWS::AccountId>:identity/*]",
                    reason="No mailstep:sesDomain is configured, so the sending identity is not known at "
                    "synth time; set mailstep:sesDomain to scope SendEmail to that one identity.",
                )
            )
