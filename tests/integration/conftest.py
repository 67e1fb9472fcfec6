from __future__ import annotations

import contextlib
import importlib
import io
import uuid
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID
from moto.dynamodb.models import DynamoDBBackend
from moto.ses.models import ses_backends

from local_aws import hooks
from local_aws.provision import LocalResources, provision
from local_aws.ses import LocalSes
from shared.core.aws import client, register_hook, reset_clients, unregister_hook
from shared.core.secrets import reset_cache
from shared.core.specs import STATS_FOLD_FUNCTION, TABLES
from shared.sending.pipeline import MailIdentity, SendContext
from shared.sending.sender import SesSender
from shared.store.send_log import SendLog
from shared.store.stream_counts import StreamCountFold, StreamFoldResult
from shared.store.subscribers import SubscriberStore
from tests.integration.broadcast_support import Env, broadcast_env
from tests.integration.webhook_support import Streams

API_KEY = "test-api-key-0123456789"
# What ``send_ctx`` signs unsubscribe (and confirmation) tokens with, and the mail it sends.
SECRET = "integration-unsubscribe-secret-0123456789"
IDENTITY = MailIdentity(
    from_="Acme <hello@acme.test>",
    reply_to="help@acme.test",
    postal_address="Acme Inc, 1 Main St, Springfield",
    public_base_url="https://api.acme.test",
)


@pytest.fixture(scope="session")
def aws() -> Iterator[None]:
    # DynamoDB's writes as the local runtime emulates them (local_aws.hooks): transactions
    # (moto's own deep-copies every table a transaction names, a cost that grows with each item
    # stored), and single-item writes atomic across threads (moto checks and writes in steps);
    # and its reads at the cost of what they reach (hooks.faster_dynamodb_reads).
    with mock_aws(), pytest.MonkeyPatch.context() as patch:
        for owner, name, patched in hooks.dynamodb_read_patches():
            patch.setattr(owner, name, patched)
        patch.setattr(DynamoDBBackend, "transact_write_items", hooks.transact_write_items)
        for name in hooks.ITEM_WRITES:
            patch.setattr(DynamoDBBackend, name, hooks.one_at_a_time(getattr(DynamoDBBackend, name)))
        reset_clients()
        reset_cache()
        yield
    reset_clients()


@pytest.fixture
def resources(aws: None) -> Iterator[LocalResources]:
    res = provision(api_key=API_KEY)
    yield res
    ddb = client("dynamodb")
    for spec in TABLES:
        ddb.delete_table(TableName=spec.local_name)
    sm = client("secretsmanager")
    for name in res.secrets.values():
        sm.delete_secret(SecretId=name, ForceDeleteWithoutRecovery=True)
    reset_cache()


@pytest.fixture
def store(resources: LocalResources) -> SubscriberStore:
    return SubscriberStore(resources.tables["table_name"], resources.tables["events_table_name"])


@pytest.fixture
def outbox(aws: None) -> Iterator[list[Any]]:
    """The messages moto's SES sent during the test (acme.test is a verified identity)."""
    with contextlib.suppress(ClientError):
        client("sesv2").create_email_identity(EmailIdentity="acme.test")
    sent = ses_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].sent_messages
    sent.clear()
    yield sent
    sent.clear()


@pytest.fixture
def send_ctx(store: SubscriberStore, resources: LocalResources, outbox: list[Any]) -> SendContext:
    """The send pipeline's context on moto: the real SES adapter (its mail lands in ``outbox``),
    ``IDENTITY``, tokens signed with ``SECRET``, send records kept 30 days."""
    return SendContext(
        store=store,
        log=SendLog(resources.tables["table_name"]),
        ses=SesSender("mailstep"),
        identity=IDENTITY,
        token_secret=lambda: SECRET,
        data_ttl_days=30,
    )


@pytest.fixture
def env(resources: LocalResources) -> Iterator[Env]:
    """The broadcast queues, tables and service (broadcast_support.broadcast_env)."""
    with broadcast_env(resources) as built:
        yield built


