"""The engagement consumer writes one transaction per SQS batch (moto): counters folded per
counters item, duplicates dropped and the rest retried, failures kept per record."""

from __future__ import annotations

import importlib
import json
import random
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from local_aws.apigw import LambdaContext
from local_aws.provision import LocalResources
from shared.core.aws import client, register_hook, unregister_hook
from shared.core.specs import STATS_FOLD_FUNCTION
from shared.engagement import consumer as engagement
from shared.engagement.consumer import EngagementBatch, EngagementContext, WriteConflict, process_body
from shared.engagement.suppression import Suppressions
from shared.sending.sender import decode_tag_value
from shared.sequences.engine import SequenceEngine
from shared.sequences.validate import Catalog
from shared.store.stats import StatsStore
from shared.store.stream_counts import StreamCountFold
from shared.store.subscribers import SubscriberStore
from tests.integration.conftest import fold_batches
from tests.integration.test_engagement import EMAIL, _sqs, event, event_counts, random_event, snapshot, sns
from tests.integration.webhook_support import Streams

TEMPLATE, SOURCE = "onboarding/welcome", "onboarding"


class Calls:
    """TransactWriteItems requests as botocore sends them (every attempt, cancelled or not)."""

    def __init__(self) -> None:
        self.actions: list[int] = []

    def __call__(self, params: dict[str, Any], **_: Any) -> None:
        self.actions.append(len(params["TransactItems"]))

    def __len__(self) -> int:
        return len(self.actions)


@pytest.fixture
def transactions(aws: None) -> Iterator[Calls]:
    calls = Calls()
    register_hook("provide-client-params.dynamodb.TransactWriteItems", calls)
    yield calls
    unregister_hook("provide-client-params.dynamodb.TransactWriteItems", calls)


def context(store: SubscriberStore) -> EngagementContext:
    stopper = SequenceEngine(catalog=Catalog(), arn_prefix="", store=store)
    return EngagementContext(
        store=store, suppressions=Suppressions(store, stopper), data_ttl_days=30, stopper=stopper
    )


@pytest.fixture
def ctx(store: SubscriberStore) -> EngagementContext:
    return context(store)


@pytest.fixture
def handler(resources: LocalResources, monkeypatch: pytest.MonkeyPatch) -> Any:
    for name, value in resources.env().items():
        monkeypatch.setenv(name, value)
    return importlib.reload(importlib.import_module("functions.engagement.handler"))


@pytest.fixture
def stats(store: SubscriberStore) -> StatsStore:
    return StatsStore(store.table, store.events_table)


def write_batch(ctx: EngagementContext, bodies: list[str]) -> list[engagement.BatchRecord]:
    batch = EngagementBatch(ctx)
    for n, body in enumerate(bodies):
        batch.add(f"r{n}", body)
    return batch.flush()


def fold(store: SubscriberStore) -> int:
    """The stats fold of the tables' streams (Lambda's batches): the Deliveries it counted."""
    return fold_batches(StreamCountFold(store.table), Streams(STATS_FOLD_FUNCTION)).events


def assert_counters_match_the_events(
    stats: StatsStore, source: str = SOURCE, template: str = TEMPLATE
) -> None:
    assert event_counts(stats.source(source)) == event_counts(stats.recompute(source=source))
    assert event_counts(stats.template(template)) == event_counts(stats.recompute(template=template))


def delays(n: int, *, start: int = 0) -> list[str]:
    """SES DeliveryDelay events of ``n`` subscribers: events the consumer writes in its
    transaction (a Delivery is written alone: test_deliveries_are_written_alone_...)."""
    return [
        sns(event("delivery-delay", email=f"s{i}@example.com", message_id=f"m-{i}"))
        for i in range(start, start + n)
    ]


def test_a_batch_of_distinct_events_is_written_in_one_transaction(
    ctx: EngagementContext, store: SubscriberStore, stats: StatsStore, transactions: Calls
) -> None:
    # Given ten delivery delays and two opens of different subscribers, one source and template
    bodies = delays(10) + [
        sns(event("open", email=f"s{i}@example.com", message_id=f"m-{i}")) for i in range(2)
    ]
    # When the batch is written
    records = write_batch(ctx, bodies)
    # Then: one transaction (12 event items, 4 markers, 3 folded counters updates: the source's,
    # the template's and the day's)
    assert [r.error for r in records] == [None] * 12
    assert [r.outcome.status for r in records] == ["recorded"] * 12
    assert transactions.actions == [12 + 4 + 3]
    assert sum(len(store.list_events(f"s{i}@example.com")) for i in range(10)) == 12
    counters = stats.source(SOURCE)
    assert (counters.total("delivery_delay"), counters.total("open"), counters.unique("open")) == (10, 2, 2)
    assert stats.template(TEMPLATE).total("delivery_delay") == 10
    assert_counters_match_the_events(stats)


