"""Create mailstep's resources from ``shared.specs`` on an emulated AWS endpoint.

Used by the local runtime and the tests. Production resources are created by the CDK
stack from the same specs.
"""

from __future__ import annotations

import secrets as _secrets
from dataclasses import dataclass
from typing import Any

from shared.aws import client as aws_client
from shared.specs import SECRETS, TABLES, TableSpec


@dataclass(frozen=True)
class LocalResources:
    tables: dict[str, str]  # settings field -> table name
    secrets: dict[str, str]  # settings field -> secret name
    api_key: str

    def env(self) -> dict[str, str]:
        from shared.specs import ENV

        values = {**self.tables, **self.secrets}
        return {ENV[field]: value for field, value in values.items()}


def create_table(spec: TableSpec, name: str | None = None, ddb: Any = None) -> str:
    ddb = ddb or aws_client("dynamodb")
    name = name or spec.local_name
    attributes = {spec.partition_key, spec.sort_key} | {a for g in spec.gsis for a in (g.partition_key, g.sort_key)}
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


def provision(api_key: str | None = None) -> LocalResources:
    """Create every table and secret named in the specs; returns names and the API key."""
    tables = {spec.setting: create_table(spec) for spec in TABLES}
    sm = aws_client("secretsmanager")
    key = api_key or _secrets.token_urlsafe(32)
    names = {}
    for spec in SECRETS:
        sm.create_secret(Name=spec.local_name, SecretString=key, Description=spec.description)
        names[spec.setting] = spec.local_name
    return LocalResources(tables=tables, secrets=names, api_key=key)