def handler_module(function: str, env: Mapping[str, str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """``functions/<function>/handler.py`` imported afresh with ``env`` set, as Lambda starts it."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return importlib.reload(importlib.import_module(f"functions.{function}.handler"))


@pytest.fixture
def sender(resources: LocalResources, monkeypatch: pytest.MonkeyPatch, outbox: Any) -> Any:
    """The sender Lambda's handler module, from acme.test; its mail lands in ``outbox``."""
    env = {
        **resources.env(),
        "DEFAULT_FROM": "Acme <hello@acme.test>",
        "PUBLIC_BASE_URL": "https://api.acme.test",
    }
    return handler_module("sender", env, monkeypatch)


@pytest.fixture
def dynamodb_requests() -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """(operation, params) of every DynamoDB request made during the test."""
    seen: list[tuple[str, dict[str, Any]]] = []

    def hook(model: Any, params: dict[str, Any], **_: Any) -> None:
        seen.append((model.name, params))

    register_hook("before-parameter-build.dynamodb", hook)
    yield seen
    unregister_hook("before-parameter-build.dynamodb", hook)


@contextlib.contextmanager
def operations() -> Iterator[list[str]]:
    """The names of the AWS operations made inside (every client of ``shared.core.aws``)."""
    calls: list[str] = []

    def hook(model: Any, **_: Any) -> None:
        calls.append(model.name)

    register_hook("after-call", hook)
    try:
        yield calls
    finally:
        unregister_hook("after-call", hook)


def sqs_record(body: str, queue: str) -> dict[str, Any]:
    """One record of an SQS event as Lambda hands it to a mapped function of ``queue``."""
    return {
        "messageId": str(uuid.uuid4()),
        "receiptHandle": "rh",
        "body": body,
        "attributes": {"ApproximateReceiveCount": "1"},
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": f"arn:aws:sqs:us-east-1:123456789012:{queue}",
        "awsRegion": "us-east-1",
    }


def scan_all(table: str) -> list[dict[str, Any]]:
    from shared.store.dynamo import deserialize

    ddb = client("dynamodb")
    items: list[dict[str, Any]] = []
    start = None
    while True:
        page = ddb.scan(TableName=table, **({"ExclusiveStartKey": start} if start else {}))
        items += [deserialize(i) for i in page["Items"]]
        start = page.get("LastEvaluatedKey")
        if not start:
            return items


class ApiClient:
    """Calls the real API handler with API Gateway v2 events."""

    def __init__(self, handler_module: Any) -> None:
        self.module = handler_module

    def post(
        self,
        path: str,
        body: Any,
        key: str | None = API_KEY,
        raw: bool = False,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        import json

        from local_aws.apigw import LambdaContext, http_api_event

        hdrs = {"content-type": "application/json", **(headers or {})}
        if key is not None:
            hdrs["authorization"] = f"Bearer {key}"
        payload = body if raw else json.dumps(body)
        event = http_api_event("POST", path, body=payload, headers=hdrs)
        response = self.module.handler(event, LambdaContext("api"))
        text = response.get("body") or ""
        try:
            return response["statusCode"], json.loads(text)
        except ValueError:
            return response["statusCode"], text


@pytest.fixture
def api(resources: LocalResources, monkeypatch: pytest.MonkeyPatch) -> ApiClient:
    for name, value in resources.env().items():
        monkeypatch.setenv(name, value)
    module = importlib.import_module("functions.api.handler")
    return ApiClient(module)


@pytest.fixture
def ses(aws: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LocalSes:
    """The local runtime's SES behind moto's SES v2 API, for this test (reputation_support)."""
    from tests.integration.reputation_support import install_local_ses

    return install_local_ses(tmp_path / "outbox", monkeypatch)


@pytest.fixture
def world(ses: LocalSes) -> Iterator[LocalResources]:
    """Tables, queues, topics and both configuration sets on moto, with the local SES."""
    from tests.integration.reputation_support import messaging_world

    with messaging_world() as res:
        yield res


def fold_stream(resources: LocalResources) -> StreamFoldResult:
    """What the stats fold adds from the tables' streams (``shared.store.stream_counts``): the
    single sends' ``send`` counts, the executions counts, the Deliveries' ``delivery`` counts. It
    folds every record since the tables were created, a batch per table that starts where
    Lambda's first one would: a record folded by an earlier call is skipped by its run's mark,
    as Lambda's retried batch is."""
    return fold_batches(StreamCountFold(resources.tables["table_name"]), Streams(STATS_FOLD_FUNCTION))


def fold_batches(fold: StreamCountFold, streams: Streams) -> StreamFoldResult:
    """``fold`` of ``streams``' new records, one batch per table's stream, as Lambda hands them:
    the counts of what it counted, summed."""
    done = [fold.fold(batch) for batch in streams.batches()]
    return StreamFoldResult(
        sends=sum(d.sends for d in done),
        executions=sum(d.executions for d in done),
        events=sum(d.events for d in done),
        skipped=sum(d.skipped for d in done),
    )


def in_process_function(name: str, role: str) -> tuple[str, str]:
    """(function ARN, role ARN) of a Lambda function named ``name`` whose invocations a test
    answers in-process (it patches ``LambdaFunction._invoke_lambda``), and of its role; both
    created when missing."""
    iam = client("iam")
    try:
        role_arn = iam.get_role(RoleName=role)["Role"]["Arn"]
    except ClientError:
        role_arn = iam.create_role(RoleName=role, AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    lam = client("lambda")
    try:
        return lam.get_function(FunctionName=name)["Configuration"]["FunctionArn"], role_arn
    except ClientError:
        code = io.BytesIO()
        zipfile.ZipFile(code, "w").writestr("handler.py", "# answered in-process by the test\n")
        created = lam.create_function(
            FunctionName=name,
            Runtime="python3.12",
            Role=role_arn,
            Handler="handler.handler",
            Code={"ZipFile": code.getvalue()},
        )
        return created["FunctionArn"], role_arn
