"""Create mailstep's resources from ``shared.core.specs`` on an emulated AWS endpoint.

Used by the local runtime and the tests. Production resources are created by the CDK
stack from the same specs. Everything here is generic over the specs: a new table,
queue, topic, subscription, configuration set or function (with its event sources) is
picked up with no change to this module.

Every request goes through the ``aws`` client factory the caller gives (the local runtime's,
for its endpoint); without one, the environment's clients (``shared.core.aws.client``, e.g.
under moto's in-process mock in the integration tests).
"""

from __future__ import annotations

import io
import json
import secrets as _secrets
import zipfile
from dataclasses import dataclass, field
from typing import Any

from shared.core import specs
from shared.core.aws import ClientFactory
from shared.core.specs import ENV, FunctionSpec, QueueSpec, TableSpec, TopicSpec

DLQ_SUFFIX = "-dlq"


@dataclass(frozen=True)
class LocalQueue:
    url: str
    arn: str
    dlq_url: str
    dlq_arn: str


@dataclass(frozen=True)
class LocalFailureQueue:
    """A ``FailureQueueSpec`` queue: where an asynchronous edge keeps what it could not process."""

    url: str
    arn: str


@dataclass(frozen=True)
class LocalFunction:
    name: str  # physical function name
    arn: str
    spec: FunctionSpec
    env: dict[str, str]


@dataclass(frozen=True)
class LocalResources:
    tables: dict[str, str]  # settings field -> table name
    secrets: dict[str, str]  # settings field -> secret name
    api_key: str
    queues: dict[str, LocalQueue] = field(default_factory=dict)  # queue spec id -> queue
    topics: dict[str, str] = field(default_factory=dict)  # topic spec id -> topic ARN
    configuration_sets: dict[str, str] = field(default_factory=dict)  # settings field -> name
    functions: dict[str, LocalFunction] = field(default_factory=dict)  # spec name -> function
    failure_queues: dict[str, LocalFailureQueue] = field(default_factory=dict)  # spec id -> queue

    def env(self) -> dict[str, str]:
        """Environment of the settings every function shares (tables, secrets, config sets)."""
        values = {**self.tables, **self.secrets, **self.configuration_sets}
        return {ENV[name]: value for name, value in values.items() if name in ENV}


