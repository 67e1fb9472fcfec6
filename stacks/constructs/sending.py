"""Sending: SES configuration sets (``shared.core.specs.CONFIGURATION_SETS``) publishing their
sending events to SNS topics (the functions' SES permission: ``shared.core.specs`` grants)."""

from __future__ import annotations

from aws_cdk import aws_ses as ses
from aws_cdk import aws_sns as sns
from constructs import Construct

from shared.core import specs
from stacks.config import MailstepConfig
from stacks.constructs.resources import pin_logical_id


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
