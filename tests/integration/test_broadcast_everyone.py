"""An "everyone" broadcast on moto through the real resolver handler: the parallel Scan
(several segments, pages that stop inside a segment) resolves exactly the audience, a
redelivered or crashed page adds no duplicate, and ``broadcast send --yes`` leaves the
audience's one read to the resolver."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.stub import Stubber
from typer.testing import CliRunner

from local_aws.provision import LocalResources
from ops.targets import LOCAL, Target
from shared.broadcasts.audience import AudienceResolver
from shared.broadcasts.model import Audience, parse_request
from shared.core.aws import client, register_hook, unregister_hook
from shared.core.settings import Settings
from shared.store.subscribers import SubscriberStore
from tests.integration.broadcast_support import Env, eligible, seeded
from tests.integration.resolver_support import (
    assert_each_reader_once,
    batch_emails,
    deliver,
    fail_once,
    resolver_handler,
)

TEMPLATE = "newsletter/monthly"
SEGMENTS = 4
PAGE = 13  # recipients per page: ~135 recipients in 4 segments take ~12 pages, most ending inside a segment


@pytest.fixture
def people(store: SubscriberStore) -> list[dict[str, Any]]:
    return seeded(store, 150)  # profiles with their TAG# partners: the Scan reads both


@pytest.fixture
def resolver(env: Env, resources: LocalResources, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The resolver Lambda's handler module, configured from the environment as deployed,
    with smaller pages and segments so that 150 subscribers take several of each."""
    return resolver_handler(env, resources, monkeypatch, page_size=PAGE, segments=SEGMENTS)


@pytest.fixture
def requests() -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """(operation, parameters) of every DynamoDB Scan and Query made meanwhile."""
    seen: list[tuple[str, dict[str, Any]]] = []

    def hook(params: dict[str, Any], model: Any, **_: Any) -> None:
        seen.append((model.name, dict(params)))

    for operation in ("Scan", "Query"):
        register_hook(f"provide-client-params.dynamodb.{operation}", hook)
    yield seen
    for operation in ("Scan", "Query"):
        unregister_hook(f"provide-client-params.dynamodb.{operation}", hook)


@pytest.mark.parametrize(
    ("page_size", "segments", "max_evaluated"), [(13, 4, 40), (7, 16, 5000), (40, 6, 5000), (50, 1, 5000)]
)
def test_segmented_pages_give_each_reader_once(env, people, page_size, segments, max_evaluated) -> None:
    # Given pages that stop inside a segment's answer (full), or after max_evaluated candidates
    resolver = AudienceResolver(
        env.table, page_size=page_size, segments=segments, max_evaluated=max_evaluated
    )

    # When "everyone" is resolved page by page, each page from the cursor the last one left
    found = list(resolver.iterate(Audience()))

    # Then it is exactly the eligible subscribers, each once, and no page is over its size
    assert Counter(found) == Counter(dict.fromkeys((p["email"] for p in eligible(people)), 1))
    cursor, sizes = None, []
    while True:
        page = resolver.page(Audience(), cursor)
        sizes.append(len(page.emails))
        if page.exhausted:
            break
        cursor = page.cursor
    assert max(sizes) <= page_size and sum(sizes) == len(found)


def test_everyone_is_read_in_parallel_segments_and_is_exactly_the_audience(env, people, resolver, requests):
    # Given 150 subscribers (some unsubscribed or suppressed) and a broadcast to everyone
    env.service.send(parse_request(id="all", template=TEMPLATE))

    # When the resolver handler takes the control queue's messages until it is empty
    steps = deliver(env, resolver)

    # Then the batches hold every eligible subscriber exactly once, and nobody else
    _, emails = batch_emails(env)
    want = {p["email"] for p in eligible(people)}  # the audience as a plain predicate
    assert Counter(emails) == Counter(dict.fromkeys(want, 1))
    record = env.service.get("all")
    assert record.resolved and record.audience_size == len(want)
    assert record.skipped == {
        "suppressed": sum(1 for p in people if p["suppressed"]),
        "unsubscribed": sum(1 for p in people if p["status"] != "subscribed" and not p["suppressed"]),
    }
    # ... read as a parallel Scan of every segment, in several pages, several per invocation
    scans = [params for operation, params in requests if operation == "Scan"]
    assert {(p["Segment"], p["TotalSegments"]) for p in scans} == {(s, SEGMENTS) for s in range(SEGMENTS)}
    assert record.page >= len(want) // PAGE > steps
    assert not [operation for operation, _ in requests if operation == "Query"]


