"""The list-health fold on moto: the main table's real change stream (the profile records, through
the stats-fold mapping's filter) folded into the subscribers' totals and day counts, each record
exactly once however often and in whatever grouping it is delivered."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from local_aws.apigw import LambdaContext
from local_aws.provision import LocalResources
from ops.admin import SubscriberAdmin
from ops.overview import backfill_list
from shared.core import specs
from shared.store import keys
from shared.store.list_health import (
    AlreadyBackfilled,
    ListHealthStore,
    change_of,
    padded,
    total_key,
    totals_of,
)
from shared.store.stats import StatsStore
from shared.store.subscribers import SubscriberStore
from tests.integration.webhook_support import Streams


@pytest.fixture
def streams(resources: LocalResources) -> Streams:
    found = Streams(specs.STATS_FOLD_FUNCTION)
    found.skip()
    return found


@pytest.fixture
def fold(resources: LocalResources) -> ListHealthStore:
    return ListHealthStore(resources.tables["table_name"])


@pytest.fixture
def stats(resources: LocalResources) -> StatsStore:
    return StatsStore(resources.tables["table_name"], resources.tables["events_table_name"])


@pytest.fixture
def read(stats: StatsStore) -> Callable[[], tuple[dict[str, int], dict[str, int]]]:
    """(totals, today's day counts)."""

    def run() -> tuple[dict[str, int], dict[str, int]]:
        totals = totals_of(stats.summed([total_key()])[total_key()])
        today = stats.daily(datetime.now(UTC).date(), 1)[0]
        return totals, {k: v for k, v in today.items() if k.startswith("list_")}

    return run


def life(store: SubscriberStore) -> None:
    """Four subscribers: one stays, one unsubscribes, one is suppressed, one is erased; and a tag
    change that counts nothing."""
    for email in ("ann@example.com", "bob@example.com", "cy@example.com", "dee@example.com"):
        store.upsert(email)
    store.upsert("ann@example.com", tags={"add": ["vip"]})
    store.unsubscribe("bob@example.com")
    store.set_suppressed("cy@example.com", True)
    store.erase("dee@example.com")


EXPECTED_TOTALS = {"profiles": 3, "subscribed": 2, "unsubscribed": 1, "suppressed": 1, "mailable": 1}
EXPECTED_DAY = {
    "list_new": 4,
    "list_unsubscribed": 1,
    "list_suppressed": 1,
    "list_erased": 1,
    "list_net": 1,
}


def test_every_path_is_counted_once_from_the_real_stream_through_the_handler(
    resources: LocalResources, store: SubscriberStore, streams: Streams, read: Any, monkeypatch: Any
) -> None:
    for name, value in resources.env().items():
        monkeypatch.setenv(name, value)
    handler = importlib.reload(importlib.import_module("functions.stats_fold.handler"))
    life(store)
    records = streams.take()
    # only profile records pass the mapping's filter
    assert records and all(r["dynamodb"]["Keys"]["SK"]["S"] == keys.PROFILE for r in records)
    answer = handler.handler({"Records": records}, LambdaContext("stats-fold", timeout_s=60))
    assert answer == {"batchItemFailures": []}
    assert read() == (EXPECTED_TOTALS, EXPECTED_DAY)
    # the same batch delivered again changes nothing
    handler.handler({"Records": records}, LambdaContext("stats-fold", timeout_s=60))
    assert read() == (EXPECTED_TOTALS, EXPECTED_DAY)


def test_an_overlapping_retry_counts_only_the_records_not_counted(
    store: SubscriberStore, streams: Streams, fold: ListHealthStore, read: Any
) -> None:
    life(store)
    records = streams.take()
    half = len(records) // 2
    first = fold.fold(records[: half + 1])
    # Lambda retries from an earlier record: the batch overlaps the one counted by two records
    again = fold.fold(records[half - 1 :])
    assert read() == (EXPECTED_TOTALS, EXPECTED_DAY)
    assert (first.counted, again.counted, again.skipped) == (half + 1, len(records) - half - 1, 2)
    assert again.transactions == 2  # refused once for the marks, then written without the overlap


def test_batches_of_other_shards_in_any_order_are_all_counted(
    store: SubscriberStore, streams: Streams, fold: ListHealthStore, read: Any
) -> None:
    """Two shards hand their batches independently, each in order: shard A's records (the later
    sequence numbers) are folded before shard B's (lower ones) and all are counted; a mark is per
    item, not a high-water mark of the whole stream."""
    life(store)
    records = streams.take()
    in_a = {"SUB#cy@example.com", "SUB#dee@example.com"}
    shard_a = [r for r in records if r["dynamodb"]["Keys"]["PK"]["S"] in in_a]
    shard_b = [r for r in records if r["dynamodb"]["Keys"]["PK"]["S"] not in in_a]
    assert min(int(r["dynamodb"]["SequenceNumber"]) for r in shard_a) < max(
        int(r["dynamodb"]["SequenceNumber"]) for r in shard_b
    )
    assert fold.fold(shard_a[:2]).counted == 2
    assert fold.fold(shard_a[2:]).counted == len(shard_a) - 2
    assert fold.fold(shard_b).counted == len(shard_b)  # lower numbers, after A's: all counted
    assert fold.fold(shard_a).skipped == len(shard_a)  # A's batches again: nothing more
    assert read() == (EXPECTED_TOTALS, EXPECTED_DAY)


def test_records_of_one_item_below_its_mark_are_skipped(
    store: SubscriberStore, streams: Streams, fold: ListHealthStore, read: Any
) -> None:
    store.upsert("ann@example.com")
    store.unsubscribe("ann@example.com")
    created, unsubscribed = streams.take()
    fold.fold([created, unsubscribed])
    assert fold.fold([created]).skipped == 1
    assert fold.fold([unsubscribed]).skipped == 1
    totals, day = read()
    assert totals["unsubscribed"] == 1 and totals["subscribed"] == 0
    assert day == {"list_new": 1, "list_unsubscribed": 1}


def test_a_record_of_another_item_or_without_a_count_writes_nothing(fold: ListHealthStore) -> None:
    other = {"dynamodb": {"Keys": {"PK": {"S": "TAG#vip"}, "SK": {"S": "SUB#a@b.c"}}, "SequenceNumber": "1"}}
    assert change_of(other) is None
    image = {"PK": {"S": "SUB#a@b.c"}, "SK": {"S": "PROFILE"}, "status": {"S": "subscribed"}}
    tagged = {
        "dynamodb": {
            "Keys": {"PK": {"S": "SUB#a@b.c"}, "SK": {"S": "PROFILE"}},
            "OldImage": image,
            "NewImage": {**image, "tags": {"SS": ["vip"]}},
            "SequenceNumber": "7",
            "ApproximateCreationDateTime": 1795741323,
        }
    }
    result = fold.fold([other, tagged])
    assert (result.unchanged, result.transactions) == (1, 0)


def test_sequence_numbers_compare_as_numbers() -> None:
    assert padded("999") < padded("1000")
    with pytest.raises(ValueError, match="sequence number"):
        padded("12a")


def test_a_backfill_counts_the_profiles_once(
    resources: LocalResources, store: SubscriberStore, fold: ListHealthStore, read: Any
) -> None:
    # Given subscribers from before the fold (their records never folded)
    store.upsert("ann@example.com")
    store.upsert("bob@example.com")
    store.unsubscribe("bob@example.com")
    store.set_suppressed("ann@example.com", True)
    admin = SubscriberAdmin(store)
    # When the operator backfills, twice
    assert backfill_list(admin.iter(), fold) == {
        "profiles": 2,
        "subscribed": 1,
        "unsubscribed": 1,
        "suppressed": 1,
        "mailable": 0,
    }
    with pytest.raises(AlreadyBackfilled):
        backfill_list(admin.iter(), fold)
    # Then the totals hold them once
    assert read()[0] == {"profiles": 2, "subscribed": 1, "unsubscribed": 1, "suppressed": 1, "mailable": 0}
