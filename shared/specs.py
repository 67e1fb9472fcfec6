"""One description of mailstep's cloud resources, read by the CDK constructs (``stacks/``)
and by the local runtime's bootstrapper (``cli/local``).

Nothing here imports CDK or boto3: it is plain data. An infra test proves that the
synthesized template and these specs agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field

APP_NAME = "mailstep"
STACK_NAME = "Mailstep"
LAMBDA_RUNTIME = "python3.12"
# What the Lambdas need at run time (mirrors [project].dependencies in pyproject.toml;
# tests/unit/test_specs.py proves they agree).
LAMBDA_REQUIREMENTS = (
    "aws-lambda-powertools[parser]==3.37.0",
    "pydantic==2.14.3",
    "jinja2==3.1.6",
    "pyyaml==6.0.3",
    "markdown==3.11.3",
    "css-inline==0.23.1",
)
# Source folders shipped in every Lambda's code asset.
LAMBDA_SOURCE_DIRS = ("shared", "functions", "templates", "sequences")

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
    "broadcast_queue_url": "BROADCAST_QUEUE_URL",
    "broadcast_control_queue_url": "BROADCAST_CONTROL_QUEUE_URL",
    "broadcast_schedule_arn": "BROADCAST_SCHEDULE_ARN",
    "broadcast_max_send_rate": "BROADCAST_MAX_SEND_RATE",
    "broadcast_rate_share": "BROADCAST_RATE_SHARE",
    "broadcast_worker_threads": "BROADCAST_WORKER_THREADS",
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


MAIN_TABLE = TableSpec(id="MainTable", local_name="mailstep-main", setting="table_name")
EVENTS_TABLE = TableSpec(
    id="EventsTable",
    local_name="mailstep-events",
    setting="events_table_name",
    gsis=(
        GsiSpec(name="TemplateIndex", partition_key="template", sort_key=SK),
        GsiSpec(name="SequenceIndex", partition_key="source", sort_key=SK),
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
    local_name="mailstep/api-key",
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


@dataclass(frozen=True)
class QueueSpec:
    """An SQS queue with its dead-letter queue (maxReceiveCount ``max_receives``)."""

    id: str
    local_name: str
    setting: str  # Settings field that receives the queue URL
    visibility_timeout_s: int = 180
    max_receives: int = 5


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
    read_write_tables: tuple[TableSpec, ...] = ()
    read_secrets: tuple[SecretSpec, ...] = ()
    routes: tuple[RouteSpec, ...] = ()
    event_sources: tuple[EventSourceSpec, ...] = ()
    send_queues: tuple[QueueSpec, ...] = ()  # queues the function may send to
    publish_topics: tuple[TopicSpec, ...] = ()
    reserved_concurrency: int | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    sends_email: bool = False  # may call SES SendEmail (ses:SendEmail, ses:SendRawEmail)
    mail_settings: bool = False  # receives the MAIL_SETTINGS environment


API_FUNCTION = FunctionSpec(
    name="api",
    handler="functions.api.handler.handler",
    description="HTTP API: POST /v1/events",
    read_write_tables=(MAIN_TABLE, EVENTS_TABLE),
    read_secrets=(API_KEY_SECRET,),
    routes=(RouteSpec("POST", "/v1/events"),),
)
# Send jobs (contract ``send.job``, DESIGN.md section 6b) consumed by the sender function.
SEND_QUEUE = QueueSpec(
    id="SendQueue",
    local_name="mailstep-send",
    setting="send_queue_url",
    visibility_timeout_s=180,
    max_receives=5,
)
# Settings a function with ``mail_settings`` receives besides its tables and secrets.
MAIL_SETTINGS = (
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
SENDER_FUNCTION = FunctionSpec(
    name="sender",
    handler="functions.sender.handler.handler",
    description="Send queue consumer: renders and sends one mail per send job, at most once",
    timeout_s=60,
    read_write_tables=(MAIN_TABLE, EVENTS_TABLE),
    read_secrets=(UNSUBSCRIBE_SECRET,),
    event_sources=(EventSourceSpec(queue=SEND_QUEUE, batch_size=10, max_concurrency=2),),
    sends_email=True,
    mail_settings=True,
)
UNSUBSCRIBE_FUNCTION = FunctionSpec(
    name="unsubscribe",
    handler="functions.unsubscribe.handler.handler",
    description="Unsubscribe pages: GET /u/{token} (confirm), POST /u/{token} (one-click), resubscribe",
    read_write_tables=(MAIN_TABLE, EVENTS_TABLE),
    read_secrets=(UNSUBSCRIBE_SECRET,),
    routes=(
        RouteSpec("GET", "/u/{token}"),
        RouteSpec("POST", "/u/{token}"),
        RouteSpec("POST", "/u/{token}/resubscribe"),
    ),
    mail_settings=True,
)
# Sequences (DESIGN.md section 5): the Lambda every generated state machine calls, and the
# cleanup of executions that ended without their last Task (timeout, abort, failure).
# State machines are named STATE_MACHINE_PREFIX + sequence id.
STATE_MACHINE_PREFIX = f"{APP_NAME}-seq-"
SEQUENCE_STEP_FUNCTION = FunctionSpec(
    name="sequence-step",
    handler="functions.sequence_step.handler.handler",
    description="Sequence steps: send, check, tag, schedule, finish, fail (called by the state machines)",
    timeout_s=60,
    read_write_tables=(MAIN_TABLE, EVENTS_TABLE),
    read_secrets=(UNSUBSCRIBE_SECRET,),
    sends_email=True,
    mail_settings=True,
)
SEQUENCE_CLEANUP_FUNCTION = FunctionSpec(
    name="sequence-cleanup",
    handler="functions.sequence_cleanup.handler.handler",
    description="Removes the EXEC pair of a sequence execution that failed, timed out or was aborted",
    read_write_tables=(MAIN_TABLE,),
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
    local_name="mailstep",
    setting="configuration_set",
    event_topic=SES_EVENTS_TOPIC,
)
CONFIGURATION_SETS = (CONFIGURATION_SET,)


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
    return outputs


# The state machine that waits until a broadcast's --at time (stack output of the broadcasts construct).
BROADCAST_SCHEDULE_OUTPUT = "BroadcastScheduleArn"


# ----- engagement (DESIGN.md section 7) ----------------------------------------------------------
# SES event records: configuration set -> SES_EVENTS_TOPIC -> this queue (SNS envelope kept:
# its MessageId is recorded) -> the engagement function. Malformed records end in the DLQ.
ENGAGEMENT_QUEUE = QueueSpec(
    id="EngagementQueue",
    local_name="mailstep-engagement",
    setting="engagement_queue_url",
    visibility_timeout_s=180,
    max_receives=5,
)
ENGAGEMENT_FUNCTION = FunctionSpec(
    name="engagement",
    handler="functions.engagement.handler.handler",
    description="SES events: events table, open/click/bounce/complaint counters, suppression",
    timeout_s=60,
    read_write_tables=(MAIN_TABLE, EVENTS_TABLE),
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
    visibility_timeout_s=180,
    max_receives=5,
)
INBOUND_FUNCTION = FunctionSpec(
    name="inbound",
    handler="functions.inbound.handler.handler",
    description="Replies: SES inbound mail -> reply events (exit_on triggers), optional forwarding",
    timeout_s=60,
    read_write_tables=(MAIN_TABLE, EVENTS_TABLE),
    event_sources=(EventSourceSpec(queue=INBOUND_QUEUE, batch_size=5),),
    sends_email=True,
    mail_settings=True,
)
QUEUES = (*QUEUES, INBOUND_QUEUE)
TOPICS = (*TOPICS, INBOUND_TOPIC)
SUBSCRIPTIONS = (*SUBSCRIPTIONS, SubscriptionSpec(topic=INBOUND_TOPIC, queue=INBOUND_QUEUE))
FUNCTIONS = (*FUNCTIONS, INBOUND_FUNCTION)
ENV["reply_forward_to"] = "REPLY_FORWARD_TO"


# ----- broadcasts (docs/broadcasts.md) -----------------------------------------------------------
# broadcast.resolve envelopes: the resolver handles one audience page per message and
# re-enqueues itself; broadcast.batch envelopes: the workers send one batch per message. A
# queue of their own keeps sequence and transactional mail (SEND_QUEUE) out of their backlog.
BROADCAST_CONTROL_QUEUE = QueueSpec(
    id="BroadcastControlQueue",
    local_name="mailstep-broadcast-control",
    setting="broadcast_control_queue_url",
    visibility_timeout_s=180,
    max_receives=5,
)
BROADCAST_QUEUE = QueueSpec(
    id="BroadcastQueue",
    local_name="mailstep-broadcast",
    setting="broadcast_queue_url",
    visibility_timeout_s=360,
    max_receives=8,
)
BROADCAST_RESOLVER_FUNCTION = FunctionSpec(
    name="broadcast-resolver",
    handler="functions.broadcast_resolver.handler.handler",
    description="Broadcast audience: resolves one page per message, hands batches to the workers",
    timeout_s=120,
    read_write_tables=(MAIN_TABLE,),
    event_sources=(EventSourceSpec(queue=BROADCAST_CONTROL_QUEUE, batch_size=1, max_concurrency=2),),
    send_queues=(BROADCAST_QUEUE, BROADCAST_CONTROL_QUEUE),
)
BROADCAST_WORKER_FUNCTION = FunctionSpec(
    name="broadcast-worker",
    handler="functions.broadcast_worker.handler.handler",
    description="Broadcast batches: rate-limited sends through the send pipeline, counted once",
    memory_mb=256,
    timeout_s=300,
    read_write_tables=(MAIN_TABLE, EVENTS_TABLE),
    read_secrets=(UNSUBSCRIBE_SECRET,),
    # One batch (50 recipients) per invocation: the last batches of a broadcast still run
    # on every worker, so the tail of a send keeps the rate.
    event_sources=(EventSourceSpec(queue=BROADCAST_QUEUE, batch_size=1, max_concurrency=3),),
    sends_email=True,
    mail_settings=True,
)
QUEUES = (*QUEUES, BROADCAST_CONTROL_QUEUE, BROADCAST_QUEUE)
FUNCTIONS = (*FUNCTIONS, BROADCAST_RESOLVER_FUNCTION, BROADCAST_WORKER_FUNCTION)
