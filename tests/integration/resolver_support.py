"""Test support for the broadcast resolver: its Lambda handler configured as deployed (smaller
pages), a driver that plays the control queue's event source, and injected failures."""

from __future__ import annotations

import dataclasses
import importlib
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError

from local_aws.apigw import LambdaContext
from local_aws.provision import LocalResources
from shared.broadcasts.audience import AudienceResolver
from shared.broadcasts.model import DONE, parse_batch
from shared.core.specs import BROADCAST_CONTROL_QUEUE, ENV
from tests.integration.broadcast_support import Env
from tests.integration.conftest import sqs_record


def resolver_handler(
    env: Env,
    resources: LocalResources,
    monkeypatch: pytest.MonkeyPatch,
    *,
    page_size: int,
    segments: int = 4,
    ahead_s: int | None = None,
) -> Any:
    """The resolver Lambda's handler module, configured from the environment as deployed
    (``ahead_s``: BROADCAST_RESOLVER_AHEAD_S, else the setting's default), with pages of
    ``page_size`` recipients and ``segments`` Scan segments."""
    for name, value in resources.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(ENV["broadcast_queue_url"], env.queues.batch_url)
    monkeypatch.setenv(ENV["broadcast_control_queue_url"], env.queues.control_url)
    if ahead_s is not None:
        monkeypatch.setenv(ENV["broadcast_resolver_ahead_s"], str(ahead_s))
    module = importlib.reload(importlib.import_module("functions.broadcast_resolver.handler"))
    small = AudienceResolver(env.table, page_size=page_size, segments=segments)
    monkeypatch.setattr(module, "context", dataclasses.replace(module.context, resolver=small))
    return module


def invoke(module: Any, body: str) -> dict[str, Any]:
    """One invocation of the resolver with one control queue record (raises
    BatchProcessingError when the record failed: SQS would deliver it again)."""
    event = {"Records": [sqs_record(body, BROADCAST_CONTROL_QUEUE.local_name)]}
    return dict(module.handler(event, LambdaContext("broadcast-resolver", timeout_s=120)))


def deliver(env: Env, module: Any, times: int = 1) -> int:
    """Play the control queue's event source: each resolve message to the handler ``times``
    times (a redelivery after it succeeded), again while its invocation fails. Returns the
    invocations made."""
    steps = 0
    while messages := env.receive(env.queues.control_url, 1):
        for message in messages:
            for _ in range(times):
                while True:
                    steps += 1
                    try:  # every record of the batch failed: the invocation fails, SQS redelivers
                        invoke(module, message["Body"])
                    except BatchProcessingError:
                        continue
                    break
            env.delete(env.queues.control_url, message)
    return steps


def batch_emails(env: Env) -> tuple[list[dict[str, Any]], list[str]]:
    messages = env.batches()
    return messages, [e for m in messages for e in parse_batch(m["Body"]).emails]


def fail_once(operation: str, call: int) -> Callable[..., None]:
    """A botocore hook failing the ``call``-th request of ``operation`` (a crash mid-step)."""
    count = [0]

    def hook(**_: Any) -> None:
        count[0] += 1
        if count[0] == call:
            raise ConnectionError(f"injected: {operation} #{call} lost")

    return hook


def assert_each_reader_once(env: Env, broadcast_id: str, want: set[str]) -> None:
    """The audience counted once, batches only repeated whole (same name, same readers), and
    after the workers took every batch, duplicates included, one mail per reader."""
    record = env.service.get(broadcast_id)
    assert record.resolved and record.audience_size == len(want)
    messages, emails = batch_emails(env)
    assert set(emails) == want
    named: dict[tuple[int, int], tuple[str, ...]] = {}
    for message in messages:
        batch = parse_batch(message["Body"])
        assert named.setdefault((batch.page, batch.index), batch.emails) == batch.emails
    assert sum(len(b) for b in named.values()) == len(want)
    env.work(messages)
    assert Counter(env.ses.recipients()) == Counter(dict.fromkeys(want, 1))
    done = env.service.get(broadcast_id)
    assert (done.status, done.sent, done.processed) == (DONE, len(want), len(want))
