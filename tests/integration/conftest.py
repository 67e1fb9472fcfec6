from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from moto import mock_aws

from shared.aws import client, reset_clients
from shared.provision import LocalResources, provision
from shared.secrets import reset_cache
from shared.specs import TABLES
from shared.store import SubscriberStore


@pytest.fixture(scope="session")
def aws() -> Iterator[None]:
    with mock_aws():
        reset_clients()
        reset_cache()
        yield
    reset_clients()


@pytest.fixture
def resources(aws: None) -> Iterator[LocalResources]:
    res = provision(api_key="test-api-key-0123456789")
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
    from shared.dynamo import deserialize

    ddb = client("dynamodb")
    items: list[dict[str, Any]] = []
    start = None
    while True:
        page = ddb.scan(TableName=table, **({"ExclusiveStartKey": start} if start else {}))
        items += [deserialize(i) for i in page["Items"]]
        start = page.get("LastEvaluatedKey")
        if not start:
            return items
