"""Machine opens in the engagement consumer, on moto.

Given a mail that Apple Mail Privacy Protection prefetched (an SES Open with the user agent
``Mozilla/5.0``), when the consumer writes the event, then the event item says ``machine:
mpp``, the open feeds ``open_machine`` (not ``open``, no unique open), the subscriber has not
"opened" the template for a sequence's condition, and recounting from the events gives the same
numbers; a person's open of the same mail afterwards counts as the first open.
"""

from __future__ import annotations

import pytest

from shared.engagement.consumer import EngagementContext, process_body
from shared.engagement.machine import MPP_USER_AGENT
from shared.engagement.suppression import Suppressions
from shared.store.stats import Counters, StatsStore
from shared.store.subscribers import SubscriberStore
from tests.integration.test_engagement import EMAIL, event, event_counts, sns

TEMPLATE = "onboarding/welcome"


@pytest.fixture
def ctx(store: SubscriberStore) -> EngagementContext:
    return EngagementContext(store=store, suppressions=Suppressions(store))


@pytest.fixture
def stats(store: SubscriberStore) -> StatsStore:
    return StatsStore(store.table, store.events_table)


def opens(store: SubscriberStore) -> list[dict[str, object]]:
    return [e for e in store.list_events(EMAIL) if e["type"] == "open"]


def test_an_mpp_prefetch_is_a_machine_open_and_a_person_s_open_still_counts_first(
    ctx: EngagementContext, store: SubscriberStore, stats: StatsStore
) -> None:
    store.upsert(EMAIL)
    prefetch = sns(event("open", userAgent=MPP_USER_AGENT, at="2026-01-01T10:00:01.000Z"))
    process_body(prefetch, ctx)
    process_body(prefetch, ctx)  # delivered twice: counted once

    (machine,) = opens(store)
    assert machine["machine"] == "mpp"
    counters = stats.source("onboarding")
    assert (counters.total("open_machine"), counters.total("open"), counters.unique("open")) == (1, 0, 0)
    assert not store.has_event(EMAIL, "open", TEMPLATE)  # a sequence's `opened` condition stays false
    row = {r["metric"]: r for r in counters.rows()}["opened by machines"]
    assert (row["total"], row["unique"]) == (1, None)

    process_body(sns(event("open", at="2026-01-01T12:00:00.000Z")), ctx)  # the reader opens it

    assert [o.get("machine") for o in opens(store)] == ["mpp", None]
    counters = stats.source("onboarding")
    assert (counters.total("open_machine"), counters.total("open"), counters.unique("open")) == (1, 1, 1)
    assert store.has_event(EMAIL, "open", TEMPLATE)
    recounted = Counters.from_events(
        {**o, "PK": f"SUB#{EMAIL}"} for o in store.list_events(EMAIL) if o["type"] != "send"
    )
    assert event_counts(recounted) == event_counts(counters.event_metrics())
