"""boto3 clients: the Lambdas' cached factory, and factories for an explicit configuration.

``client(service)`` is what the Lambdas use: clients are created lazily (so moto, started
after import, still intercepts them), cached per service, and configured by the environment
(``AWS_REGION``, credentials, ``AWS_ENDPOINT_URL``) as Lambda sets it.

``ClientFactory(AwsConfig(...))`` builds clients for a configuration given as a value
(endpoint, region, credentials), never read from or written to ``os.environ``: the CLI and
the MCP server point at the local runtime or at a stack this way, and the local runtime
talks to its embedded endpoint this way. Fields left ``None`` fall back to boto3's usual
lookup (environment, shared config files); ``ClientFactory()`` hands out the clients of
``client()`` itself.

``register_hook`` attaches a botocore event handler (e.g. ``after-call``) to every client
either way has created or will create; the bench uses it to count requests.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, Literal, overload

import boto3
import botocore.session
from botocore.client import BaseClient
from botocore.config import Config
from botocore.loaders import Loader, create_loader

if TYPE_CHECKING:  # the boto3-stubs service packages (dev extra): types only, never at run time
    from mypy_boto3_cloudformation import CloudFormationClient
    from mypy_boto3_cloudwatch import CloudWatchClient
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_lambda import LambdaClient
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_secretsmanager import SecretsManagerClient
    from mypy_boto3_sesv2 import SESV2Client
    from mypy_boto3_sns import SNSClient
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_stepfunctions import SFNClient

# One client per service is shared by every thread of a process (a broadcast worker runs
# BROADCAST_WORKER_THREADS sends at once): the pool holds a connection per thread, so none
# is opened and thrown away per request (botocore's default pool is 10).
MAX_POOL_CONNECTIONS = 50
_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": 5},
    connect_timeout=5,
    read_timeout=30,
    max_pool_connections=MAX_POOL_CONNECTIONS,
)

Hook = Callable[..., Any]
_hooks: list[tuple[str, Hook]] = []
_created: list[BaseClient] = []
_lock = threading.Lock()


def _track(created: BaseClient) -> BaseClient:
    with _lock:
        for event_name, handler in _hooks:
            created.meta.events.register(event_name, handler)
        _created.append(created)
    return created


def _new_client(session: boto3.session.Session, service: str, **options: Any) -> BaseClient:
    # Any service name: the overloads of client() below give each caller its service's type.
    # boto3-stubs types Session.client per service-name literal only; this factory takes any
    # name (the overloads of client() give each caller its service's type).
    created: BaseClient = session.client(service, config=_CONFIG, **options)  # type: ignore[call-overload]
    return created


# botocore parses its data files (endpoints, partitions, retry rules, each service's model and
# endpoint rules: JSON, most of a client's creation) into the session's data loader. Every session
# here shares the process's one loader, so each file is parsed once per process; and the
# environment's clients share one session. Eight clients: 0.8 s of CPU in sessions of their own,
# 0.2 s in one. A session is not thread-safe: clients are created under a lock (the clients
# themselves are).
_session_lock = threading.Lock()
_loader_lock = threading.Lock()
# The services mailstep's code calls (a fork server parses their models before it forks).
SERVICES = (
    "cloudformation", "cloudwatch", "dynamodb", "lambda", "s3", "scheduler", "secretsmanager",
    "sesv2", "sns", "sqs", "stepfunctions",
)  # fmt: skip


@cache
def _data_loader() -> Loader:
    return create_loader()


def new_session(*, isolated: bool = False, **options: Any) -> boto3.session.Session:
    """A boto3 session on the process's data loader; ``options`` as boto3's Session takes them.
    ``isolated``: no profile of the environment applies (explicit keys)."""
    core = botocore.session.Session(session_vars={"profile": (None, None, None, None)} if isolated else None)
    loader = _data_loader()
    core.register_component("data_loader", loader)
    session = boto3.session.Session(botocore_session=core, **options)
    with _loader_lock:  # boto3 adds its own data folder to the loader for every session
        loader.search_paths[:] = list(dict.fromkeys(loader.search_paths))
    return session


def parse_models(services: tuple[str, ...] = SERVICES, region: str = "us-east-1") -> None:
    """Parse the data files of ``services`` into the process's loader without a request (a fork
    server does this before it forks: its forks' clients skip the parsing, which is the same
    code on the same files, done once)."""
    # keys of no one: making a client must not look for credentials (no request is made)
    unused = "parse-only"
    session = new_session(region_name=region, aws_access_key_id=unused, aws_secret_access_key=unused)
    for service in services:
        session.client(service)  # type: ignore[call-overload]


@cache
def _environment_session() -> boto3.session.Session:
    return new_session()


@cache
def _environment_client(service: str, region: str | None) -> BaseClient:
    with _session_lock:
        return _track(_new_client(_environment_session(), service, region_name=region))


# The services mailstep calls, each typed by its boto3-stubs package (dev extra); a service
# without one (iam, sts) stays untyped, as boto3-stubs itself leaves it.
@overload  # a stack's outputs (ops.targets)
def client(service: Literal["cloudformation"], region: str | None = None) -> CloudFormationClient: ...
@overload  # reputation metrics and alarms (ops.reputation, ops.doctor)
def client(service: Literal["cloudwatch"], region: str | None = None) -> CloudWatchClient: ...
@overload  # both tables (shared.store.dynamo and the adapters)
def client(service: Literal["dynamodb"], region: str | None = None) -> DynamoDBClient: ...
@overload  # functions' environments and event source mappings (ops.doctor)
def client(service: Literal["lambda"], region: str | None = None) -> LambdaClient: ...
@overload  # received replies' MIME (shared.engagement.replies)
def client(service: Literal["s3"], region: str | None = None) -> S3Client: ...
@overload  # the API key, unsubscribe and webhook signing keys
def client(service: Literal["secretsmanager"], region: str | None = None) -> SecretsManagerClient: ...
@overload  # sending, the quota, the guardrail's pause
def client(service: Literal["sesv2"], region: str | None = None) -> SESV2Client: ...
@overload  # the SES event and inbound topics (local runtime)
def client(service: Literal["sns"], region: str | None = None) -> SNSClient: ...
@overload  # the send, broadcast and webhook queues
def client(service: Literal["sqs"], region: str | None = None) -> SQSClient: ...
@overload  # sequence executions, the broadcast schedule
def client(service: Literal["stepfunctions"], region: str | None = None) -> SFNClient: ...
@overload  # any other service (iam, sts): untyped
def client(service: str, region: str | None = None) -> Any: ...
def client(service: str, region: str | None = None) -> BaseClient:
    """The process-wide client of ``service``, configured by the environment (the Lambdas)."""
    return _environment_client(service, region)


@dataclass(frozen=True)
class AwsConfig:
    """Where clients connect: ``None`` leaves a field to boto3's usual lookup."""

    region: str | None = None
    endpoint_url: str | None = None  # the local runtime's embedded endpoint, or None for AWS
    access_key_id: str | None = None
    secret_access_key: str | None = None

    @classmethod
    def emulated(cls, endpoint_url: str, region: str, key: str = "mailstep-local") -> AwsConfig:
        """An emulated endpoint (the local runtime): fixed credentials, no profile or token."""
        return cls(region=region, endpoint_url=endpoint_url, access_key_id=key, secret_access_key=key)


