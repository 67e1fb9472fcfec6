"""The deployed resources each construct hands to the next, keyed by their spec."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from aws_cdk import CfnResource, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_ses as ses
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from shared.core.specs import (
    ConfigurationSetSpec,
    FailureQueueSpec,
    QueueSpec,
    SecretSpec,
    TableSpec,
    TopicSpec,
)


def pin_logical_id(resource: Construct, logical_id: str) -> None:
    """Give a spec'd resource its spec id as CloudFormation logical id (stable, readable, greppable)."""
    cast(CfnResource, resource.node.default_child).override_logical_id(logical_id)


def allow_publish_from(topic: sns.ITopic, sid: str, service: str, source_arn: str) -> None:
    """Let an AWS service publish to the topic on behalf of this account's ``source_arn`` only (a
    topic policy replaces SNS's default policy)."""
    topic.add_to_resource_policy(
        iam.PolicyStatement(
            sid=sid,
            principals=[iam.ServicePrincipal(service)],
            actions=["sns:Publish"],
            resources=[topic.topic_arn],
            conditions={
                "StringEquals": {"aws:SourceAccount": Stack.of(topic).account},
                "ArnLike": {"aws:SourceArn": source_arn},
            },
        )
    )


@dataclass(frozen=True)
class Resources:
    tables: dict[TableSpec, dynamodb.Table]
    secrets: dict[SecretSpec, secretsmanager.Secret]
    queues: dict[QueueSpec, sqs.Queue]
    topics: dict[TopicSpec, sns.Topic]
    configuration_sets: dict[ConfigurationSetSpec, ses.ConfigurationSet]
    # where the asynchronous edges that are not SQS keep what they could not process
    failure_queues: dict[FailureQueueSpec, sqs.Queue] = field(default_factory=dict)

    def settings(self) -> dict[str, str]:
        """Settings field -> the value a Lambda receives for it (a CloudFormation token)."""
        values = {spec.setting: table.table_name for spec, table in self.tables.items()}
        values |= {spec.setting: secret.secret_arn for spec, secret in self.secrets.items()}
        values |= {spec.setting: queue.queue_url for spec, queue in self.queues.items()}
        values |= {spec.setting: topic.topic_arn for spec, topic in self.topics.items()}
        values |= {spec.setting: c.configuration_set_name for spec, c in self.configuration_sets.items()}
        return values
