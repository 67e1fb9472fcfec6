"""One description of mailstep's cloud resources, read by the CDK constructs (``stacks/``)
and by the local runtime's bootstrapper (``local_aws``).

Nothing here imports CDK or boto3: it is plain data. An infra test proves that the
synthesized template and these specs agree.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

APP_NAME = "mailstep"
STACK_NAME = "Mailstep"
# Synthesis context of the local runtime and the tests: a template for the emulated AWS, where
# no sending identity is required (stacks.config.MailstepConfig.local; a deployment needs one).
# The local runtime's template: every request reaches its API from 127.0.0.1, so the sign-up's
# per-client-address limit (docs/signup.md) would be one limit for everybody there; it is off
# (its maximum) unless the context sets it.
LOCAL_SYNTH_CONTEXT: dict[str, object] = {
    "mailstep:local": True,
    "mailstep:signupSourceCapPerHour": 1_000_000,
}
LAMBDA_RUNTIME = "python3.12"
# Source folders shipped in every Lambda's code asset (with [project].dependencies of
# pyproject.toml at the versions of requirements.lock: stacks/constructs/functions.py).
LAMBDA_SOURCE_DIRS = ("shared", "functions", "templates", "sequences")
# Single files at the project root shipped beside them (the topics of shared/consent).
LAMBDA_SOURCE_FILES = ("topics.yaml",)

# Settings field -> environment variable. The only place these names are spelled.
ENV: dict[str, str] = {
    "table_name": "TABLE_NAME",
    "events_table_name": "EVENTS_TABLE_NAME",
    "api_key_secret": "API_KEY_SECRET",
    "data_ttl_days": "DATA_TTL_DAYS",
    "idempotency_ttl_seconds": "IDEMPOTENCY_TTL_SECONDS",
    "max_body_bytes": "MAX_BODY_BYTES",
    "configuration_set": "SES_CONFIGURATION_SET",
    "public_base_url": "PUBLIC_BASE_URL",
    "default_from": "DEFAULT_FROM",
    "default_reply_to": "DEFAULT_REPLY_TO",
    "postal_address": "POSTAL_ADDRESS",
    "mail_footer_reason": "MAIL_FOOTER_REASON",
    "list_id_domain": "LIST_ID_DOMAIN",
    "unsubscribe_mailto": "UNSUBSCRIBE_MAILTO",
    "unsubscribe_secret": "UNSUBSCRIBE_SECRET",
    "unsubscribe_token_ttl_days": "UNSUBSCRIBE_TOKEN_TTL_DAYS",
    "send_queue_url": "SEND_QUEUE_URL",
    "send_claim_lease_seconds": "SEND_CLAIM_LEASE_SECONDS",
    "state_machine_arn_prefix": "STATE_MACHINE_ARN_PREFIX",
    "sequence_schedule_group": "SEQUENCE_SCHEDULE_GROUP",
    "sequence_scheduler_role_arn": "SEQUENCE_SCHEDULER_ROLE_ARN",
    "broadcast_queue_url": "BROADCAST_QUEUE_URL",
    "broadcast_control_queue_url": "BROADCAST_CONTROL_QUEUE_URL",
    "broadcast_schedule_arn": "BROADCAST_SCHEDULE_ARN",
    "broadcast_max_send_rate": "BROADCAST_MAX_SEND_RATE",
    "broadcast_rate_share": "BROADCAST_RATE_SHARE",
    "broadcast_worker_threads": "BROADCAST_WORKER_THREADS",
    "broadcast_resolver_ahead_s": "BROADCAST_RESOLVER_AHEAD_S",
    "warmup_schedule": "WARMUP_SCHEDULE",
    "webhook_queue_url": "WEBHOOK_QUEUE_URL",
    "webhook_allow_loopback_http": "WEBHOOK_ALLOW_LOOPBACK_HTTP",
}

PK = "PK"
SK = "SK"
TTL_ATTRIBUTE = "ttl"


@dataclass(frozen=True)
class GsiSpec:
    name: str
    partition_key: str
    sort_key: str


@dataclass(frozen=True)
class TableSpec:
    id: str  # construct id / logical name
    local_name: str  # physical name in the local runtime
    setting: str  # Settings field that receives the table name
    gsis: tuple[GsiSpec, ...] = ()
    partition_key: str = PK
    sort_key: str = SK
    ttl_attribute: str = TTL_ATTRIBUTE
    # DynamoDB Streams view type of the table's change stream (webhooks read it), or None.
    stream: str | None = None


STREAM_VIEW = "NEW_AND_OLD_IMAGES"
MAIN_TABLE = TableSpec(id="MainTable", local_name="mailstep-main", setting="table_name", stream=STREAM_VIEW)
EVENTS_TABLE = TableSpec(
    id="EventsTable",
    local_name="mailstep-events",
    setting="events_table_name",
    stream=STREAM_VIEW,
    # Keyed by ``<template>#<shard>`` and ``<source>#<shard>`` (shared.store.events,
    # shared.store.keys.index_key): every event of a broadcast on one key would cap it at
    # 1,000 events/s; over 16 shards picked by the subscriber's address, 16,000/s.
    gsis=(
        GsiSpec(name="TemplateIndex", partition_key="template_key", sort_key=SK),
        GsiSpec(name="SequenceIndex", partition_key="source_key", sort_key=SK),
        # Sparse: only SUB#<email>/ENGAGEMENT items (list hygiene) carry hygiene_key, a day bucket
        # ``E#<day>#<shard>`` (last human engagement that day) or ``C#<day>#<shard>`` (cold since),
        # 16 shards per day: one day's engagement writes on one key would cap them at 1,000/s.
        GsiSpec(name="HygieneIndex", partition_key="hygiene_key", sort_key=PK),
    ),
)
TABLES = (MAIN_TABLE, EVENTS_TABLE)


@dataclass(frozen=True)
class SecretSpec:
    id: str
    local_name: str
    setting: str
    description: str


API_KEY_SECRET = SecretSpec(
    id="ApiKeySecret",
    local_name="mailstep/api-key",  # locally; a deployed secret's name is CloudFormation's
    setting="api_key_secret",
    description="Bearer key for POST /v1/events",
)
UNSUBSCRIBE_SECRET = SecretSpec(
    id="UnsubscribeSecret",
    local_name="mailstep/unsubscribe-key",
    setting="unsubscribe_secret",
    description="HMAC key of the unsubscribe tokens in List-Unsubscribe and footer links",
)
SECRETS = (API_KEY_SECRET, UNSUBSCRIBE_SECRET)


VISIBILITY_TIMEOUT_FACTOR = 6


@dataclass(frozen=True)
class QueueSpec:
    """An SQS queue with its dead-letter queue (maxReceiveCount ``max_receives``).

    A queue that feeds a Lambda event source needs a visibility timeout of at least
    ``VISIBILITY_TIMEOUT_FACTOR`` x the function's timeout (AWS guidance for SQS event
    sources; the stack refuses to synthesize otherwise).
    """

    id: str
    local_name: str
    setting: str  # Settings field that receives the queue URL
    visibility_timeout_s: int = 360
    max_receives: int = 5


@dataclass(frozen=True)
class FailureQueueSpec:
    """An SQS queue that keeps what an asynchronous edge could not process, for an operator to
    read and replay (docs/operations.md, "What could not be processed"): the on-failure records
    of a stream source, the events a rule could not deliver, the failed asynchronous invocations
    of a function. Encrypted, SSL only, kept 14 days, alarmed when it holds a message; no
    dead-letter queue of its own (nothing consumes it)."""

    id: str
    local_name: str
    holds: str  # what ends here and what to do: the description of its alarm


@dataclass(frozen=True)
class TopicSpec:
    id: str
    local_name: str
    setting: str  # Settings field that receives the topic ARN


@dataclass(frozen=True)
class SubscriptionSpec:
    """SNS topic -> SQS queue subscription."""

    topic: TopicSpec
    queue: QueueSpec
    raw_message_delivery: bool = False


@dataclass(frozen=True)
class EventSourceSpec:
    """SQS queue -> Lambda event source mapping (partial batch responses on)."""

    queue: QueueSpec
    batch_size: int = 10
    max_concurrency: int | None = None
    # Wait up to this long to fill a batch (required by Lambda when batch_size > 10).
    max_batching_window_s: int = 0
    # The stack sets max_concurrency from the account's SES rate (broadcast_workers).
    sized_by_send_rate: bool = False


@dataclass(frozen=True)
class StreamSourceSpec:
    """DynamoDB stream -> Lambda event source mapping: from the oldest record kept (TRIM_HORIZON),
    partial batch responses on, a failing batch split in two (``bisect``) and retried (``retry_attempts``
    times, then skipped, their on-failure record sent to ``on_failure``), only records matching
    one of ``filters`` (Lambda event filtering: the others cost no invocation)."""

    table: TableSpec
    on_failure: FailureQueueSpec
    filters: tuple[dict[str, Any], ...] = ()
    batch_size: int = 100
    max_batching_window_s: int = 1  # seconds to fill a batch
    retry_attempts: int = 10
    # BisectBatchOnFunctionError: a failed batch split in two. Off for a consumer whose marks
    # need a retried batch to start at the same first record (shared.store.stream_counts).
    bisect: bool = True


@dataclass(frozen=True)
class ConfigurationSetSpec:
    """An SES configuration set whose sending events are published to ``event_topic``."""

    id: str
    local_name: str
    setting: str  # Settings field that receives the configuration set name
    event_topic: TopicSpec
    # SES v2 EventType values published to the topic. Not SEND: the send path already
    # knows (and counts) every accepted send; SES Send events would repeat it at the cost
    # of a topic publish, a queue message and an events-table write per email.
    event_types: tuple[str, ...] = (
        "REJECT",
        "BOUNCE",
        "COMPLAINT",
        "DELIVERY",
        "OPEN",
        "CLICK",
        "RENDERING_FAILURE",
        "DELIVERY_DELAY",
    )


SES_EVENTS_TOPIC = TopicSpec(
    id="SesEventsTopic", local_name="mailstep-ses-events", setting="ses_events_topic_arn"
)
CONFIGURATION_SET = ConfigurationSetSpec(
    id="ConfigurationSet",
    local_name="mailstep",  # the marketing set: the one the reputation guardrail pauses
    setting="configuration_set",
    event_topic=SES_EVENTS_TOPIC,
)
CONFIGURATION_SETS: tuple[ConfigurationSetSpec, ...] = (CONFIGURATION_SET,)
# ----- reputation guardrail (docs/reputation.md) ---------------------------------------------
# Marketing mail (broadcasts, non-transactional sequence steps) goes through CONFIGURATION_SET,
# transactional mail (sign-up confirmations, ``transactional: true`` sequences, reply forwarding)
# through this one: the guardrail pauses the marketing set alone, so receipts keep going. Same
# event destination; both have reputation metrics on (stacks/constructs/sending.py).
TRANSACTIONAL_CONFIGURATION_SET = ConfigurationSetSpec(
    id="TransactionalConfigurationSet",
    local_name="mailstep-transactional",
    setting="transactional_configuration_set",
    event_topic=SES_EVENTS_TOPIC,
)
CONFIGURATION_SETS = (*CONFIGURATION_SETS, TRANSACTIONAL_CONFIGURATION_SET)
ENV["transactional_configuration_set"] = "SES_TRANSACTIONAL_CONFIGURATION_SET"
# The set the guardrail pauses (SES v2 PutConfigurationSetSendingOptions).
PAUSABLE_CONFIGURATION_SET = CONFIGURATION_SET

# ----- IAM grants ------------------------------------------------------------------------------
# Every permission a function's role holds is one Grant in its spec: the exact IAM actions its
# code calls, per resource. The stack builds each role's statements from these and nothing
# else (plus writing to the function's own log group); an infra test proves the template
# grants exactly this. How each action was found: functions/<name>/handler.py -> shared/
# (every boto3 call goes through shared.core.aws.client). DynamoDB TransactWriteItems is
# authorized per item (PutItem/UpdateItem/DeleteItem/ConditionCheckItem), BatchGetItem and
# BatchWriteItem are their own actions, Query with IndexName needs a TableIndex grant,
# Powertools idempotency uses GetItem/PutItem/UpdateItem/DeleteItem on its table, Powertools
# SecretsProvider calls GetSecretValue, SQS SendMessageBatch is sqs:SendMessage, and SES v2
# SendEmail with raw content (how mailstep sends) is authorized as ses:SendRawEmail on the
# identity AND the configuration set (and on each recipient's identity in the SES sandbox):
# SES_SEND_ACTIONS, what CDK's EmailIdentity.grantSendEmail grants (docs/local-runtime.md).

# Resources that are not a spec'd table, secret, queue, topic or configuration set:
# The account's SES identities, for sends whose From address is on the sending domain
# (mailstep:sesDomain, else fromAddress's domain; the ses:FromAddress condition is bound by the
# stack). In the SES sandbox a send is authorized on the recipient's identity too.
SES_IDENTITY = "identity"
# What AWS CDK's EmailIdentity.grantSendEmail grants: SES authorizes a v2 SendEmail with raw
# content as ses:SendRawEmail, with simple or template content as ses:SendEmail.
SES_SEND_ACTIONS = ("ses:SendEmail", "ses:SendRawEmail")
SEQUENCE_MACHINES = "stateMachine"  # the sequence state machines (name prefix)
SEQUENCE_EXECUTIONS = "execution"  # executions of the sequence state machines (name prefix)
# Callback Tasks (docs/sequences.md): the one-time schedules that resume them, in the stack's
# schedule group (sequence_schedule_group), and the role EventBridge Scheduler runs them with
# (passed to Scheduler with each schedule: iam:PassRole).
SEQUENCE_SCHEDULES = "schedule"
SCHEDULER_ROLE = "scheduler-role"
INBOUND_OBJECTS = "inbound-object"  # received mail in the inbound bucket (mailstep:inboundDomain)
# Granted for every event source: what the Lambda service does on the function's behalf
# (the actions of the AWS managed policy AWSLambdaSQSQueueExecutionRole).
EVENT_SOURCE_ACTIONS = ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes")
# Granted for every stream source, on the table's stream: what the Lambda service does on the
# function's behalf, as the DynamoDB developer guide's example policy for a Lambda function that
# processes stream records grants it ("IAM policy to allow an AWS Lambda function to access
# DynamoDB stream records": the four actions on table/<name>/stream/*).
STREAM_SOURCE_ACTIONS = (
    "dynamodb:DescribeStream",
    "dynamodb:GetRecords",
    "dynamodb:GetShardIterator",
    "dynamodb:ListStreams",
)
# Granted on each FailureQueueSpec a function's stream sources or asynchronous invocations send
# their failures to: the Lambda service sends the on-failure record with the function's execution
# role ("the execution role needs sqs:SendMessage on the destination queue": Lambda Developer Guide,
# "Retaining discarded batch records for a DynamoDB event source" and "Retaining records of
# asynchronous invocations"). Used only when something fails; never by the function's code.
ON_FAILURE_ACTIONS = ("sqs:SendMessage",)
# The webhook endpoints' signing secrets: secret:mailstep/webhooks/<main table name>/* (one per
# endpoint, created by the operator's `mailstep webhooks add`; shared.webhooks.store).
WEBHOOK_SECRETS = "webhook-secret"
WEBHOOK_SECRET_PREFIX = "mailstep/webhooks"  # noqa: S105 - a name prefix, not a secret


@dataclass(frozen=True)
class TableIndex:
    """A GSI of a table, for functions that Query it (``IndexName``)."""

    table: TableSpec
    index: str  # the GsiSpec's name, as Query's IndexName


@dataclass(frozen=True)
class TableStream:
    """The change stream of a table (a DynamoDB stream event source reads it)."""

    table: TableSpec


Resource = (
    TableSpec
    | TableIndex
    | TableStream
    | SecretSpec
    | QueueSpec
    | FailureQueueSpec
    | TopicSpec
    | ConfigurationSetSpec
    | str
)


def resource_key(resource: Resource) -> str:
    """A stable name for a granted resource: ``table/MainTable``,
    ``table/EventsTable/index/TemplateIndex``, ``secret/ApiKeySecret``, ``queue/SendQueue``,
    ``topic/InboundTopic``, ``configuration-set/ConfigurationSet``, or one of
    ``SES_IDENTITY``, ``SEQUENCE_MACHINES``, ``SEQUENCE_EXECUTIONS``, ``INBOUND_OBJECTS``."""
    if isinstance(resource, str):
        return resource
    if isinstance(resource, TableIndex):
        return f"table/{resource.table.id}/index/{resource.index}"
    if isinstance(resource, TableStream):
        return f"table/{resource.table.id}/stream"
    kind = {
        TableSpec: "table",
        SecretSpec: "secret",
        QueueSpec: "queue",
        FailureQueueSpec: "queue",
        TopicSpec: "topic",
        ConfigurationSetSpec: "configuration-set",
    }[type(resource)]
    return f"{kind}/{resource.id}"


@dataclass(frozen=True)
class Grant:
    """``actions`` on ``resource``; with ``only_with``, only when that Settings field has a
    value in the deployment (e.g. SES sending for reply forwarding)."""

    resource: Resource
    actions: tuple[str, ...]
    only_with: str = ""


def _ddb(*operations: str) -> tuple[str, ...]:
    return tuple(f"dynamodb:{op}" for op in operations)


def send_email_grants(only_with: str = "") -> tuple[Grant, ...]:
    """SES v2 SendEmail (raw content) through mailstep's configuration sets from the sending
    identity: ``SES_SEND_ACTIONS`` on each."""
    return (
        Grant(SES_IDENTITY, SES_SEND_ACTIONS, only_with),
        *(Grant(c, SES_SEND_ACTIONS, only_with) for c in CONFIGURATION_SETS),
    )


@dataclass(frozen=True)
class RouteSpec:
    method: str
    path: str  # API Gateway HTTP API syntax, e.g. /u/{token}


@dataclass(frozen=True)
class FunctionSpec:
    name: str
    handler: str  # module.function, importable from the project root
    description: str
    memory_mb: int = 512
    timeout_s: int = 29
    # The IAM actions the function's code calls, per resource (see Grant). The function's
    # environment names the tables, secrets, queues and topics granted here.
    grants: tuple[Grant, ...] = ()
    routes: tuple[RouteSpec, ...] = ()
    event_sources: tuple[EventSourceSpec, ...] = ()
    stream_sources: tuple[StreamSourceSpec, ...] = ()
    reserved_concurrency: int | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    mail_settings: bool = False  # receives the MAIL_SETTINGS environment
    # Settings fields passed only when the deployment gives them a value (e.g. reply_forward_to).
    optional_settings: tuple[str, ...] = ()
    # Invoked asynchronously (an EventBridge rule's target): what EventBridge cannot deliver (the
    # target's dead-letter queue) and the invocations that still fail after Lambda's retries (the
    # function's on-failure destination) end in this queue.
    async_failures: FailureQueueSpec | None = None

    def _granted(self, kind: type[Any]) -> tuple[Any, ...]:
        found = [
            g.resource.table if isinstance(g.resource, TableIndex | TableStream) else g.resource
            for g in self.grants
        ]
        return tuple(dict.fromkeys(r for r in found if isinstance(r, kind)))

    @property
    def read_write_tables(self) -> tuple[TableSpec, ...]:
        """Tables the function uses (any DynamoDB action): their names are in its environment."""
        return cast(tuple[TableSpec, ...], self._granted(TableSpec))

    @property
    def read_secrets(self) -> tuple[SecretSpec, ...]:
        return cast(tuple[SecretSpec, ...], self._granted(SecretSpec))

    @property
    def send_queues(self) -> tuple[QueueSpec, ...]:
        """Queues the function sends to (event sources are in ``event_sources``)."""
        return tuple(
            dict.fromkeys(
                g.resource
                for g in self.grants
                if isinstance(g.resource, QueueSpec) and "sqs:SendMessage" in g.actions
            )
        )

    @property
    def publish_topics(self) -> tuple[TopicSpec, ...]:
        return cast(tuple[TopicSpec, ...], self._granted(TopicSpec))

    @property
    def sends_email(self) -> bool:
        return any(set(SES_SEND_ACTIONS) & set(g.actions) for g in self.grants)

    @property
    def resumes_sequences(self) -> bool:
        """Creates the schedules that resume callback Tasks: receives their group and role."""
        return any(g.resource == SEQUENCE_SCHEDULES for g in self.grants)

    @property
    def controls_sequences(self) -> bool:
        """Starts or stops sequence executions: receives ``state_machine_arn_prefix``."""
        return any(g.resource in (SEQUENCE_MACHINES, SEQUENCE_EXECUTIONS) for g in self.grants)


def all_grants(spec: FunctionSpec, settings: Mapping[str, str] | None = None) -> list[Grant]:
    """The function's grants plus ``EVENT_SOURCE_ACTIONS`` on each event source queue,
    ``STREAM_SOURCE_ACTIONS`` on each stream source's table stream and ``ON_FAILURE_ACTIONS`` on
    the failure queues of its stream sources and asynchronous invocations.

    ``settings`` (field -> deployment value): grants ``only_with`` an empty or absent field
    are left out; None keeps every grant (the most the function may ever hold).
    """
    grants = [g for g in spec.grants if settings is None or not g.only_with or settings.get(g.only_with)]
    grants += [Grant(source.queue, EVENT_SOURCE_ACTIONS) for source in spec.event_sources]
    grants += [Grant(TableStream(stream.table), STREAM_SOURCE_ACTIONS) for stream in spec.stream_sources]
    grants += [Grant(stream.on_failure, ON_FAILURE_ACTIONS) for stream in spec.stream_sources]
    if spec.async_failures is not None:
        grants.append(Grant(spec.async_failures, ON_FAILURE_ACTIONS))
    return grants


def failure_grants(spec: FunctionSpec) -> list[Grant]:
    """The grants of ``all_grants`` that only a failure uses (the Lambda service sends an
    on-failure record with the function's role): ``ON_FAILURE_ACTIONS`` on its failure queues."""
    queues = [stream.on_failure for stream in spec.stream_sources]
    queues += [spec.async_failures] if spec.async_failures is not None else []
    return [Grant(queue, ON_FAILURE_ACTIONS) for queue in dict.fromkeys(queues)]


def granted_actions(
    spec: FunctionSpec, settings: Mapping[str, str] | None = None
) -> dict[str, frozenset[str]]:
    """IAM action -> the ``resource_key`` of every resource it is granted on, e.g.
    ``{"dynamodb:PutItem": frozenset({"table/MainTable", "table/EventsTable"}),
    "ses:SendEmail": frozenset({"identity", "configuration-set/ConfigurationSet"}), ...}``."""
    found: dict[str, set[str]] = {}
    for grant in all_grants(spec, settings):
        for action in grant.actions:
            found.setdefault(action, set()).add(resource_key(grant.resource))
    return {action: frozenset(keys) for action, keys in sorted(found.items())}


# Recording a subscriber's event (the events API, sign-up, replies): idempotency records or
# the pending sign-up, profile + TAG# upserts (transaction), EXEC pairs (put_execution:
# ConditionCheck + Put; list/delete), entry markers, and the event item.
SUBSCRIBER_WRITE_GRANTS = (
    Grant(MAIN_TABLE, _ddb("GetItem", "PutItem", "UpdateItem", "DeleteItem", "ConditionCheckItem", "Query")),
    Grant(EVENTS_TABLE, _ddb("PutItem")),
)
# Applying an event (shared.web.ingest: the events API, replies): the subscriber's writes, and
# the profile and SUPPRESSION items read together (BatchGetItem) before the upsert.
INGEST_GRANTS = (*SUBSCRIBER_WRITE_GRANTS, Grant(MAIN_TABLE, _ddb("BatchGetItem")))
# Starting the sequences an event triggers and stopping those it exits.
SEQUENCE_CONTROL_GRANTS = (
    Grant(SEQUENCE_MACHINES, ("states:StartExecution",)),
    Grant(SEQUENCE_EXECUTIONS, ("states:DescribeExecution", "states:StopExecution")),
)
API_FUNCTION = FunctionSpec(
    name="api",
    handler="functions.api.handler.handler",
    description="HTTP API: POST /v1/events",
    memory_mb=1280,  # its import within a second of its vCPU share (docs/bench.md, "Cold starts")
    grants=(
        *INGEST_GRANTS,
        Grant(API_KEY_SECRET, ("secretsmanager:GetSecretValue",)),
        *SEQUENCE_CONTROL_GRANTS,
    ),
    routes=(RouteSpec("POST", "/v1/events"),),
)
# Send jobs (contract ``send.job``, DESIGN.md section 6b) consumed by the sender function.
SEND_QUEUE = QueueSpec(
    id="SendQueue",
    local_name="mailstep-send",
    setting="send_queue_url",
    visibility_timeout_s=360,  # 6x the sender's timeout (60 s)
    max_receives=5,  # real failures only: a held job goes back as a new message (jobs.hold)
)
# The send pipeline (shared.sending.pipeline.send): the profile and SUPPRESSION item (or, for a
# confirmation mail, the pending sign-up) read together (BatchGetItem), claim reads (GetItem), the claim
# (conditional PutItem, restore), send-log reads (Query), claim release (DeleteItem), the
# SENT# item with its counter ADDs (transaction: Put + Update); events of skipped and failed
# sends; the unsubscribe token key; SES.
SEND_PIPELINE_GRANTS = (
    Grant(MAIN_TABLE, _ddb("GetItem", "BatchGetItem", "PutItem", "UpdateItem", "DeleteItem", "Query")),
    Grant(EVENTS_TABLE, _ddb("PutItem")),
    Grant(UNSUBSCRIBE_SECRET, ("secretsmanager:GetSecretValue",)),
    *send_email_grants(),
)
# Settings a function with ``mail_settings`` receives besides its tables and secrets.
MAIL_SETTINGS: tuple[str, ...] = (
    "configuration_set",
    "public_base_url",
    "default_from",
    "default_reply_to",
    "postal_address",
    "mail_footer_reason",
    "list_id_domain",
    "unsubscribe_mailto",
    "unsubscribe_token_ttl_days",
    "send_claim_lease_seconds",
)
MAIL_SETTINGS = (*MAIL_SETTINGS, "transactional_configuration_set")  # docs/reputation.md
MAIL_SETTINGS = (*MAIL_SETTINGS, "warmup_schedule")  # docs/sending.md, "Warm-up"
SENDER_FUNCTION = FunctionSpec(
    name="sender",
    handler="functions.sender.handler.handler",
    description="Send queue consumer: renders and sends one mail per send job, at most once",
    timeout_s=60,
    # a held job goes back on its own queue, delayed (shared.sending.jobs.hold)
    grants=(*SEND_PIPELINE_GRANTS, Grant(SEND_QUEUE, ("sqs:SendMessage",))),
    event_sources=(EventSourceSpec(queue=SEND_QUEUE, batch_size=10, max_concurrency=2),),
    mail_settings=True,
)
UNSUBSCRIBE_FUNCTION = FunctionSpec(
    name="unsubscribe",
    handler="functions.unsubscribe.handler.handler",
    description="Preference centre: GET /u/{token} (topics, unsubscribe), POST /u/{token} (one-click), "
    "preferences, resubscribe",
    memory_mb=1280,  # as the API's
    grants=(
        # profile (un/resubscribe transaction), the unsubscribe counter (UpdateItem ADD), the
        # subscriber's EXEC pairs (Query, DeleteItem) when marketing executions stop
        Grant(MAIN_TABLE, _ddb("GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query")),
        Grant(EVENTS_TABLE, _ddb("PutItem")),
        Grant(UNSUBSCRIBE_SECRET, ("secretsmanager:GetSecretValue",)),
        Grant(SEQUENCE_EXECUTIONS, ("states:StopExecution",)),
    ),
    routes=(
        RouteSpec("GET", "/u/{token}"),
        RouteSpec("POST", "/u/{token}"),
        RouteSpec("POST", "/u/{token}/resubscribe"),
        RouteSpec("POST", "/u/{token}/preferences"),  # the preference centre's topic choices
    ),
    mail_settings=True,
)
# Sequences (DESIGN.md section 5): the Lambda every generated state machine calls, and the
# cleanup of executions that ended without their last Task (timeout, abort, failure).
# State machines are named state_machine_prefix(<stack name>) + sequence id, so two copies
# of the stack in one account and region do not collide.
STATE_MACHINE_NAME_MAX = 80  # Step Functions limit on state machine names


def state_machine_prefix(stack_name: str) -> str:
    """``<stack name>-seq-``: the name of a sequence's state machine without the sequence id."""
    return f"{stack_name}-seq-"


STATE_MACHINE_PREFIX = state_machine_prefix(STACK_NAME)  # the default stack's prefix


def schedule_group_name(stack_name: str) -> str:
    """``<stack name>-sequences``: the schedule group of the callback Tasks' schedules (EventBridge
    Scheduler group names: 1-64 characters of ``[0-9a-zA-Z-_.]``)."""
    return f"{stack_name}-sequences"[:64]


SEQUENCE_STEP_FUNCTION = FunctionSpec(
    name="sequence-step",
    handler="functions.sequence_step.handler.handler",
    description="Sequence steps: send, check, tag, schedule, finish, fail (called by the state machines)",
    timeout_s=60,
    grants=(
        # the send pipeline, tag steps (profile transaction), finish/fail (EXEC pairs), and
        # opened/clicked checks (Query on the subscriber's events)
        *SEND_PIPELINE_GRANTS,
        Grant(EVENTS_TABLE, _ddb("Query")),
        # a callback Task's schedule: created, or updated by a retried Task (shared.sequences.schedules),
        # with the scheduler role passed to EventBridge Scheduler
        Grant(SEQUENCE_SCHEDULES, ("scheduler:CreateSchedule", "scheduler:UpdateSchedule")),
        Grant(SCHEDULER_ROLE, ("iam:PassRole",)),
    ),
    mail_settings=True,
)
SEQUENCE_CLEANUP_FAILURES = FailureQueueSpec(
    id="SequenceCleanupFailures",
    local_name="mailstep-sequence-cleanup-failures",
    holds="ended sequence executions whose EXEC pair the cleanup could not remove (a stale pair "
    "blocks a restart): replay each (docs/operations.md)",
)
SEQUENCE_CLEANUP_FUNCTION = FunctionSpec(
    name="sequence-cleanup",
    handler="functions.sequence_cleanup.handler.handler",
    description="Removes the EXEC pair of a sequence execution that failed, timed out or was aborted",
    # the conditional delete of the pair and the sequence's active-executions count (-1, an
    # Update in the same transaction: TransactWriteItems is authorized per action)
    grants=(Grant(MAIN_TABLE, _ddb("DeleteItem", "UpdateItem")),),
    async_failures=SEQUENCE_CLEANUP_FAILURES,  # the ExecutionEnded rule's target
)
FUNCTIONS: tuple[FunctionSpec, ...] = (
    API_FUNCTION,
    SENDER_FUNCTION,
    UNSUBSCRIBE_FUNCTION,
    SEQUENCE_STEP_FUNCTION,
    SEQUENCE_CLEANUP_FUNCTION,
)
QUEUES: tuple[QueueSpec, ...] = (SEND_QUEUE,)
TOPICS: tuple[TopicSpec, ...] = ()  # SES event topics are named by CONFIGURATION_SETS
SUBSCRIPTIONS: tuple[SubscriptionSpec, ...] = ()
FAILURE_QUEUES: tuple[FailureQueueSpec, ...] = (SEQUENCE_CLEANUP_FAILURES,)


def routes() -> list[tuple[RouteSpec, FunctionSpec]]:
    return [(route, fn) for fn in FUNCTIONS for route in fn.routes]


API_URL_OUTPUT = "ApiUrl"


def stack_outputs() -> dict[str, str]:
    """CloudFormation output key -> the Settings field whose value it carries.

    The deployed stack exports one output per spec'd resource, so a deployed stack's
    settings can be rebuilt from its name (``describe_stacks``) exactly as the Lambdas get
    them from their environment. The stack also exports ``API_URL_OUTPUT``.
    """
    outputs = {f"{t.id}Name": t.setting for t in TABLES}
    outputs |= {f"{s.id}Arn": s.setting for s in SECRETS}
    outputs |= {f"{q.id}Url": q.setting for q in QUEUES}
    outputs |= {f"{t.id}Arn": t.setting for t in TOPICS}
    outputs[BROADCAST_SCHEDULE_OUTPUT] = "broadcast_schedule_arn"
    outputs[WARMUP_OUTPUT] = "warmup_schedule"  # the CLI's and console's plan (docs/sending.md)
    outputs[STATE_MACHINE_ARN_PREFIX_OUTPUT] = "state_machine_arn_prefix"
    outputs |= {f"{c.id}Name": c.setting for c in CONFIGURATION_SETS}  # which set is which (reputation)
    return outputs


WARMUP_OUTPUT = "WarmupSchedule"
# Warm-up (shared.sending.warmup): roughly doubling from 200 a day over two weeks, the pace
# warm-up guides suggest for a new domain (SES's own advice is to increase the volume gradually:
# "Amazon SES sending review process FAQs"); no limit after day 14.
DEFAULT_WARMUP = (
    200,
    300,
    500,
    800,
    1_200,
    2_000,
    3_000,
    5_000,
    8_000,
    12_000,
    20_000,
    30_000,
    50_000,
    80_000,
)


def parse_warmup(text: str) -> tuple[int, ...]:
    """``"200,400,800"`` -> ``(200, 400, 800)``; ``""``/``off`` -> ``()`` (no ramp); ``default``
    -> :data:`DEFAULT_WARMUP`. ValueError names the day that is wrong."""
    value = text.strip().lower()
    if value in ("", "off"):
        return ()
    if value == "default":
        return DEFAULT_WARMUP
    volumes = []
    for day, part in enumerate(value.split(","), start=1):
        try:
            volume = int(part.strip())
        except ValueError:
            raise ValueError(f"day {day}: {part.strip()!r} is not a whole number of mails") from None
        if volume < 1:
            raise ValueError(f"day {day}: {volume} must be at least 1 mail")
        volumes.append(volume)
    if len(volumes) > 366:
        raise ValueError("at most 366 days")
    return tuple(volumes)


def warmup_text(schedule: tuple[int, ...]) -> str:
    return ",".join(str(v) for v in schedule) or "off"


# The state machine that waits until a broadcast's --at time (stack output of the broadcasts construct).
BROADCAST_SCHEDULE_OUTPUT = "BroadcastScheduleArn"
# ARN of the sequence state machines without the sequence id (stack output of the sequences construct).
STATE_MACHINE_ARN_PREFIX_OUTPUT = "StateMachineArnPrefix"


# ----- engagement (DESIGN.md section 7) ----------------------------------------------------------
# SES event records: configuration set -> SES_EVENTS_TOPIC -> this queue (SNS envelope kept:
# its MessageId is recorded) -> the engagement function. Malformed records end in the DLQ.
ENGAGEMENT_QUEUE = QueueSpec(
    id="EngagementQueue",
    local_name="mailstep-engagement",
    setting="engagement_queue_url",
    visibility_timeout_s=360,  # 6x the engagement function's timeout (60 s)
    max_receives=5,  # a malformed SES event record ends in the DLQ after these
)
# List hygiene settings the deployment may set (docs/hygiene.md); unset: the defaults of
# shared.core.settings.
HYGIENE_SETTINGS = ("soft_bounce_limit", "soft_bounce_window_days")
ENV |= {field: field.upper() for field in HYGIENE_SETTINGS}
ENGAGEMENT_FUNCTION = FunctionSpec(
    name="engagement",
    handler="functions.engagement.handler.handler",
    description="SES events: events table, open/click/bounce/complaint counters, suppression",
    timeout_s=60,
    grants=(
        # correlation (send-log Query), unique-open/click markers (BatchGetItem, Put), counter
        # ADDs, suppression items and profiles (transaction), EXEC pairs of stopped executions
        Grant(MAIN_TABLE, _ddb("GetItem", "BatchGetItem", "PutItem", "UpdateItem", "DeleteItem", "Query")),
        # the event items (conditional Put in the transaction); a transient bounce's check of
        # the subscriber's recent soft bounces, a click's delivery and other clicks (Query); the
        # last human engagement on the ENGAGEMENT items (BatchGetItem, conditional UpdateItem)
        Grant(EVENTS_TABLE, _ddb("PutItem", "Query", "BatchGetItem", "UpdateItem")),
        Grant(SEQUENCE_EXECUTIONS, ("states:StopExecution",)),
    ),
    optional_settings=HYGIENE_SETTINGS,
    # Big batches: the consumer writes one transaction per batch and folds the counter
    # changes, so a fuller batch costs fewer writes per event (docs/engagement.md).
    event_sources=(EventSourceSpec(queue=ENGAGEMENT_QUEUE, batch_size=100, max_batching_window_s=2),),
)
QUEUES = (*QUEUES, ENGAGEMENT_QUEUE)
SUBSCRIPTIONS = (*SUBSCRIPTIONS, SubscriptionSpec(topic=SES_EVENTS_TOPIC, queue=ENGAGEMENT_QUEUE))
FUNCTIONS = (*FUNCTIONS, ENGAGEMENT_FUNCTION)


# ----- replies (SES inbound, opt-in) ---------------------------------------------------------------
# SES receipt rule -> S3 object + notification on INBOUND_TOPIC -> this queue -> the inbound
# function, which parses the MIME, finds the original send and records a ``reply`` event.
INBOUND_TOPIC = TopicSpec(id="InboundTopic", local_name="mailstep-inbound", setting="inbound_topic_arn")
INBOUND_QUEUE = QueueSpec(
    id="InboundQueue",
    local_name="mailstep-inbound",
    setting="inbound_queue_url",
    visibility_timeout_s=360,  # 6x the inbound function's timeout (60 s)
    max_receives=5,
)
INBOUND_FUNCTION = FunctionSpec(
    name="inbound",
    handler="functions.inbound.handler.handler",
    description="Replies: SES inbound mail -> reply events (exit_on triggers), optional forwarding",
    timeout_s=60,
    grants=(
        # like the events API (ingest: idempotency, upsert, EXEC pairs) plus send-log Queries
        *INGEST_GRANTS,
        *SEQUENCE_CONTROL_GRANTS,
        Grant(INBOUND_OBJECTS, ("s3:GetObject",)),
        *send_email_grants(only_with="reply_forward_to"),  # forwarding, when configured
    ),
    event_sources=(EventSourceSpec(queue=INBOUND_QUEUE, batch_size=5),),
    mail_settings=True,
    optional_settings=("reply_forward_to",),
)
QUEUES = (*QUEUES, INBOUND_QUEUE)
TOPICS = (*TOPICS, INBOUND_TOPIC)
SUBSCRIPTIONS = (*SUBSCRIPTIONS, SubscriptionSpec(topic=INBOUND_TOPIC, queue=INBOUND_QUEUE))
FUNCTIONS = (*FUNCTIONS, INBOUND_FUNCTION)
ENV["reply_forward_to"] = "REPLY_FORWARD_TO"


# ----- broadcasts (docs/broadcasts.md) -----------------------------------------------------------
# broadcast.resolve envelopes: the resolver resolves audience pages from the message's page on
# for up to a minute, then enqueues the next page's message; broadcast.batch envelopes: the
# workers send one batch per message. A queue of their own keeps sequence and transactional
# mail (SEND_QUEUE) out of their backlog.
BROADCAST_CONTROL_QUEUE = QueueSpec(
    id="BroadcastControlQueue",
    local_name="mailstep-broadcast-control",
    setting="broadcast_control_queue_url",
    visibility_timeout_s=720,  # 6x the resolver's timeout (120 s)
    max_receives=5,  # then a poison envelope waits in the DLQ (alarmed)
)
BROADCAST_QUEUE = QueueSpec(
    id="BroadcastQueue",
    local_name="mailstep-broadcast",
    setting="broadcast_queue_url",
    visibility_timeout_s=1800,  # 6x the worker's timeout (300 s)
    max_receives=8,  # the worker marks a batch dead-lettered on this receive (final_receive)
)
BROADCAST_RESOLVER_FUNCTION = FunctionSpec(
    name="broadcast-resolver",
    handler="functions.broadcast_resolver.handler.handler",
    description="Broadcast audience: resolves pages in a loop per message, hands batches to the workers",
    # A full vCPU (1,769 MB): parsing Scan pages is CPU work (about 0.1-0.15 ms per profile
    # measured, 0.35 ms per recipient for the whole step), and a page's 16 Scan segments are
    # read at once; at 512 MB (0.29 vCPU) a million recipients took over 10 minutes of CPU
    # alone (docs/broadcasts.md, "Resolving a million").
    memory_mb=1769,
    # Pages of <= 1,000 recipients (<= 5,000 candidates looked at) for up to 60 s per invocation,
    # starting none in its last 30 s (shared.broadcasts.fanout.INVOCATION_BUDGET_S, RESERVE_S).
    timeout_s=120,
    grants=(
        # the broadcast record and page checkpoints (GetItem, UpdateItem, Put + Update
        # transaction), the audience (parallel Scan of profiles, Query of TAG#, BatchGetItem profiles)
        Grant(MAIN_TABLE, _ddb("GetItem", "BatchGetItem", "PutItem", "UpdateItem", "Query", "Scan")),
        # engagement conditions (shared.broadcasts.engagement): ENGAGEMENT items (BatchGetItem),
        # a subscriber's machine opens and clicks (Query)
        Grant(EVENTS_TABLE, _ddb("BatchGetItem", "Query")),
        # SendMessageBatch: the batches; GetQueueAttributes: the queue's depth (back-pressure)
        Grant(BROADCAST_QUEUE, ("sqs:SendMessage", "sqs:GetQueueAttributes")),
        Grant(BROADCAST_CONTROL_QUEUE, ("sqs:SendMessage",)),  # the next page
    ),
    event_sources=(EventSourceSpec(queue=BROADCAST_CONTROL_QUEUE, batch_size=1, max_concurrency=2),),
)
# Broadcast workers are sized from the account's SES rate (docs/broadcasts.md, "Sizing"): each
# has a full vCPU (1,769 MB; a Python process uses at most one), and as many run at once as
# the broadcasts' share of the rate needs at WORKER_CPU_MS_PER_MAIL each, with headroom. A
# CPU-bound function costs the same per mail at any memory (GB x seconds: less CPU, longer).
WORKER_CPU_MS_PER_MAIL = 40.0  # budget; python -m bench capacity measures 30-45 ms
WORKER_HEADROOM = 1.5  # for slower CPUs, cold starts and the rate limiter's waits
MIN_BROADCAST_WORKERS = 3
MAX_BROADCAST_WORKERS = 1000  # SQS event source maximum concurrency (and the account's default)
DEFAULT_BROADCAST_RATE_SHARE = 1.0  # shared.core.settings.Settings.broadcast_rate_share


def broadcast_workers(ses_max_send_rate: float, share: float = DEFAULT_BROADCAST_RATE_SHARE) -> int:
    """How many broadcast workers (the broadcast queue's maximum concurrency) keep up with
    ``share`` of an account's SES rate: 14/s -> 3, 200/s -> 12, 1,000/s -> 60."""
    needed = ses_max_send_rate * share * WORKER_CPU_MS_PER_MAIL / 1000.0 * WORKER_HEADROOM
    return max(MIN_BROADCAST_WORKERS, min(MAX_BROADCAST_WORKERS, math.ceil(needed)))


BROADCAST_WORKER_FUNCTION = FunctionSpec(
    name="broadcast-worker",
    handler="functions.broadcast_worker.handler.handler",
    description="Broadcast batches: rate-limited sends through the send pipeline, counted once",
    memory_mb=1769,  # a full vCPU: see the sizing note above
    timeout_s=300,
    # the send pipeline (sends are counted per batch: marker Put + Update transaction), the
    # shared rate limiter (UpdateItem ADD); a held broadcast's wake-up message (SendMessage,
    # delayed) on the resolver's queue
    grants=(*SEND_PIPELINE_GRANTS, Grant(BROADCAST_CONTROL_QUEUE, ("sqs:SendMessage",))),
    # One batch (100 recipients) per invocation: the last batches of a broadcast still run
    # on every worker, so the tail of a send keeps the rate. The maximum concurrency here is
    # the smallest; the stack sets broadcast_workers(mailstep:sesMaxSendRate).
    event_sources=(
        EventSourceSpec(
            queue=BROADCAST_QUEUE,
            batch_size=1,
            max_concurrency=MIN_BROADCAST_WORKERS,
            sized_by_send_rate=True,
        ),
    ),
    mail_settings=True,
)
QUEUES = (*QUEUES, BROADCAST_CONTROL_QUEUE, BROADCAST_QUEUE)
FUNCTIONS = (*FUNCTIONS, BROADCAST_RESOLVER_FUNCTION, BROADCAST_WORKER_FUNCTION)


# ----- sign-up and consent (docs/signup.md) ------------------------------------------------------
# Public: POST /v1/signup (no API key; throttled per route in the stack), GET /c/{token} (reads
# only), POST /c/{token} (confirms). Settings passed only when the deployment sets them (the
# defaults live in shared.core.settings).
SIGNUP_SETTINGS = (
    "signup_double_opt_in",
    "signup_single_opt_in_forms",
    "signup_allowed_origins",
    "signup_pending_days",
    "signup_cooldown_seconds",
    "signup_domain_cap_per_hour",
    "signup_domain_held_per_hour",
    "signup_source_cap_per_hour",
    "signup_max_body_bytes",
)
ENV |= {field: field.upper() for field in SIGNUP_SETTINGS}
SIGNUP_ROUTE = RouteSpec("POST", "/v1/signup")
SIGNUP_FUNCTION = FunctionSpec(
    name="signup",
    handler="functions.signup.handler.handler",
    description="Sign-up: POST /v1/signup (double opt-in), GET/POST /c/{token} (confirm)",
    memory_mb=1280,  # as the API's
    grants=(
        # the sign-up's one read (profile, SUPPRESSION, erase tombstone, pending item, mailbox
        # cooldown, domain counter: BatchGetItem), its admission (transaction: pending Put,
        # cooldown Put, domain counter Update, SUPPRESSION ConditionCheck), the confirm
        # transaction (profile Put, pending and TAG# Delete, counter Update), EXEC pairs of
        # started sequences, and the subscriber.confirmed event
        *SUBSCRIBER_WRITE_GRANTS,
        Grant(MAIN_TABLE, _ddb("BatchGetItem")),
        Grant(UNSUBSCRIBE_SECRET, ("secretsmanager:GetSecretValue",)),  # signs the confirm links
        Grant(SEND_QUEUE, ("sqs:SendMessage",)),  # the confirmation mail's job (the sender mails it)
        *SEQUENCE_CONTROL_GRANTS,  # trigger: subscriber.confirmed
    ),
    routes=(SIGNUP_ROUTE, RouteSpec("GET", "/c/{token}"), RouteSpec("POST", "/c/{token}")),
    mail_settings=True,
    optional_settings=SIGNUP_SETTINGS,
)
FUNCTIONS = (*FUNCTIONS, SIGNUP_FUNCTION)


# ----- webhooks (docs/webhooks.md) ---------------------------------------------------------------
# The tables' change streams -> webhook-dispatch (one delivery item per event and endpoint, its
# first attempt queued) -> WEBHOOK_QUEUE -> webhook-deliver (signed POSTs; retries are delayed
# messages on the same queue). Only the records that can be webhook events reach the dispatcher
# (event filtering, shared.webhooks.events.from_stream_record reads them).
WEBHOOK_QUEUE = QueueSpec(
    id="WebhookQueue",
    local_name="mailstep-webhooks",
    setting="webhook_queue_url",
    # at least 6x the delivery function's timeout (30 s), as Lambda asks of an SQS event source
    # (https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-configure.html)
    visibility_timeout_s=180,
    max_receives=5,  # the function's own failures: a POST's retry is a new, delayed message
)


def _prefix(*values: str) -> list[dict[str, str]]:
    return [{"prefix": value} for value in values]


WEBHOOK_MAIN_FILTERS: tuple[dict[str, Any], ...] = (
    # subscriber profiles, suppressions, the send log, executions (not the inverse partners)
    {"dynamodb": {"Keys": {"PK": {"S": _prefix("SUB#")}, "SK": {"S": ["PROFILE", "SUPPRESSION"]}}}},
    {
        "eventName": ["INSERT"],
        "dynamodb": {"Keys": {"PK": {"S": _prefix("SUB#")}, "SK": {"S": _prefix("SENT#")}}},
    },
    {
        "eventName": ["INSERT", "REMOVE"],
        "dynamodb": {"Keys": {"PK": {"S": _prefix("SUB#")}, "SK": {"S": _prefix("EXEC#")}}},
    },
    # broadcast records whose status changed
    {"eventName": ["INSERT", "MODIFY"], "dynamodb": {"Keys": {"PK": {"S": ["BROADCAST"]}}}},
    # the reputation guardrail's pause records (reputation.paused / reputation.resumed)
    {"eventName": ["INSERT", "MODIFY"], "dynamodb": {"Keys": {"PK": {"S": ["REPUTATION"]}}}},
)
WEBHOOK_EVENTS_FILTERS: tuple[dict[str, Any], ...] = (
    {
        "eventName": ["INSERT"],
        "dynamodb": {
            "NewImage": {
                "type": {
                    "S": [
                        "delivery",
                        "bounce",
                        "complaint",
                        "open",
                        "click",
                        "subscriber.confirmed",
                        "subscriber.cold",
                    ]
                }
            }
        },
    },
)
# A stream batch that still fails after its retries: its on-failure record (which shard, which
# sequence numbers: not the records) comes here; the records stay in the stream for 24 hours
# (docs/webhooks.md, "Redriving a failed stream batch").
WEBHOOK_STREAM_FAILURES = FailureQueueSpec(
    id="WebhookStreamFailures",
    local_name="mailstep-webhook-stream-failures",
    holds="table stream batches the webhook dispatcher skipped after its retries: read the records "
    "from the stream within 24 hours and replay them (docs/webhooks.md)",
)
WEBHOOK_DISPATCH_FUNCTION = FunctionSpec(
    name="webhook-dispatch",
    handler="functions.webhook_dispatch.handler.handler",
    description="Webhooks: table change streams -> one delivery per event and subscribed endpoint",
    timeout_s=60,
    grants=(
        # the endpoints (Query), the delivery items (conditional Put; GetItem of a repeated one)
        Grant(MAIN_TABLE, _ddb("Query", "GetItem", "PutItem")),
        Grant(WEBHOOK_QUEUE, ("sqs:SendMessage",)),  # first attempts
    ),
    stream_sources=(
        StreamSourceSpec(table=MAIN_TABLE, on_failure=WEBHOOK_STREAM_FAILURES, filters=WEBHOOK_MAIN_FILTERS),
        StreamSourceSpec(
            table=EVENTS_TABLE, on_failure=WEBHOOK_STREAM_FAILURES, filters=WEBHOOK_EVENTS_FILTERS
        ),
    ),
)
WEBHOOK_DELIVER_FUNCTION = FunctionSpec(
    name="webhook-deliver",
    handler="functions.webhook_deliver.handler.handler",
    description="Webhooks: signed Standard Webhooks POSTs, retried on the spec's schedule",
    memory_mb=256,
    # a batch of 5 POSTs at the same time, each at most 10 s (shared.webhooks.transport), and a
    # circuit's drain of 10 parked deliveries: 30 s leaves room for DynamoDB's and SQS's retries
    timeout_s=30,
    grants=(
        # the delivery (GetItem, attempt UpdateItems), the endpoint (GetItem, UpdateItem: failing,
        # disabled, its circuit), the parked deliveries of an open circuit (PutItem, Query, DeleteItem)
        Grant(MAIN_TABLE, _ddb("GetItem", "UpdateItem", "PutItem", "Query", "DeleteItem")),
        Grant(WEBHOOK_QUEUE, ("sqs:SendMessage",)),  # the next attempt, the hops of a long wait
        Grant(WEBHOOK_SECRETS, ("secretsmanager:GetSecretValue",)),
    ),
    event_sources=(EventSourceSpec(queue=WEBHOOK_QUEUE, batch_size=5, max_concurrency=5),),
    optional_settings=("webhook_allow_loopback_http",),
)
QUEUES = (*QUEUES, WEBHOOK_QUEUE)
FAILURE_QUEUES = (*FAILURE_QUEUES, WEBHOOK_STREAM_FAILURES)
FUNCTIONS = (*FUNCTIONS, WEBHOOK_DISPATCH_FUNCTION, WEBHOOK_DELIVER_FUNCTION)


# ----- reputation guardrail (docs/reputation.md) --------------------------------------------------
# CloudWatch alarms on the marketing set's reputation metrics (stacks/constructs/alarms.py) ->
# REPUTATION_TOPIC (and the operator's alarm topic) -> this queue -> the reputation-guard function,
# which pauses the marketing configuration set and its broadcasts in progress (idempotent).
REPUTATION_TOPIC = TopicSpec(
    id="ReputationAlarmTopic", local_name="mailstep-reputation-alarms", setting="reputation_topic_arn"
)
REPUTATION_QUEUE = QueueSpec(
    id="ReputationQueue",
    local_name="mailstep-reputation",
    setting="reputation_queue_url",
    visibility_timeout_s=180,  # 6x the function's timeout (30 s)
    max_receives=5,  # then its DLQ, whose alarm and `mailstep doctor` report the alarm not acted on
)
REPUTATION_FUNCTION = FunctionSpec(
    name="reputation-guard",
    handler="functions.reputation_guard.handler.handler",
    description="Reputation guardrail: a reputation alarm pauses marketing sending and its broadcasts",
    timeout_s=30,  # one SES call, then one status update per broadcast in progress
    grants=(
        # SES v2 PutConfigurationSetSendingOptions (SendingEnabled false) on the marketing set only
        Grant(PAUSABLE_CONFIGURATION_SET, ("ses:PutConfigurationSetSendingOptions",)),
        # the REPUTATION record (conditional UpdateItem: shared.reputation.store), broadcasts in
        # progress (Query the BROADCAST partition, conditional status UpdateItem:
        # shared.broadcasts.records); it reads and puts no item
        Grant(MAIN_TABLE, _ddb("UpdateItem", "Query")),
    ),
    event_sources=(EventSourceSpec(queue=REPUTATION_QUEUE, batch_size=1),),
    optional_settings=(PAUSABLE_CONFIGURATION_SET.setting,),  # the name of the set it pauses
)
TOPICS = (*TOPICS, REPUTATION_TOPIC)
QUEUES = (*QUEUES, REPUTATION_QUEUE)
SUBSCRIPTIONS = (*SUBSCRIPTIONS, SubscriptionSpec(topic=REPUTATION_TOPIC, queue=REPUTATION_QUEUE))
FUNCTIONS = (*FUNCTIONS, REPUTATION_FUNCTION)
# ----- list hygiene: sunset (docs/hygiene.md) ------------------------------------------------------
# A daily EventBridge schedule -> the hygiene function: subscribers without a human open or click
# for coldAfterDays (newSubscriberColdAfterDays while younger than coldAfterDays) turn cold (tag
# ``cold``, event ``subscriber.cold``, which sequences can trigger on); still cold after
# sunsetGraceDays, they are unsubscribed (tag ``sunset``). It reads only the HygieneIndex day
# buckets that fall due (shared.engagement.sunset).
HYGIENE_INDEX = next(g.name for g in EVENTS_TABLE.gsis if g.partition_key == "hygiene_key")
SUNSET_SETTINGS = ("cold_after_days", "new_subscriber_cold_after_days", "sunset_grace_days")
ENV |= {field: field.upper() for field in SUNSET_SETTINGS}
HYGIENE_SCHEDULE = "cron(0 4 * * ? *)"  # every day at 04:00 UTC (EventBridge cron, UTC)
HYGIENE_FAILURES = FailureQueueSpec(
    id="HygieneFailures",
    local_name="mailstep-hygiene-failures",
    holds="daily hygiene runs that failed after their retries (the next day's run resumes from the "
    "checkpoint): find why in the hygiene function's logs (docs/operations.md)",
)
HYGIENE_FUNCTION = FunctionSpec(
    name="hygiene",
    handler="functions.hygiene.handler.handler",
    description="List hygiene, daily: marks subscribers without human engagement cold, unsubscribes "
    "them after the grace period",
    memory_mb=1024,
    timeout_s=900,  # a run that stops part-way is resumed by the next (checkpoint per day)
    grants=(
        # the events API's path for subscriber.cold and the sunset unsubscribe (idempotency
        # records, profile + TAG# transaction, the event item, EXEC pairs), the checkpoint
        # (GetItem, PutItem), eligibility (BatchGetItem of profiles and suppressions)
        *INGEST_GRANTS,
        Grant(EVENTS_TABLE, _ddb("UpdateItem")),  # the ENGAGEMENT items: cold marks (conditional)
        Grant(TableIndex(EVENTS_TABLE, HYGIENE_INDEX), _ddb("Query")),  # the due day buckets
        *SEQUENCE_CONTROL_GRANTS,  # trigger: subscriber.cold; unsubscribing stops marketing
    ),
    optional_settings=SUNSET_SETTINGS,
    async_failures=HYGIENE_FAILURES,  # the daily rule's target
)
FUNCTIONS = (*FUNCTIONS, HYGIENE_FUNCTION)
FAILURE_QUEUES = (*FAILURE_QUEUES, HYGIENE_FAILURES)


# ----- list health (docs/data-model.md, "List health") ---------------------------------------------
# The main table's change stream -> stats-fold: every path that changes a subscriber writes the
# PROFILE item, so its records are the list's changes. It is the stream's second reader (webhook-
# dispatch is the first): DynamoDB Streams serves at most two concurrent readers per shard, so a
# third consumer of the main table's stream would be throttled (docs/data-model.md).
LIST_HEALTH_FILTERS: tuple[dict[str, Any], ...] = (
    {"dynamodb": {"Keys": {"PK": {"S": _prefix("SUB#")}, "SK": {"S": ["PROFILE"]}}}},
)
# ... and the send log's new entries that a single send left to the fold to count
# (shared.store.stream_counts: ``fold_count``; a broadcast's entries are counted by its batches)
SEND_COUNT_FILTERS: tuple[dict[str, Any], ...] = (
    {
        "eventName": ["INSERT"],
        "dynamodb": {
            "Keys": {"PK": {"S": _prefix("SUB#")}, "SK": {"S": _prefix("SENT#")}},
            "NewImage": {"fold_count": {"BOOL": [True]}},
        },
    },
)
# ... and the EXEC# items written and deleted (a sequence's executions count, active/started/
# completed: shared.store.stream_counts; the ``ended`` mark's MODIFY is not one)
EXECUTION_COUNT_FILTERS: tuple[dict[str, Any], ...] = (
    {
        "eventName": ["INSERT", "REMOVE"],
        "dynamodb": {"Keys": {"PK": {"S": _prefix("SUB#")}, "SK": {"S": _prefix("EXEC#")}}},
    },
)
# ... and, from the events table's stream (its second reader, beside webhook-dispatch), the
# Deliveries the engagement consumer wrote alone for the fold to count (``fold_count``)
EVENT_COUNT_FILTERS: tuple[dict[str, Any], ...] = (
    {
        "eventName": ["INSERT"],
        "dynamodb": {
            "Keys": {"SK": {"S": _prefix("EVT#")}},
            "NewImage": {"fold_count": {"BOOL": [True]}},
        },
    },
)
SEND_COUNT_WINDOW_S = 5  # the stats fold's batching window (docs/data-model.md, "List health")
LIST_HEALTH_STREAM_FAILURES = FailureQueueSpec(
    id="ListHealthStreamFailures",
    local_name="mailstep-list-health-stream-failures",
    holds="profile change, single-send, execution and Delivery records the stats fold skipped after its "
    "retries: the subscriber, send, execution and delivery counts miss them; read them from the stream "
    "within 24 hours and fold them again (docs/operations.md)",
)
STATS_FOLD_FUNCTION = FunctionSpec(
    name="stats-fold",
    handler="functions.stats_fold.handler.handler",
    description="Stats fold: profile changes, single sends, executions (main table stream) and Deliveries "
    "(events table stream) -> counters",
    memory_mb=256,
    timeout_s=60,
    grants=(
        # one TransactWriteItems per batch (per 90 items): each item's mark (conditional
        # UpdateItem) and the counts' ADDs (UpdateItem); the sends and executions: one per run of entries, the
        # run's mark (conditional UpdateItem) and the ADDs; it reads nothing
        Grant(MAIN_TABLE, _ddb("UpdateItem")),
    ),
    stream_sources=(
        StreamSourceSpec(
            table=MAIN_TABLE,
            on_failure=LIST_HEALTH_STREAM_FAILURES,
            filters=(*LIST_HEALTH_FILTERS, *SEND_COUNT_FILTERS, *EXECUTION_COUNT_FILTERS),
            bisect=False,  # the send runs' marks are keyed by a run's first record
            # a run's mark and counters are shared by the sends of a batch: below 100 sends per
            # batch a longer wait makes fewer, fuller batches (counts show up to 5 s later)
            max_batching_window_s=SEND_COUNT_WINDOW_S,
        ),
        StreamSourceSpec(
            table=EVENTS_TABLE,
            on_failure=LIST_HEALTH_STREAM_FAILURES,
            filters=EVENT_COUNT_FILTERS,
            bisect=False,  # the same runs' marks
            max_batching_window_s=SEND_COUNT_WINDOW_S,
        ),
    ),
)
FAILURE_QUEUES = (*FAILURE_QUEUES, LIST_HEALTH_STREAM_FAILURES)
FUNCTIONS = (*FUNCTIONS, STATS_FOLD_FUNCTION)