def test_the_same_batch_delivered_twice_changes_nothing_the_second_time(
    ctx: EngagementContext, store: SubscriberStore, stats: StatsStore, transactions: Calls
) -> None:
    bodies = delays(5) + [sns(event("click", email="s1@example.com", message_id="m-1"))]
    write_batch(ctx, bodies)
    before = snapshot(store)
    # SQS delivers the whole batch again; SNS-level redelivery gives new envelopes too
    republished = [sns(json.loads(json.loads(b)["Message"])) for b in bodies]
    again = write_batch(ctx, bodies) + write_batch(ctx, republished)
    assert [r.outcome.status for r in again] == ["duplicate"] * 12
    assert all(r.error is None for r in again)
    assert snapshot(store) == before
    assert stats.source(SOURCE).total("delivery_delay") == 5
    assert_counters_match_the_events(stats)


def test_one_batch_with_the_same_event_twice_and_two_opens_of_one_subscriber(
    ctx: EngagementContext, store: SubscriberStore, stats: StatsStore, transactions: Calls
) -> None:
    first_open = event("open", at="2026-01-01T10:00:00.000Z")
    bodies = [
        sns(first_open),
        sns(first_open),  # the same SES event, published again by SNS under a new MessageId
        sns(event("open", at="2026-01-01T11:00:00.000Z")),  # a second open of the same mail
        json.dumps(first_open),  # and once more, raw
    ]
    records = write_batch(ctx, bodies)
    assert [r.outcome.status for r in records] == ["recorded", "duplicate", "recorded", "duplicate"]
    assert len(transactions) == 1  # no action twice on one item: DynamoDB would refuse it
    assert [e["type"] for e in store.list_events(EMAIL)] == ["open", "open"]
    counters = stats.source(SOURCE)
    assert (counters.total("open"), counters.unique("open")) == (2, 1)
    assert (stats.template(TEMPLATE).total("open"), stats.template(TEMPLATE).unique("open")) == (2, 1)
    assert_counters_match_the_events(stats)


def test_a_batch_with_an_already_recorded_event_records_only_the_new_ones(
    ctx: EngagementContext, store: SubscriberStore, stats: StatsStore, transactions: Calls
) -> None:
    # Given an open and a delivery delay recorded before
    old_open, old_delivery = event("open"), event("delivery-delay")
    process_body(sns(old_open), ctx)
    process_body(sns(old_delivery), ctx)
    assert len(transactions) == 2
    # When a batch repeats the delay, next to a new open of the same subscriber and new delays
    bodies = [sns(old_delivery), sns(event("open", at="2026-01-01T12:00:00.000Z")), *delays(3, start=1)]
    records = write_batch(ctx, bodies)
    # Then the transaction is cancelled once by the old delay, which is dropped, and retried
    assert [r.outcome.status for r in records] == [
        "duplicate",
        "recorded",
        "recorded",
        "recorded",
        "recorded",
    ]
    assert len(transactions) == 2 + 2 and transactions.actions[2] - transactions.actions[3] == 1
    counters = stats.source(SOURCE)
    assert (counters.total("delivery_delay"), counters.total("open"), counters.unique("open")) == (4, 2, 1)
    assert len(store.list_events(EMAIL)) == 3
    assert_counters_match_the_events(stats)


def test_a_marker_that_appears_meanwhile_is_not_counted_twice(
    ctx: EngagementContext, store: SubscriberStore, stats: StatsStore
) -> None:
    # Given another consumer puts this subscriber's source marker just before our transaction
    marker = engagement.keys.unique_marker_sk("open", "source", SOURCE)

    raced: list[bool] = []

    def race(params: dict[str, Any], **_: Any) -> None:
        if raced:
            return
        raced.append(True)
        client("dynamodb").put_item(
            TableName=store.table, Item={"PK": {"S": f"SUB#{EMAIL}"}, "SK": {"S": marker}, "at": {"S": "x"}}
        )

    register_hook("provide-client-params.dynamodb.TransactWriteItems", race)
    try:
        records = write_batch(ctx, [sns(event("open")), *delays(2)])
    finally:
        unregister_hook("provide-client-params.dynamodb.TransactWriteItems", race)
    # Then the retry leaves the source's unique alone (the other consumer counted it)
    assert [r.outcome.status for r in records] == ["recorded"] * 3
    assert (stats.source(SOURCE).total("open"), stats.source(SOURCE).unique("open")) == (1, 0)
    assert stats.template(TEMPLATE).unique("open") == 1


