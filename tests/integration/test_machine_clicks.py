"""Machine clicks in the engagement consumer, on moto.

Given a delivered mail, when clicks arrive that a security scanner makes (the hidden link of the
layout; a click within seconds of the delivery; another link of the same mail within a second),
then each event item says ``machine: <why>``, the clicks feed ``click_machine`` (not ``click``, no
unique click), a sequence's ``clicked`` condition stays false and the reader's last engagement
does not move; a person's click minutes later counts as the click. Judging a click reads at most
one Query of the subscriber's events.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

import pytest

from shared.engagement.consumer import EngagementBatch, EngagementContext, process_body
from shared.engagement.machine import HIDDEN_LINK_PATH
from shared.engagement.suppression import Suppressions
from shared.store import keys
from shared.store.stats import StatsStore
from shared.store.subscribers import SubscriberStore
from tests.integration.test_engagement import EMAIL, event, sns

TEMPLATE = "onboarding/welcome"
# after the subscription: two days ahead, so still after it when the suite runs past midnight
D = (date.today() + timedelta(days=2)).isoformat()
DELIVERED = f"{D}T10:00:00.000Z"


@pytest.fixture
def ctx(store: SubscriberStore) -> EngagementContext:
    return EngagementContext(store=store, suppressions=Suppressions(store))


def click(at: str, link: str = "https://acme.test/pricing", message: str = "m-1") -> str:
    return sns(event("click", at=at, link=link, message_id=message))


def delivered(ctx: EngagementContext, message: str = "m-1") -> None:
    process_body(sns(event("delivery", at=DELIVERED, message_id=message)), ctx)


def clicks(store: SubscriberStore) -> dict[str, str | None]:
    return {str(e["link"]): e.get("machine") for e in store.list_events(EMAIL) if e["type"] == "click"}


def counts(store: SubscriberStore) -> tuple[int, int, int]:
    counters = StatsStore(store.table, store.events_table).source("onboarding")
    return counters.total("click"), counters.unique("click") or 0, counters.total("click_machine")


def test_a_click_on_the_hidden_link_or_within_seconds_of_delivery_is_a_machine_s(
    store: SubscriberStore, ctx: EngagementContext
) -> None:
    store.upsert(EMAIL)
    before = store.client.get_item(TableName=store.events_table, Key=_engagement_key())["Item"]["day"]
    delivered(ctx)

    process_body(click(f"{D}T10:00:02.000Z", link="https://acme.test/a"), ctx)  # 2 s after
    process_body(click(f"{D}T12:00:00.000Z", link=f"https://api.acme.test{HIDDEN_LINK_PATH}"), ctx)
    process_body(click(f"{D}T10:00:03.000Z", link="https://acme.test/a"), ctx)  # delivered twice
    process_body(click(f"{D}T10:00:03.000Z", link="https://acme.test/a"), ctx)

    assert clicks(store) == {
        "https://acme.test/a": "at_delivery",
        f"https://api.acme.test{HIDDEN_LINK_PATH}": "hidden_link",
    }
    assert counts(store) == (0, 0, 3)
    assert not store.has_event(EMAIL, "click", TEMPLATE)  # a sequence's `clicked` stays false
    after = store.client.get_item(TableName=store.events_table, Key=_engagement_key())["Item"]["day"]
    assert after == before  # machine clicks keep nobody warm

    process_body(click(f"{D}T10:30:00.000Z", link="https://acme.test/b"), ctx)  # a person, later

    assert clicks(store)["https://acme.test/b"] is None
    assert counts(store) == (1, 1, 3)
    assert store.has_event(EMAIL, "click", TEMPLATE)
    row = {r["metric"]: r for r in StatsStore(store.table, store.events_table).source("onboarding").rows()}
    assert (row["clicked"]["total"], row["clicked by machines"]["total"]) == (1, 3)
    after = store.client.get_item(TableName=store.events_table, Key=_engagement_key())["Item"]["day"]
    assert after == {"S": D}


def test_every_link_of_a_mail_clicked_within_a_second_in_one_batch_is_a_machine_s(
    store: SubscriberStore, ctx: EngagementContext
) -> None:
    store.upsert(EMAIL)
    batch = EngagementBatch(ctx)  # a scanner's clicks, an hour after the mail arrived
    batch.add("r1", click(f"{D}T11:00:00.100Z", link="https://acme.test/a"))
    batch.add("r2", click(f"{D}T11:00:00.400Z", link="https://acme.test/b"))
    batch.add("r3", click(f"{D}T11:00:00.700Z", link="https://acme.test/c"))
    assert all(r.error is None for r in batch.flush())

    assert clicks(store) == dict.fromkeys(
        ("https://acme.test/a", "https://acme.test/b", "https://acme.test/c"), "all_links"
    )
    assert counts(store) == (0, 0, 3)


def test_a_click_s_delivery_in_the_same_batch_judges_it_and_judging_costs_one_query(
    store: SubscriberStore, ctx: EngagementContext, dynamodb_requests: list[tuple[str, dict[str, Any]]]
) -> None:
    store.upsert(EMAIL)
    dynamodb_requests.clear()
    batch = EngagementBatch(ctx)
    batch.add("r1", click(f"{D}T10:00:01.000Z", message="m-2"))
    batch.add("r2", sns(event("delivery", at=DELIVERED, message_id="m-2")))
    batch.flush()
    made = list(dynamodb_requests)

    assert clicks(store) == {"https://acme.test/pricing": "at_delivery"}
    queries = [p for op, p in made if op == "Query"]
    assert len(queries) == 1  # the click's neighbours; a delivery is not judged
    assert queries[0]["TableName"] == store.events_table


def test_a_person_s_click_costs_one_query_to_judge_and_moves_the_last_engagement_once(
    store: SubscriberStore, ctx: EngagementContext, dynamodb_requests: list[tuple[str, dict[str, Any]]]
) -> None:
    store.upsert(EMAIL)
    delivered(ctx)
    dynamodb_requests.clear()

    process_body(click(f"{D}T10:05:00.000Z"), ctx)
    made = list(dynamodb_requests)

    assert clicks(store) == {"https://acme.test/pricing": None}
    assert [op for op, _ in made].count("Query") == 1
    updates = [p for op, p in made if op == "UpdateItem" and p["Key"]["SK"] == {"S": keys.ENGAGEMENT}]
    assert len(updates) == 1


def _engagement_key() -> dict[str, Any]:
    return {"PK": {"S": keys.sub_pk(EMAIL)}, "SK": {"S": keys.ENGAGEMENT}}
