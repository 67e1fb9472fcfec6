from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from moto import mock_aws

from cli.local.provision import LocalResources, provision
from shared.core.aws import client, reset_clients
from shared.core.secrets import reset_cache
from shared.core.specs import TABLES
from shared.store.subscribers import SubscriberStore

API_KEY = "test-api-key-0123456789"


@pytest.fixture(scope="session")
def aws() -> Iterator[None]:
    with mock_aws():
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

        from cli.local.apigw import LambdaContext, http_api_event

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
    import importlib

    for name, value in resources.env().items():
        monkeypatch.setenv(name, value)
    module = importlib.import_module("functions.api.handler")
    return ApiClient(module)