def create_table(spec: TableSpec, name: str | None = None, *, aws: ClientFactory | None = None) -> str:
    ddb = (aws or ClientFactory()).client("dynamodb")
    name = name or spec.local_name
    attributes = {spec.partition_key, spec.sort_key} | {
        a for g in spec.gsis for a in (g.partition_key, g.sort_key)
    }
    kwargs: dict[str, Any] = {
        "TableName": name,
        "BillingMode": "PAY_PER_REQUEST",
        "KeySchema": [
            {"AttributeName": spec.partition_key, "KeyType": "HASH"},
            {"AttributeName": spec.sort_key, "KeyType": "RANGE"},
        ],
        "AttributeDefinitions": [{"AttributeName": a, "AttributeType": "S"} for a in sorted(attributes)],
    }
    if spec.gsis:
        kwargs["GlobalSecondaryIndexes"] = [
            {
                "IndexName": g.name,
                "KeySchema": [
                    {"AttributeName": g.partition_key, "KeyType": "HASH"},
                    {"AttributeName": g.sort_key, "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
            for g in spec.gsis
        ]
    if spec.stream:
        kwargs["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": spec.stream}
    ddb.create_table(**kwargs)
    ddb.update_time_to_live(
        TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": spec.ttl_attribute}
    )
    return name


def all_queues() -> list[QueueSpec]:
    """Every queue the specs mention (declared, consumed, sent to or subscribed), once."""
    found: dict[str, QueueSpec] = {}
    candidates = list(specs.QUEUES)
    candidates += [s.queue for s in specs.SUBSCRIPTIONS]
    for fn in specs.FUNCTIONS:
        candidates += [e.queue for e in fn.event_sources] + list(fn.send_queues)
    for queue in candidates:
        found.setdefault(queue.id, queue)
    return list(found.values())


def all_topics() -> list[TopicSpec]:
    found: dict[str, TopicSpec] = {}
    candidates = list(specs.TOPICS) + [c.event_topic for c in specs.CONFIGURATION_SETS]
    candidates += [s.topic for s in specs.SUBSCRIPTIONS]
    for fn in specs.FUNCTIONS:
        candidates += list(fn.publish_topics)
    for topic in candidates:
        found.setdefault(topic.id, topic)
    return list(found.values())


def create_queue(spec: QueueSpec, *, aws: ClientFactory | None = None) -> LocalQueue:
    sqs = (aws or ClientFactory()).client("sqs")
    fifo = spec.local_name.endswith(".fifo")
    base = spec.local_name.removesuffix(".fifo")
    dlq_name = f"{base}{DLQ_SUFFIX}" + (".fifo" if fifo else "")
    fifo_attrs = {"FifoQueue": "true"} if fifo else {}
    dlq_url = sqs.create_queue(
        QueueName=dlq_name, Attributes={"MessageRetentionPeriod": "1209600", **fifo_attrs}
    )["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    redrive = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": spec.max_receives})
    url = sqs.create_queue(
        QueueName=spec.local_name,
        Attributes={
            "VisibilityTimeout": str(spec.visibility_timeout_s),
            "RedrivePolicy": redrive,
            **fifo_attrs,
        },
    )["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return LocalQueue(url=url, arn=arn, dlq_url=dlq_url, dlq_arn=dlq_arn)


def create_failure_queue(
    spec: specs.FailureQueueSpec, *, aws: ClientFactory | None = None
) -> LocalFailureQueue:
    """A failure queue as the stack makes it: kept 14 days, no dead-letter queue of its own."""
    sqs = (aws or ClientFactory()).client("sqs")
    url = sqs.create_queue(QueueName=spec.local_name, Attributes={"MessageRetentionPeriod": "1209600"})[
        "QueueUrl"
    ]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return LocalFailureQueue(url=url, arn=arn)


def placeholder_code() -> bytes:
    """The code zip the emulated Lambda is given: the local runtime runs the real handler from
    the cdk.out code asset (``local_aws.deployment``)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("README.txt", "mailstep local runtime: handlers run from the cdk.out code asset\n")
    return buffer.getvalue()


def local_function_name(spec: FunctionSpec) -> str:
    return f"{specs.APP_NAME}-{spec.name}"


def provision(
    api_key: str | None = None,
    *,
    messaging: bool = False,
    aws: ClientFactory | None = None,
) -> LocalResources:
    """Create the tables and secrets named in the specs; returns names, URLs, ARNs and the API key.

    ``messaging`` also creates the queues, topics, subscriptions and configuration sets. The
    functions, their event source mappings and the state machines come from the synthesized
    template (``local_aws.deployment``). ``aws``: the clients of the endpoint (by default the
    environment's).
    """
    aws = aws or ClientFactory()
    tables = {spec.setting: create_table(spec, aws=aws) for spec in specs.TABLES}
    sm = aws.client("secretsmanager")
    key = api_key or _secrets.token_urlsafe(32)
    secret_names = {}
    for secret in specs.SECRETS:
        # The API key is the one the caller knows; every other secret gets its own random value.
        value = key if secret is specs.API_KEY_SECRET else _secrets.token_urlsafe(32)
        sm.create_secret(Name=secret.local_name, SecretString=value, Description=secret.description)
        secret_names[secret.setting] = secret.local_name
    if not messaging:
        return LocalResources(tables=tables, secrets=secret_names, api_key=key)

    queues = {q.id: create_queue(q, aws=aws) for q in all_queues()}
    failure_queues = {q.id: create_failure_queue(q, aws=aws) for q in specs.FAILURE_QUEUES}
    sns = aws.client("sns")
    topics = {t.id: sns.create_topic(Name=t.local_name)["TopicArn"] for t in all_topics()}
    for sub in specs.SUBSCRIPTIONS:
        attributes = {"RawMessageDelivery": "true"} if sub.raw_message_delivery else {}
        sns.subscribe(
            TopicArn=topics[sub.topic.id],
            Protocol="sqs",
            Endpoint=queues[sub.queue.id].arn,
            Attributes=attributes,
        )

    ses = aws.client("sesv2")
    configuration_sets = {}
    for config in specs.CONFIGURATION_SETS:
        ses.create_configuration_set(
            ConfigurationSetName=config.local_name,
            ReputationOptions={"ReputationMetricsEnabled": True},  # as the stack's (docs/reputation.md)
        )
        ses.create_configuration_set_event_destination(
            ConfigurationSetName=config.local_name,
            EventDestinationName=f"{config.local_name}-sns",
            EventDestination={
                "Enabled": True,
                "MatchingEventTypes": list(config.event_types),
                "SnsDestination": {"TopicArn": topics[config.event_topic.id]},
            },
        )
        configuration_sets[config.setting] = config.local_name
    return LocalResources(
        tables=tables,
        secrets=secret_names,
        api_key=key,
        queues=queues,
        topics=topics,
        configuration_sets=configuration_sets,
        failure_queues=failure_queues,
    )
