"""Secrets come from Secrets Manager through Powertools Parameters (cached in memory)."""

from __future__ import annotations

from functools import lru_cache

from aws_lambda_powertools.utilities.parameters import SecretsProvider

from shared.core.aws import client as aws_client

CACHE_SECONDS = 300


@lru_cache(maxsize=1)
def _provider() -> SecretsProvider:
    return SecretsProvider(boto3_client=aws_client("secretsmanager"))


def get_secret(secret_id: str, *, force_fetch: bool = False) -> str:
    value = _provider().get(secret_id, max_age=CACHE_SECONDS, force_fetch=force_fetch)
    if isinstance(value, bytes):
        value = value.decode()
    return str(value)


def reset_cache() -> None:
    _provider.cache_clear()
