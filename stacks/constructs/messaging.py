"""Messaging: SQS queues (each with its dead-letter queue), SNS topics and topic -> queue
subscriptions, from ``shared.core.specs.QUEUES``, ``TOPICS`` and ``SUBSCRIPTIONS``; and the
failure queues of the asynchronous edges that are not SQS (``FAILURE_QUEUES``: stream sources'
on-failure destinations, rule targets' dead-letter queues, asynchronous invocations' on-failure
destinations), each encrypted, SSL only and kept 14 days like a dead-letter queue."""

from __future__ import annotations

from aws_cdk import Acknowledgment, Duration, Validations
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from shared.core import specs
from stacks.constructs.resources import pin_logical_id

DLQ_RETENTION = Duration.days(14)  # the SQS maximum: time for an operator to inspect and redrive


def dead_letter_id(spec: specs.QueueSpec) -> str:
    return f"{spec.id}DeadLetters"


class Messaging(Construct):
    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.dead_letter_queues: dict[specs.QueueSpec, sqs.Queue] = {}
        self.queues = {spec: self._queue(spec) for spec in specs.QUEUES}
        self.failure_queues = {spec: self._failure_queue(spec) for spec in specs.FAILURE_QUEUES}
        # Spec'd topics, plus the topics SES configuration sets publish their events to.
        topic_specs = dict.fromkeys([*specs.TOPICS, *(c.event_topic for c in specs.CONFIGURATION_SETS)])
        self.topics = {spec: self._topic(spec) for spec in topic_specs}
        for sub in specs.SUBSCRIPTIONS:
            self.topics[sub.topic].add_subscription(
                subscriptions.SqsSubscription(
                    self.queues[sub.queue], raw_message_delivery=sub.raw_message_delivery
                )
            )

    def _queue(self, spec: specs.QueueSpec) -> sqs.Queue:
        dlq = sqs.Queue(
            self,
            dead_letter_id(spec),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=DLQ_RETENTION,
        )
        pin_logical_id(dlq, dead_letter_id(spec))
        self.dead_letter_queues[spec] = dlq
        queue = sqs.Queue(
            self,
            spec.id,
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            visibility_timeout=Duration.seconds(spec.visibility_timeout_s),
            dead_letter_queue=sqs.DeadLetterQueue(max_receive_count=spec.max_receives, queue=dlq),
        )
        pin_logical_id(queue, spec.id)
        return queue

    def _failure_queue(self, spec: specs.FailureQueueSpec) -> sqs.Queue:
        queue = sqs.Queue(
            self,
            spec.id,
            encryption=sqs.QueueEncryption.SQS_MANAGED,  # EventBridge and Lambda can send to SSE-SQS
            enforce_ssl=True,
            retention_period=DLQ_RETENTION,
        )
        pin_logical_id(queue, spec.id)
        Validations.of(queue).acknowledge(
            Acknowledgment(
                id="AwsSolutions-SQS3",
                reason="A dead-letter queue itself: the on-failure destination of a stream source, the "
                "dead-letter queue of a rule target or of a function's asynchronous invocations "
                "(cdk-nag recognizes only SQS redrive policies); alarmed when it holds a message.",
            )
        )
        return queue

    def _topic(self, spec: specs.TopicSpec) -> sns.Topic:
        topic = sns.Topic(self, spec.id, enforce_ssl=True)
        pin_logical_id(topic, spec.id)
        return topic