def test_a_redelivered_or_crashed_page_adds_no_duplicate_and_each_reader_gets_one_mail(env, people, resolver):
    # Given a broadcast to everyone, and a resolver whose second page checkpoint and third
    # batch hand-off are lost once (a crash or timeout mid-step: SQS redelivers the message)
    env.service.send(parse_request(id="again", template=TEMPLATE))
    hooks = [
        ("before-call.dynamodb.TransactWriteItems", fail_once("TransactWriteItems", 2)),
        ("before-call.sqs.SendMessageBatch", fail_once("SendMessageBatch", 3)),
    ]
    for event, hook in hooks:
        register_hook(event, hook)
    try:
        # When every resolve message is delivered twice, and again after each failure
        deliver(env, resolver, times=2)
    finally:
        for event, hook in hooks:
            unregister_hook(event, hook)

    # Then the audience is counted once, its batches only repeat (same names, same readers), and
    # after the workers took every batch, duplicates included, each reader got one mail
    assert_each_reader_once(env, "again", {p["email"] for p in eligible(people)})


def _target(env: Env, resources: LocalResources) -> Target:
    settings = Settings(
        table_name=env.table,
        events_table_name=resources.tables["events_table_name"],
        broadcast_queue_url=env.queues.batch_url,
        broadcast_control_queue_url=env.queues.control_url,
    )
    return Target(kind=LOCAL, name="everyone", region="us-east-1", settings=settings)


def _cli_send(env: Env, resources: LocalResources, monkeypatch, *args: str, answer: str = "") -> Any:
    from cli import target as targets
    from cli.broadcast_cmd import app

    monkeypatch.setattr(targets, "select", lambda *_, **__: _target(env, resources))
    with Stubber(client("sesv2")) as ses:  # moto has no SES GetAccount (the rate stored on the record)
        ses.add_response("get_account", {"SendQuota": {"MaxSendRate": 14.0}})
        return CliRunner().invoke(app, ["send", "--template", TEMPLATE, *args], input=answer)


def test_send_yes_leaves_the_one_read_of_the_audience_to_the_resolver(
    env, people, resolver, requests, resources, monkeypatch
):
    # When `broadcast send --yes` starts a broadcast to everyone
    result = _cli_send(env, resources, monkeypatch, "--id", "cli-yes", "--yes", "--no-wait")

    # Then the CLI read nothing of the audience
    assert result.exit_code == 0, result.output
    assert "audience: everyone on local runtime (everyone)" in result.output
    assert requests == []

    # When the resolver handler resolves it
    deliver(env, resolver)

    # Then the audience was read once: each Scan segment started once, from its beginning
    starts = Counter(p["Segment"] for op, p in requests if op == "Scan" and "ExclusiveStartKey" not in p)
    assert starts == Counter(range(SEGMENTS))
    assert env.service.get("cli-yes").audience_size == len(eligible(people))


def test_send_without_yes_confirms_on_the_first_page_and_dry_run_counts_all(
    env, people, resources, monkeypatch, requests
):
    want = len(eligible(people))

    # When the dry run counts the audience, it reads all of it and sends nothing
    dry = _cli_send(env, resources, monkeypatch, "--id", "cli-dry", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert f"audience: {want} subscriber(s) (everyone) on local runtime" in dry.output
    full = len(requests)
    assert env.service.records.get("cli-dry") is None
    requests.clear()

    # When the confirmation is answered "no", it showed the first page (the whole audience
    # here: 240 readers fit one page of 1,000) and wrote nothing
    no = _cli_send(env, resources, monkeypatch, "--id", "cli-no", answer="n\n")
    assert no.exit_code == 1
    assert f"audience: {want} subscriber(s) (everyone)" in no.output
    assert f"Send {TEMPLATE} to {want} subscriber(s)" in no.output
    assert 0 < len(requests) <= full
    assert env.service.records.get("cli-no") is None