def test_random_batches_with_redeliveries_keep_counters_equal_to_the_events(
    ctx: EngagementContext, store: SubscriberStore, stats: StatsStore, transactions: Calls
) -> None:
    rng = random.Random(11)
    kinds = ["delivery", "open", "open", "click", "bounce", "complaint", "delivery-delay", "reject"]
    bodies: list[str] = []
    distinct: Counter[tuple[str, str]] = Counter()  # (source, SES event type), each event once
    for n in range(80):
        record = random_event(rng, kinds, at=f"2026-01-01T10:{n // 60:02d}:{n % 60:02d}.000Z")
        distinct[(decode_tag_value(record["mail"]["tags"]["source"][0]), record["eventType"])] += 1
        bodies += [sns(record)] * rng.choice([1, 1, 2])  # some redelivered, maybe in one batch
    rng.shuffle(bodies)
    batches = [bodies[i : i + 10] for i in range(0, len(bodies), 10)]
    for batch in batches:
        assert all(r.error is None for r in write_batch(ctx, batch))
    assert len(transactions) < len(bodies) / 4
    fold(store)  # the Deliveries' counts
    for source in ("onboarding", "spring-sale"):
        assert event_counts(stats.source(source)) == event_counts(stats.recompute(source=source))
        # and against the events the test sent, each counted once however often it arrived
        counters = stats.source(source)
        for event_type, metric in (("Delivery", "delivery"), ("Open", "open"), ("Click", "click")):
            assert counters.total(metric) == distinct[(source, event_type)], (source, metric)
    for template in ("onboarding/welcome", "onboarding/tips"):
        assert event_counts(stats.template(template)) == event_counts(stats.recompute(template=template))
    assert sum(stats.source(s).total("open") for s in ("onboarding", "spring-sale")) > 0


def test_more_actions_than_a_transaction_holds_are_split_into_self_contained_chunks(
    ctx: EngagementContext, stats: StatsStore, transactions: Calls
) -> None:
    records = write_batch(ctx, delays(120))
    assert all(r.outcome.status == "recorded" for r in records)
    assert transactions.actions == [97 + 3, 23 + 3]  # each chunk ADDs its own events' amounts
    assert stats.source(SOURCE).total("delivery_delay") == 120
    assert_counters_match_the_events(stats)


# ----- failures stay per record ----------------------------------------------------------------
class Flaky:
    """A DynamoDB client that refuses some TransactWriteItems, then behaves."""

    def __init__(self, conflicts: int = 0, reject_pk: str | None = None) -> None:
        self.real, self.conflicts, self.reject_pk = client("dynamodb"), conflicts, reject_pk
        self.calls = 0

    def transact_write_items(self, **params: Any) -> Any:
        self.calls += 1
        items = params["TransactItems"]
        if self.reject_pk and any(
            a.get("Put", {}).get("Item", {}).get("PK") == {"S": self.reject_pk} for a in items
        ):
            raise ClientError(
                {"Error": {"Code": "ValidationException", "Message": "bad"}}, "TransactWriteItems"
            )
        if self.conflicts:
            self.conflicts -= 1
            reasons = [{"Code": "None"}] * (len(items) - 1) + [{"Code": "TransactionConflict"}]
            raise ClientError(
                {
                    "Error": {"Code": "TransactionCanceledException", "Message": "x"},
                    "CancellationReasons": reasons,
                },
                "TransactWriteItems",
            )
        return self.real.transact_write_items(**params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engagement, "BACKOFF_S", 0.0)


def test_a_conflicting_transaction_is_retried(store: SubscriberStore, stats: StatsStore) -> None:
    flaky = Flaky(conflicts=engagement.MAX_ATTEMPTS - 1)
    ctx = context(SubscriberStore(store.table, store.events_table, client=flaky))
    records = write_batch(ctx, delays(3))
    assert [r.outcome.status for r in records] == ["recorded"] * 3 and flaky.calls == engagement.MAX_ATTEMPTS
    assert stats.source(SOURCE).total("delivery_delay") == 3


