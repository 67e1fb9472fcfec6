"""``mailstep hygiene backfill`` on moto (``shared.engagement.sunset.backfill``, what the CLI and
the MCP tool call through ``ops.hygiene``).

Given subscribers from before list hygiene (their profiles, their recorded opens, no
``ENGAGEMENT`` item: the engagement consumer leaves such subscribers alone), the daily run does
not see them; the backfill creates their items from their events (a person's open is their last
engagement, a machine's is not), and then the hygiene function's run marks the silent ones cold.
Run again, the backfill writes nothing; interrupted, it resumes after its checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from shared.core.aws import client
from shared.engagement import sunset
from shared.engagement.consumer import EngagementContext
from shared.store import keys
from shared.store.subscribers import SubscriberStore
from tests.integration.test_sunset import ctx, day, engagement, hygiene, opened

__all__ = ["ctx", "hygiene"]  # fixtures of test_sunset used here

SILENT, READER, PREFETCHED = "silent@example.com", "reader@example.com", "prefetched@example.com"
LEGACY = (SILENT, READER, PREFETCHED)
MODERN, LEFT = "modern@example.com", "left@example.com"
WRITES = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}


def _legacy(store: SubscriberStore, email: str) -> None:
    """A subscriber as stored before list hygiene: the profile without its ENGAGEMENT item."""
    store.upsert(email)
    client("dynamodb").delete_item(
        TableName=store.events_table, Key={"PK": {"S": keys.sub_pk(email)}, "SK": {"S": keys.ENGAGEMENT}}
    )


def _has_item(store: SubscriberStore, email: str) -> bool:
    found = client("dynamodb").get_item(
        TableName=store.events_table, Key={"PK": {"S": keys.sub_pk(email)}, "SK": {"S": keys.ENGAGEMENT}}
    )
    return "Item" in found


def _cold_on_day_30(store: SubscriberStore) -> set[str]:
    """Whom the daily run of day 30 would mark cold (its dry run: reads only)."""
    now = datetime.fromisoformat(f"{day(30)}T04:00:00+00:00")
    return set(sunset.run(store, sunset.SunsetPolicy(), now, dry_run=True).to_mark_cold)


@pytest.fixture
def subscribers(store: SubscriberStore, ctx: EngagementContext) -> SubscriberStore:
    for email in LEGACY:
        _legacy(store, email)
    store.upsert(MODERN)  # created with its item: nothing to backfill
    _legacy(store, LEFT)
    store.upsert(LEFT, unsubscribe=True)  # not subscribed: the sunset has nothing to do with them
    opened(ctx, READER, 5)  # a person read a mail on day 5
    opened(ctx, PREFETCHED, 5, mpp=True)  # Apple's proxy fetched one: nobody read it
    return store


def test_the_backfill_makes_the_sunset_see_subscribers_from_before_it(
    subscribers: SubscriberStore, hygiene: Callable[[int], dict[str, Any]]
) -> None:
    store = subscribers
    # Given the legacy subscribers are invisible to the daily run
    assert _cold_on_day_30(store) == {MODERN}
    # When the backfill is dry-run, nothing is written
    dry = sunset.backfill(store, dry_run=True)
    assert (dry.read, dry.total, dry.had_item, dry.created, dry.engaged, dry.writes) == (4, 4, 1, 3, 1, 0)
    assert not any(_has_item(store, email) for email in LEGACY)
    # When it runs
    done = sunset.backfill(store)
    assert (done.created, done.engaged, done.raced, done.gone, done.done) == (3, 1, 0, 0, True)
    assert engagement(store, READER)["day"] == day(5)  # the person's open, not the subscription
    assert "engaged_at" not in engagement(store, PREFETCHED)  # the machine's open is no engagement
    assert not _has_item(store, LEFT)
    # Then the daily run sees them: the silent and the prefetched turn cold, the reader stays warm
    assert _cold_on_day_30(store) == {MODERN, SILENT, PREFETCHED}
    assert hygiene(30)["marked_cold"] == 3
    assert {email for email in (*LEGACY, MODERN) if "cold" in store.require_profile(email).tags} == {
        MODERN,
        SILENT,
        PREFETCHED,
    }


def test_a_second_backfill_reads_everyone_and_writes_nothing(
    subscribers: SubscriberStore, dynamodb_requests: list[tuple[str, dict[str, Any]]]
) -> None:
    first = sunset.backfill(subscribers)
    dynamodb_requests.clear()
    second = sunset.backfill(subscribers)
    assert (first.created, first.writes) == (3, 5)  # three items, the page's checkpoint, its delete
    assert (second.read, second.had_item, second.created, second.writes) == (4, 4, 0, 0)
    assert [op for op, _ in dynamodb_requests if op in WRITES] == []
    assert any(op == "BatchGetItem" for op, _ in dynamodb_requests)  # it did read them


def test_an_interrupted_backfill_resumes_after_its_checkpoint(subscribers: SubscriberStore) -> None:
    class Stop(Exception):
        pass

    def crash_after_two_pages(looked_at: int, total: int) -> None:
        if looked_at == 2:
            raise Stop

    # Given a run that dies after its second page (one subscriber a page, in address order:
    # modern, which has its item, then prefetched, whose item it wrote)
    with pytest.raises(Stop):
        sunset.backfill(subscribers, page=1, progress=crash_after_two_pages)
    assert _has_item(subscribers, PREFETCHED) and not _has_item(subscribers, READER)
    # When it runs again, it starts after the checkpoint and creates only the rest
    seen: list[tuple[int, int]] = []
    resumed = sunset.backfill(subscribers, page=1, progress=lambda n, total: seen.append((n, total)))
    assert resumed.resumed_after is not None
    assert (resumed.read, resumed.created, resumed.had_item) == (2, 2, 0)
    assert seen == [(1, 4), (2, 4)]
    assert all(_has_item(subscribers, email) for email in LEGACY)
    # and a finished run leaves no checkpoint: the next one starts from the first subscriber
    again = sunset.backfill(subscribers)
    assert (again.resumed_after, again.read, again.created) == (None, 4, 0)
