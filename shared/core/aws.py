"""The one cached factory for boto3 clients.

Clients are created lazily (so moto, started after import, still intercepts them) and
honour ``AWS_ENDPOINT_URL`` (the local runtime points it at the embedded moto server).

``register_hook`` attaches a botocore event handler (e.g. ``after-call``) to every client
this factory has created or will create; the bench uses it to count requests.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import cache
from typing import Any

import boto3
from botocore.config import Config

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
_created: list[Any] = []
_lock = threading.Lock()


@cache
def client(service: str, region: str | None = None) -> Any:
    created = boto3.session.Session().client(service, region_name=region, config=_CONFIG)
    with _lock:
        for event_name, handler in _hooks:
            created.meta.events.register(event_name, handler)
        _created.append(created)
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
    """Forget cached clients (tests and the local runtime call this after changing endpoints)."""
    with _lock:
        _created.clear()
    client.cache_clear()
