"""Shared fixtures: one in-process moto for the session, cleaned between tests."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.webhook_receiver import Receiver

os.environ.setdefault("TZ", "UTC")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "Mailstep")
os.environ.setdefault("POWERTOOLS_DEV", "false")

# The files that take longest (measured with `--durations`), collected first. `make test`
# runs three workers with `--dist loadfile --no-loadscope-reorder`, which hands out files in
# collection order: with the long ones started first, the short ones fill in around them and
# the workers finish close together, instead of one running a long file alone at the end.
LONGEST_FIRST = (
    "tests/e2e/test_webhooks.py",
    "tests/integration/test_broadcasts.py",
    "tests/e2e/test_broadcast_faults.py",
    "tests/e2e/test_broadcasts.py",
    "tests/e2e/test_day_one.py",
    "tests/e2e/test_warmup.py",
    "tests/e2e/test_local_runtime.py",
    "tests/e2e/test_mcp.py",
    "tests/e2e/test_signup.py",
    "tests/e2e/test_sunset.py",
    "tests/e2e/test_console_browser.py",
    "tests/e2e/test_signup_held.py",
    "tests/e2e/test_operations.py",
    "tests/e2e/test_engagement.py",
    "tests/e2e/test_iam_enforced.py",
    "tests/e2e/test_stack_target.py",
    "tests/e2e/test_artifact.py",
    "tests/integration/test_broadcast_everyone.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: index for index, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A local HTTP receiver of webhook deliveries (tests/webhook_receiver.py), stopped after the test."""
    server = Receiver().start()
    yield server
    server.stop()