class ClientFactory:
    """Clients for one :class:`AwsConfig`, created lazily and cached per service (thread-safe).

    ``ClientFactory(AwsConfig.emulated(endpoint, region)).client("dynamodb")``; the adapters
    in ``shared`` take such a client as their ``client=`` parameter.
    """

    def __init__(self, config: AwsConfig | None = None) -> None:
        self.config = config  # None: the environment's clients, those of client()
        self._clients: dict[str, BaseClient] = {}
        self._lock = threading.Lock()
        self._session: boto3.session.Session | None = None

    def __repr__(self) -> str:
        return f"ClientFactory({self.config!r})"

    @property
    def region(self) -> str | None:
        return (self.config and self.config.region) or self.session.region_name

    @property
    def session(self) -> boto3.session.Session:
        with self._lock:
            if self._session is None:
                self._session = self._new_session()
            return self._session

    def _new_session(self) -> boto3.session.Session:
        config = self.config or AwsConfig()
        if config.access_key_id is None:
            return new_session(region_name=config.region)
        # Explicit keys: a profile or session token of the environment must not apply.
        return new_session(
            isolated=True,
            aws_access_key_id=config.access_key_id,
            aws_secret_access_key=config.secret_access_key,
            aws_session_token=None,
            region_name=config.region,
        )

    def client(self, service: str) -> Any:
        # Untyped on purpose (unlike client()): typed per service, it puts 8 type errors into
        # cli/ (pyproject.toml, [tool.mypy]).
        if self.config is None:
            return client(service)
        with self._lock:
            found = self._clients.get(service)
        if found is not None:
            return found
        created = _new_client(self.session, service, endpoint_url=self.config.endpoint_url)
        with self._lock:
            if service in self._clients:
                return self._clients[service]
            self._clients[service] = _track(created)
            return created


def register_hook(event_name: str, handler: Hook) -> None:
    """Attach ``handler`` to ``event_name`` (botocore event, e.g. ``after-call``) on every client."""
    with _lock:
        _hooks.append((event_name, handler))
        for existing in _created:
            existing.meta.events.register(event_name, handler)


def unregister_hook(event_name: str, handler: Hook) -> None:
    with _lock:
        if (event_name, handler) in _hooks:
            _hooks.remove((event_name, handler))
        for existing in _created:
            existing.meta.events.unregister(event_name, handler)


def reset_clients() -> None:
    """Forget the cached environment-configured clients (tests call this after changing endpoints)."""
    with _lock:
        _created.clear()
    _environment_client.cache_clear()
    _environment_session.cache_clear()
