"""The one cached factory for boto3 clients.

Clients are created lazily (so moto, started after import, still intercepts them) and
honour ``AWS_ENDPOINT_URL`` (the local runtime points it at the embedded moto server).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import boto3
from botocore.config import Config

_CONFIG = Config(retries={"mode": "standard", "max_attempts": 5}, connect_timeout=5, read_timeout=30)


@lru_cache(maxsize=None)
def client(service: str, region: str | None = None) -> Any:
    return boto3.session.Session().client(service, region_name=region, config=_CONFIG)


def reset_clients() -> None:
    """Forget cached clients (tests and the local runtime call this after changing endpoints)."""
    client.cache_clear()
