"""The sunset (list hygiene), on moto: the hygiene function's handler, the engagement consumer and
the store as they run in Lambda.

Given subscribers created through the store (their list-hygiene item starts at their subscription),
when the daily run is invoked with the Scheduled Event of a later day, then those without a human
open or click for the period turn cold once (tag, ``subscriber.cold`` event), are unsubscribed once
after the grace period (tag ``sunset``, not suppressed), a human open warms them up and a machine
open does not; every run reads only the HygieneIndex day buckets that fell due, and the consumer
writes the last-engagement marker at most once per subscriber per day.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from datetime import date, timedelta
from types import ModuleType
from typing import Any

import pytest

from local_aws.apigw import LambdaContext
from local_aws.provision import LocalResources
from shared.core.aws import client, register_hook, unregister_hook
from shared.core.specs import HYGIENE_INDEX
from shared.engagement.consumer import EngagementContext, process_body
from shared.engagement.machine import MPP_USER_AGENT
from shared.engagement.suppression import Suppressions
from shared.store import keys
from shared.store.dynamo import deserialize
from shared.store.subscribers import SubscriberStore
from tests.integration.test_engagement import event, sns


def day(offset: int) -> str:
    """The day ``offset`` days from today, read when asked (a suite that runs past midnight
    must not count from the day it was collected on)."""
    return (date.today() + timedelta(days=offset)).isoformat()


def scheduled(offset: int) -> dict[str, Any]:
    """The Scheduled Event EventBridge delivers for the run ``offset`` days from today, 04:00 UTC."""
    return {
        "version": "0",
        "id": f"run-{offset}",
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "time": f"{day(offset)}T04:00:00Z",
        "resources": ["arn:aws:events:us-east-1:123456789012:rule/daily"],
        "detail": {},
    }


@pytest.fixture
def hygiene(resources: LocalResources, monkeypatch: pytest.MonkeyPatch) -> Callable[[int], dict[str, Any]]:
    for name, value in resources.env().items():
        monkeypatch.setenv(name, value)
    module: ModuleType = importlib.reload(importlib.import_module("functions.hygiene.handler"))

    def run(offset: int) -> dict[str, Any]:
        return dict(module.handler(scheduled(offset), LambdaContext("hygiene")))

    return run


@pytest.fixture
def ctx(store: SubscriberStore) -> EngagementContext:
    return EngagementContext(store=store, suppressions=Suppressions(store))


def engagement(store: SubscriberStore, email: str) -> dict[str, Any]:
    raw = client("dynamodb").get_item(TableName=store.events_table, Key=_key(email), ConsistentRead=True)
    return deserialize(raw["Item"])


def _key(email: str) -> dict[str, Any]:
    return {"PK": {"S": keys.sub_pk(email)}, "SK": {"S": keys.ENGAGEMENT}}


def timeline(store: SubscriberStore, email: str, kind: str) -> list[dict[str, Any]]:
    return [e for e in store.list_events(email) if e["type"] == kind]


def opened(
    ctx: EngagementContext, email: str, offset: int, *, mpp: bool = False, message: str = "m-1"
) -> None:
    changes = {"userAgent": MPP_USER_AGENT} if mpp else {}
    at = f"{day(offset)}T10:00:00.000Z"
    process_body(sns(event("open", email=email, at=at, message_id=message, **changes)), ctx)


def test_a_reader_who_never_engages_turns_cold_once_and_is_unsubscribed_once_after_the_grace(
    store: SubscriberStore, hygiene: Callable[[int], dict[str, Any]]
) -> None:
    email = "quiet@example.com"
    store.upsert(email)  # subscribed today: young, so 30 days without engagement make them cold

    assert hygiene(29)["marked_cold"] == 0
    first = hygiene(30)
    again = hygiene(30)  # the same Scheduled Event delivered twice

    assert (first["marked_cold"], again["marked_cold"], again["to_mark_cold"]) == (1, 0, 0)
    profile = store.require_profile(email)
    assert "cold" in profile.tags and profile.status == "subscribed"
    assert len(timeline(store, email, "subscriber.cold")) == 1
    assert store.tag_members("cold") == [email]
    assert engagement(store, email)["hygiene_key"] == keys.hygiene_key("C", day(30), keys.index_shard(email))

    assert hygiene(59)["unsubscribed"] == 0
    gone, twice = hygiene(60), hygiene(60)
    assert (gone["unsubscribed"], twice["unsubscribed"]) == (1, 0)
    profile = store.require_profile(email)
    assert profile.status == "unsubscribed" and not profile.suppressed
    assert profile.tags == frozenset({"sunset"})
    assert store.get_suppression(email) is None  # not suppressed: they may come back
    (unsubscribed,) = timeline(store, email, "subscriber.unsubscribed")
    assert unsubscribed["data"] == {"reason": "sunset", "cold_since": day(30)}
    assert "hygiene_key" not in engagement(store, email)  # out of the index
    assert len(timeline(store, email, "subscriber.cold")) == 1


def test_a_person_s_open_keeps_a_reader_warm_and_warms_a_cold_one_a_machine_open_does_not(
    store: SubscriberStore, ctx: EngagementContext, hygiene: Callable[[int], dict[str, Any]]
) -> None:
    machine, person = "prefetched@example.com", "reader@example.com"
    store.upsert(machine)
    store.upsert(person)
    opened(ctx, machine, 10, mpp=True)  # Apple MPP fetched the pixel: nobody read it
    opened(ctx, person, 10)

    assert hygiene(30)["marked_cold"] == 1
    assert "cold" in store.require_profile(machine).tags
    assert "cold" not in store.require_profile(person).tags

    assert hygiene(40)["marked_cold"] == 1  # 30 days after their open, still young
    assert "cold" in store.require_profile(person).tags
    opened(ctx, person, 45, message="m-2")  # during the grace period
    assert "cold" not in store.require_profile(person).tags
    assert "cold_at" not in engagement(store, person)
    opened(ctx, machine, 45, mpp=True, message="m-2")
    assert "cold" in store.require_profile(machine).tags

    result = hygiene(70)  # machine: cold since day 30, grace over; person: warm again
    assert result["unsubscribed"] == 1
    assert store.require_profile(machine).status == "unsubscribed"
    assert store.require_profile(person).status == "subscribed"


def test_only_subscribed_unsuppressed_readers_count(
    store: SubscriberStore, hygiene: Callable[[int], dict[str, Any]]
) -> None:
    store.upsert("left@example.com")
    store.unsubscribe("left@example.com")
    store.upsert("bounced@example.com")
    store.set_suppressed("bounced@example.com", True)
    store.upsert("stays@example.com")

    result = hygiene(30)

    assert result["marked_cold"] == 1
    assert result["skipped"] == {"not_subscribed": 1, "suppressed": 1}
    assert store.tag_members("cold") == ["stays@example.com"]


def test_the_index_holds_only_engagement_items_and_a_run_queries_only_the_buckets_that_fell_due(
    store: SubscriberStore,
    resources: LocalResources,
    hygiene: Callable[[int], dict[str, Any]],
    dynamodb_requests: list[tuple[str, dict[str, Any]]],
) -> None:
    store.upsert("a@example.com", add_tags=["vip"])
    store.upsert("b@example.com")
    store.upsert("never@example.com", unsubscribe=True)  # created unsubscribed: no item

    indexed = client("dynamodb").scan(TableName=store.events_table, IndexName=HYGIENE_INDEX)["Items"]
    assert sorted((i["PK"]["S"], i["SK"]["S"]) for i in indexed) == [
        ("SUB#a@example.com", "ENGAGEMENT"),
        ("SUB#b@example.com", "ENGAGEMENT"),
    ]

    dynamodb_requests.clear()
    hygiene(5)  # the first run: one day of each kind
    queried = [p["ExpressionAttributeValues"][":k"]["S"] for op, p in dynamodb_requests if op == "Query"]
    assert all(p.get("IndexName") == HYGIENE_INDEX for op, p in dynamodb_requests if op == "Query")
    expected = {
        *keys.hygiene_keys("E", day(5 - 90)),
        *keys.hygiene_keys("E", day(5 - 30)),
        *keys.hygiene_keys("C", day(5 - 30)),
        *keys.hygiene_keys("C", day(5)),
    }
    assert sorted(queried) == sorted(expected)
    assert not [op for op, _ in dynamodb_requests if op == "Scan"]

    dynamodb_requests.clear()
    hygiene(8)  # three days later: the three days since, of each kind
    queried = [p["ExpressionAttributeValues"][":k"]["S"] for op, p in dynamodb_requests if op == "Query"]
    assert len(queried) == 4 * 3 * keys.INDEX_SHARDS
    assert {q.rsplit("#", 1)[0] for q in queried} == {
        f"{kind}#{day(8 - back - n)}" for kind, back in (("E", 90), ("E", 30), ("C", 30)) for n in range(3)
    } | {f"C#{day(8 - n)}" for n in range(3)}


def test_the_last_engagement_is_written_at_most_once_per_subscriber_per_day(
    store: SubscriberStore, ctx: EngagementContext, dynamodb_requests: list[tuple[str, dict[str, Any]]]
) -> None:
    email = "busy@example.com"
    store.upsert(email)
    dynamodb_requests.clear()

    for n in range(4):  # four mails opened on day 3
        opened(ctx, email, 3, message=f"m-{n}")
    opened(ctx, email, 4, message="m-9")

    marker_writes = [
        p
        for op, p in dynamodb_requests
        if op in ("UpdateItem", "PutItem")
        and p.get("Key", p.get("Item", {})).get("SK") == {"S": "ENGAGEMENT"}
    ]
    assert len(marker_writes) == 2  # day 3 once, day 4 once
    item = engagement(store, email)
    assert (item["day"], item["hygiene_key"]) == (
        day(4),
        keys.hygiene_key("E", day(4), keys.index_shard(email)),
    )
    reads = [
        p
        for op, p in dynamodb_requests
        if op == "BatchGetItem"
        and any(k["SK"]["S"] == "ENGAGEMENT" for r in p["RequestItems"].values() for k in r["Keys"])
    ]
    assert len(reads) == 5  # one read of the item per open


def test_an_open_on_the_day_of_the_subscription_is_recorded_as_the_last_engagement(
    store: SubscriberStore, ctx: EngagementContext
) -> None:
    email = "eager@example.com"
    store.upsert(email)  # the item starts today, without an engagement
    assert "engaged_at" not in engagement(store, email)

    opened(ctx, email, 0, message="m-1")
    opened(ctx, email, 0, message="m-1")  # SNS delivers it again
    opened(ctx, email, 0, message="m-2")

    item = engagement(store, email)
    assert (item["engaged_at"], item["day"]) == (f"{day(0)}T10:00:00.000Z", day(0))


def test_a_run_that_crashed_after_marking_cold_is_completed_by_the_next_delivery(
    store: SubscriberStore, hygiene: Callable[[int], dict[str, Any]]
) -> None:
    email = "crash@example.com"
    store.upsert(email)
    calls = [0]

    def lose_the_event(params: dict[str, Any], **_: Any) -> None:
        """The write of the cold event (with the profile's ``cold`` tag, one transaction) lost."""
        puts = [a["Put"] for a in params.get("TransactItems", []) if "Put" in a]
        if any(
            p["TableName"].endswith("events") and p["Item"].get("type") == {"S": "subscriber.cold"}
            for p in puts
        ):
            calls[0] += 1
            if calls[0] == 1:
                raise ConnectionError("injected: the cold event's write lost")

    register_hook("before-parameter-build.dynamodb.TransactWriteItems", lose_the_event)
    try:
        with pytest.raises(ConnectionError):
            hygiene(30)
        assert engagement(store, email).get("cold_pending") is True  # claimed, not confirmed
        result = hygiene(30)  # EventBridge retries the invocation
    finally:
        unregister_hook("before-parameter-build.dynamodb.TransactWriteItems", lose_the_event)

    assert result["repaired"] + result["marked_cold"] == 1
    assert "cold_pending" not in engagement(store, email)
    assert len(timeline(store, email, "subscriber.cold")) == 1
    assert store.tag_members("cold") == [email]