def test_a_transaction_that_keeps_conflicting_fails_its_records_for_redelivery(
    store: SubscriberStore, stats: StatsStore
) -> None:
    ctx = context(SubscriberStore(store.table, store.events_table, client=Flaky(conflicts=99)))
    records = write_batch(ctx, delays(3))
    assert all(isinstance(r.error, WriteConflict) for r in records)
    with pytest.raises(WriteConflict):
        process_body(delays(1, start=7)[0], ctx)
    assert stats.source(SOURCE).total("delivery_delay") == 0
    # SQS delivers them again: written once
    assert [r.outcome.status for r in write_batch(context(store), delays(3))] == ["recorded"] * 3


def test_an_item_dynamodb_rejects_fails_only_its_record(store: SubscriberStore, stats: StatsStore) -> None:
    flaky = Flaky(reject_pk="SUB#s1@example.com")
    ctx = context(SubscriberStore(store.table, store.events_table, client=flaky))
    records = write_batch(ctx, delays(3))
    assert [r.error is None for r in records] == [True, False, True]
    assert isinstance(records[1].error, engagement.ItemRejected)
    assert flaky.calls == 1 + 3  # the batch, then one transaction per event
    assert stats.source(SOURCE).total("delivery_delay") == 2
    assert_counters_match_the_events(stats)


def test_the_handler_fails_only_the_malformed_record_and_writes_the_rest_together(
    handler: Any, store: SubscriberStore, stats: StatsStore, transactions: Calls
) -> None:
    records = [_sqs(b) for b in delays(2)] + [_sqs("{not json")] + [_sqs(b) for b in delays(2, start=2)]
    result = handler.handler({"Records": records}, LambdaContext("engagement"))
    assert [f["itemIdentifier"] for f in result["batchItemFailures"]] == [records[2]["messageId"]]
    assert len(transactions) == 1
    assert stats.source(SOURCE).total("delivery_delay") == 4
    again = handler.handler({"Records": records}, LambdaContext("engagement"))  # redelivered
    assert [f["itemIdentifier"] for f in again["batchItemFailures"]] == [records[2]["messageId"]]
    assert stats.source(SOURCE).total("delivery_delay") == 4


def test_the_handler_reports_the_records_whose_write_failed(
    handler: Any, store: SubscriberStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    flaky_store = SubscriberStore(store.table, store.events_table, client=Flaky(conflicts=99))
    monkeypatch.setattr(handler, "context", context(flaky_store))
    unknown = event("send")
    unknown["eventType"] = "SomethingNewFromSes"
    records = [_sqs(b) for b in delays(2)] + [_sqs(sns(unknown))]
    result = handler.handler({"Records": records}, LambdaContext("engagement"))
    # the unknown type is acknowledged: it has nothing to write
    assert [f["itemIdentifier"] for f in result["batchItemFailures"]] == [r["messageId"] for r in records[:2]]


def test_deliveries_are_written_alone_and_counted_once_by_the_stats_fold(
    ctx: EngagementContext, store: SubscriberStore, stats: StatsStore, transactions: Calls
) -> None:
    # Given a batch of five Deliveries (two carried twice) and an open
    bodies = [sns(event("delivery", email=f"s{i}@example.com", message_id=f"m-{i}")) for i in range(5)]
    batch = [*bodies, bodies[0], bodies[3], sns(event("open", email="s1@example.com", message_id="m-1"))]

    # When the batch is written, then written again (SQS delivered it twice)
    first, again = write_batch(ctx, batch), write_batch(ctx, batch)

    # Then each Delivery is one item, put alone (only the open is in a transaction), its copies
    # and the second batch's are duplicates
    assert [r.outcome.status for r in first] == ["recorded"] * 5 + ["duplicate"] * 2 + ["recorded"]
    assert [r.outcome.status for r in again] == ["duplicate"] * 8
    assert transactions.actions[0] == 1 + 2 + 3  # the open, its two markers, three counters items
    items = [e for i in range(5) for e in store.list_events(f"s{i}@example.com") if e["type"] == "delivery"]
    assert len(items) == 5 and all(item["fold_count"] is True for item in items)

    # And the stats fold counts each once, however often its batch comes
    assert stats.source(SOURCE).total("delivery") == 0
    assert fold(store) == 5
    again_from_the_start = fold_batches(StreamCountFold(store.table), Streams(STATS_FOLD_FUNCTION))
    assert (again_from_the_start.events, again_from_the_start.skipped) == (0, 5)
    assert (stats.source(SOURCE).total("delivery"), stats.template(TEMPLATE).total("delivery")) == (5, 5)
    assert_counters_match_the_events(stats)
