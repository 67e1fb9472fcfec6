"""``SubscriberStore.upsert_many`` (the CSV import's writes) on moto: whole subscribers share
transactions of at most 100 actions, a profile changed after it was read cancels its shared
transaction and is merged on its own (never overwritten), a write past a limit is refused for
that subscriber only, and each profile's tags are exactly its TAG# partners afterwards."""

from __future__ import annotations

from collections import Counter
from typing import Any

from shared.core.errors import InvalidInput
from shared.store.subscribers import Change, ProfileChange, SubscriberStore, Upsert, keys
from tests.integration.conftest import operations, scan_all


def partners_match(table: str) -> bool:
    """Every profile's tags are exactly its TAG# partners, and no partner is without its tag."""
    items = scan_all(table)
    tags = {(t, i["email"]) for i in items if i["SK"] == keys.PROFILE for t in i.get("tags", ())}
    partners = {(i["PK"].removeprefix("TAG#"), i["email"]) for i in items if i["PK"].startswith("TAG#")}
    return tags == partners


def test_new_subscribers_share_transactions_of_whole_subscribers(
    store: SubscriberStore, resources: Any
) -> None:
    # Given 60 new addresses with two tags each (4 actions a subscriber: the profile, its
    # directory item and two TAG# partners: 240 actions)
    emails = [f"new{i:02d}@example.com" for i in range(60)]
    upserts = [Upsert(e, k, ProfileChange(add_tags=("a", "b"))) for e, k in store.known(emails).items()]

    # When they are upserted together
    with operations() as calls:
        changes = store.upsert_many(upserts)

    # Then three transactions wrote them (25 whole subscribers = 100 actions, 25, then 10), not 60
    assert Counter(calls) == {"TransactWriteItems": 3}
    assert all(isinstance(c, Change) and c.created for c in changes) and len(changes) == 60
    assert set(store.tag_members("a")) == set(store.tag_members("b")) == set(emails)
    assert partners_match(resources.tables["table_name"])


def test_a_profile_changed_since_the_read_is_merged_not_overwritten(
    store: SubscriberStore, resources: Any
) -> None:
    # Given ann exists, and the import reads her and two new addresses
    store.upsert("ann@example.com", first_name="Ann", add_tags=["old"])
    known = store.known(["ann@example.com", "bob@example.com", "cat@example.com"])
    # ... and another writer changes ann after that read
    store.upsert("ann@example.com", add_tags=["vip"], attributes={"plan": "pro"})

    # When the three are upserted from the stale read
    upserts = [Upsert(e, k, ProfileChange(add_tags=("news",))) for e, k in known.items()]
    with operations() as calls:
        changes = store.upsert_many(upserts)

    # Then the shared transaction was cancelled (nothing of it written) and each was written on
    # its own: ann re-read and merged, bob and cat created
    assert calls[0] == "TransactWriteItems" and Counter(calls)["TransactWriteItems"] == 4
    assert [c.created for c in changes if isinstance(c, Change)] == [False, True, True]
    ann = store.require_profile("ann@example.com")
    assert ann.tags == {"old", "vip", "news"} and ann.attributes == {"plan": "pro"}
    assert ann.first_name == "Ann"
    assert store.require_profile("bob@example.com").tags == {"news"}
    assert partners_match(resources.tables["table_name"])


def test_a_write_past_a_limit_is_refused_for_that_subscriber_only(
    store: SubscriberStore, resources: Any
) -> None:
    # Given a subscriber with 45 tags
    store.upsert("full@example.com", add_tags=[f"t{i}" for i in range(45)])
    known = store.known(["a@example.com", "full@example.com", "b@example.com"])

    # When ten more tags are upserted for each of three addresses
    more = tuple(f"u{i}" for i in range(10))
    changes = store.upsert_many([Upsert(e, k, ProfileChange(add_tags=more)) for e, k in known.items()])

    # Then the full one is refused (55 tags) and nothing of it written; the others are created
    assert isinstance(changes[1], InvalidInput) and changes[1].problems[0].field == "tags"
    assert all(isinstance(c, Change) and c.created for c in (changes[0], changes[2]))
    assert len(store.require_profile("full@example.com").tags) == 45
    assert set(store.tag_members("u0")) == {"a@example.com", "b@example.com"}
    assert partners_match(resources.tables["table_name"])


def test_an_unchanged_subscriber_writes_nothing(store: SubscriberStore) -> None:
    store.upsert("same@example.com", first_name="Same", add_tags=["x"])
    known = store.known(["same@example.com"])

    with operations() as calls:
        (change,) = store.upsert_many(
            [
                Upsert(
                    "same@example.com",
                    known["same@example.com"],
                    ProfileChange(first_name="Same", add_tags=("x",)),
                )
            ]
        )

    assert calls == [] and isinstance(change, Change) and not change.changed
