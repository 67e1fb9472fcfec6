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

import dataclasses
import io
import json
import secrets as _secrets
import zipfile
from dataclasses import dataclass, field
from typing import Any

from cli.local.sequence_machines import deploy_state_machines
from shared.core import specs
from shared.core.aws import ClientFactory
from shared.core.specs import ENV, FunctionSpec, QueueSpec, TableSpec, TopicSpec
from shared.sequences.sfn import StepFunctions

LOCAL_ROLE_NAME = f"{specs.APP_NAME}-local-lambda"
DLQ_SUFFIX = "-dlq"


@dataclass(frozen=True)
class LocalQueue:
    url: str
    arn: str
    dlq_url: str
    dlq_arn: str


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


def placeholder_code(where: str = "in-process from the source tree") -> bytes:
    """The code zip the emulated Lambda is given: the local runtime runs the real handler ``where``."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("README.txt", f"mailstep local runtime: handlers run {where}\n")
    return buffer.getvalue()


def _lambda_role(aws: ClientFactory) -> str:
    iam = aws.client("iam")
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}
        ],
    }
    return iam.create_role(RoleName=LOCAL_ROLE_NAME, AssumeRolePolicyDocument=json.dumps(trust))["Role"][
        "Arn"
    ]


def function_env(
    spec: FunctionSpec,
    tables: dict[str, str],
    secrets: dict[str, str],
    queues: dict[str, LocalQueue],
    topics: dict[str, str],
    configuration_sets: dict[str, str],
    settings: dict[str, str] | None = None,
) -> dict[str, str]:
    """The environment a function gets: names of what it declares, the configuration
    sets, and ``settings`` (runtime-wide values, e.g. the local public base URL)."""
    values: dict[str, str] = dict(settings or {})
    values.update({t.setting: tables[t.setting] for t in spec.read_write_tables})
    values.update({s.setting: secrets[s.setting] for s in spec.read_secrets})
    values.update({q.setting: queues[q.id].url for q in spec.send_queues})
    values.update({t.setting: topics[t.id] for t in spec.publish_topics})
    values.update(configuration_sets)
    env = {ENV[name]: value for name, value in values.items() if name in ENV}
    env.update(spec.extra_env)
    return env


def local_function_name(spec: FunctionSpec) -> str:
    return f"{specs.APP_NAME}-{spec.name}"


def provision(
    api_key: str | None = None,
    *,
    functions: bool = False,
    settings: dict[str, str] | None = None,
    messaging: bool | None = None,
    aws: ClientFactory | None = None,
) -> LocalResources:
    """Create every resource named in the specs; returns names, URLs, ARNs and the API key.

    ``messaging`` (default: ``functions``) creates the queues, topics, subscriptions and
    configuration sets; ``functions=True`` also registers every function from its spec with
    its event source mappings and deploys the sequence state machines (the fast in-process
    mode; the local runtime's artifact mode registers them from the synthesized template
    instead, ``cli.local.deployment``). ``settings`` (Settings field -> value) are given to
    every function. ``aws``: the clients of the endpoint (by default the environment's).
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
    if not (functions if messaging is None else messaging):
        return LocalResources(tables=tables, secrets=secret_names, api_key=key)

    queues = {q.id: create_queue(q, aws=aws) for q in all_queues()}
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
        ses.create_configuration_set(ConfigurationSetName=config.local_name)
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
    resources = LocalResources(
        tables=tables,
        secrets=secret_names,
        api_key=key,
        queues=queues,
        topics=topics,
        configuration_sets=configuration_sets,
    )
    if not functions:
        return resources

    role = _lambda_role(aws)
    lam = aws.client("lambda")
    code = placeholder_code()
    registered: dict[str, LocalFunction] = {}
    for spec in specs.FUNCTIONS:
        env = function_env(spec, tables, secret_names, queues, topics, configuration_sets, settings)
        name = local_function_name(spec)
        arn = lam.create_function(
            FunctionName=name,
            Runtime=specs.LAMBDA_RUNTIME,
            Role=role,
            Handler=spec.handler,
            Code={"ZipFile": code},
            Description=spec.description,
            Timeout=spec.timeout_s,
            MemorySize=spec.memory_mb,
            Environment={"Variables": env},
        )["FunctionArn"]
        for source in spec.event_sources:
            mapping: dict[str, Any] = {
                "FunctionName": name,
                "EventSourceArn": queues[source.queue.id].arn,
                "BatchSize": source.batch_size,
                "FunctionResponseTypes": ["ReportBatchItemFailures"],
            }
            if source.max_batching_window_s:
                mapping["MaximumBatchingWindowInSeconds"] = source.max_batching_window_s
            if source.max_concurrency is not None:
                mapping["ScalingConfig"] = {"MaximumConcurrency": source.max_concurrency}
            lam.create_event_source_mapping(**mapping)
        registered[spec.name] = LocalFunction(name=name, arn=arn, spec=spec, env=env)
    # One state machine per sequence file, calling the step function (as the CDK construct does).
    deploy_state_machines(
        registered[specs.SEQUENCE_STEP_FUNCTION.name].arn,
        role,
        sfn=StepFunctions(aws.client("stepfunctions")),
    )
    return dataclasses.replace(resources, functions=registered)
