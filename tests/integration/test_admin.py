"""Subscriber administration (ops.admin) on moto: get, list paging and filters, update,
unsubscribe, resubscribe, and the GDPR erase (both tables, partners included)."""

from __future__ import annotations

from typing import Any

import pytest

from ops.admin import SubscriberAdmin, parse_update
from shared.core.errors import InvalidInput, SubscriberNotFound
from shared.store.subscribers import SubscriberStore, keys
from tests.integration.conftest import operations, scan_all


class RecordingSfn:
    """Step Functions stand-in: records stops (the engine stops before removing the pair)."""

    def __init__(self) -> None:
        self.stopped: list[str] = []

    def stop(self, execution: str, *, error: str, cause: str) -> bool:
        self.stopped.append(execution)
        return True


@pytest.fixture
def admin(store: SubscriberStore) -> tuple[SubscriberAdmin, RecordingSfn]:
    from shared.sequences.engine import SequenceEngine
    from shared.sequences.validate import Catalog

    sfn = RecordingSfn()
    engine = SequenceEngine(catalog=Catalog(), arn_prefix="", store=store, sfn=sfn)  # type: ignore[arg-type]
    return SubscriberAdmin(store, engine), sfn


def items_mentioning(email: str, *tables: str) -> list[dict[str, Any]]:
    found = []
    for table in tables:
        for item in scan_all(table):
            if email in str(item.get("PK")) or email in str(item.get("SK")) or item.get("email") == email:
                found.append(item)
    return found


def test_get_shows_profile_executions_and_rejects_unknown(store: SubscriberStore, admin: Any) -> None:
    subscribers, _ = admin
    store.upsert("ada@example.com", first_name="Ada", add_tags=["pro"], attributes={"plan": "pro"})
    store.put_execution("ada@example.com", "onboarding", "arn:aws:states:us-east-1:1:execution:m:ada")

    detail = subscribers.get(" ada@EXAMPLE.com ").public()

    assert detail["email"] == "ada@example.com"
    assert detail["tags"] == ["pro"] and detail["attributes"] == {"plan": "pro"}
    assert [e["sequence"] for e in detail["executions"]] == ["onboarding"]
    assert detail["suppression"] is None
    with pytest.raises(SubscriberNotFound):
        subscribers.get("nobody@example.com")
    with pytest.raises(InvalidInput):
        subscribers.get("not-an-email")


def test_list_pages_with_cursor_and_filters(store: SubscriberStore, admin: Any) -> None:
    subscribers, _ = admin
    for i in range(23):
        store.upsert(f"user{i:02d}@example.com", add_tags=["pro"] if i % 2 else ["free"])
    for i in range(0, 23, 3):
        store.unsubscribe(f"user{i:02d}@example.com")

    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = subscribers.list(limit=5, cursor=cursor)
        pages += 1
        assert len(page.subscribers) <= 5
        seen += [p.email for p in page.subscribers]
        cursor = page.cursor
        if cursor is None:
            break
    assert sorted(seen) == [f"user{i:02d}@example.com" for i in range(23)]
    assert pages == 5

    pro = [p.email for p in subscribers.list(tag="pro", limit=100).subscribers]
    assert sorted(pro) == [f"user{i:02d}@example.com" for i in range(1, 23, 2)]
    first = subscribers.list(tag="pro", limit=4)
    rest = subscribers.list(tag="pro", limit=100, cursor=first.cursor)
    assert sorted([p.email for p in first.subscribers + rest.subscribers]) == sorted(pro)
    assert rest.cursor is None

    unsub = {p.email for p in subscribers.list(status="unsubscribed", limit=100).subscribers}
    assert unsub == {f"user{i:02d}@example.com" for i in range(0, 23, 3)}
    both = {p.email for p in subscribers.list(tag="pro", status="unsubscribed", limit=100).subscribers}
    assert both == {f"user{i:02d}@example.com" for i in range(0, 23, 3) if i % 2}

    with pytest.raises(InvalidInput):
        subscribers.list(limit=5, cursor="garbage")
    with pytest.raises(InvalidInput):  # a cursor of another listing
        subscribers.list(tag="free", limit=5, cursor=first.cursor)
    with pytest.raises(InvalidInput):
        subscribers.list(status="bogus")


def test_the_directory_lists_in_address_order_and_finds_a_prefix_without_a_scan(
    store: SubscriberStore, admin: Any
) -> None:
    subscribers, _ = admin
    # Given 70 subscribers whose addresses mix case, a few of them unsubscribed
    emails = [f"{'Zed' if i % 5 == 0 else 'ann' if i % 2 else 'bob'}.{i:02d}@example.com" for i in range(70)]
    for email in emails:
        store.upsert(email)
    for email in emails[::7]:
        store.unsubscribe(email)
    in_order = sorted(emails, key=str.lower)

    # When every subscriber is listed, 9 a page
    with operations() as calls:
        seen, cursor = [], None
        while True:
            page = subscribers.list(limit=9, cursor=cursor)
            seen += [p.email for p in page.subscribers]
            if (cursor := page.cursor) is None:
                break
    # Then each once, in address order (case-blind), and read by Queries, never a Scan
    assert seen == in_order
    assert "Scan" not in calls and set(calls) <= {"Query", "BatchGetItem"}, calls

    # And a prefix is found whatever its case, paged the same way, with its status filter
    def found(prefix: str, status: str | None = None, limit: int = 4) -> list[str]:
        got, cursor = [], None
        while True:
            page = subscribers.list(prefix=prefix, status=status, limit=limit, cursor=cursor)
            got += [p.email for p in page.subscribers]
            if (cursor := page.cursor) is None:
                return got

    assert found("ZED.") == found("zed.") == [e for e in in_order if e.startswith("Zed.")]
    assert found("ann.1") == [e for e in in_order if e.startswith("ann.1")]
    unsubscribed = {e for e in emails[::7]}
    assert found("bob", "unsubscribed") == [e for e in in_order if e.startswith("bob") and e in unsubscribed]
    assert found("nobody") == []
    with pytest.raises(InvalidInput):  # a cursor of another prefix's listing
        subscribers.list(prefix="bob", cursor=subscribers.list(prefix="ann", limit=2).cursor)

    # And an erased subscriber leaves the directory with its profile
    store.erase(in_order[0])
    assert [p.email for p in subscribers.list(limit=1).subscribers] == [in_order[1]]


def test_update_changes_tags_and_attributes_with_partners(
    store: SubscriberStore, admin: Any, resources: Any
) -> None:
    subscribers, _ = admin
    store.upsert("ada@example.com", add_tags=["trial"], attributes={"plan": "free", "seats": 1})

    result = subscribers.update(
        "ada@example.com", parse_update(["+pro", "-trial"], ["plan=pro", "seats=3", "old="], "Ada")
    )

    assert result.changed and result.tags_added == ("pro",) and result.tags_removed == ("trial",)
    profile = store.require_profile("ada@example.com")
    assert profile.tags == {"pro"} and profile.attributes == {"plan": "pro", "seats": 3}
    assert profile.first_name == "Ada"
    assert store.tag_members("pro") == ["ada@example.com"] and store.tag_members("trial") == []
    again = subscribers.update("ada@example.com", parse_update(["pro"], ["plan=pro"]))
    assert not again.changed
    with pytest.raises(SubscriberNotFound):
        subscribers.update("nobody@example.com", parse_update(["+x"]))
    assert store.get_profile("nobody@example.com") is None
    for bad in (["+Bad Tag"], ["+a#b"]):
        with pytest.raises(InvalidInput):
            parse_update(bad)
    with pytest.raises(InvalidInput):
        parse_update([], ["email=x@example.com"])  # reserved attribute
    with pytest.raises(InvalidInput):
        parse_update(["+x", "-x"])


def test_unsubscribe_stops_marketing_only_and_resubscribe_opts_in(store: SubscriberStore, admin: Any) -> None:
    subscribers, sfn = admin
    store.upsert("ada@example.com")
    store.put_execution("ada@example.com", "onboarding", "arn:exec:onboarding")
    store.put_execution("ada@example.com", "receipts", "arn:exec:receipts", transactional=True)

    result = subscribers.unsubscribe("ada@example.com")

    assert result.changed and result.sequences_stopped == ("onboarding",)
    assert sfn.stopped == ["arn:exec:onboarding"]
    assert [e.sequence_id for e in store.list_executions("ada@example.com")] == ["receipts"]
    assert store.sequence_members("onboarding") == []
    assert store.require_profile("ada@example.com").status == "unsubscribed"
    assert not subscribers.unsubscribe("ada@example.com").changed

    assert subscribers.resubscribe("ada@example.com").changed
    assert store.require_profile("ada@example.com").status == "subscribed"
    with pytest.raises(SubscriberNotFound):
        subscribers.resubscribe("nobody@example.com")


def test_delete_leaves_nothing_in_either_table(store: SubscriberStore, admin: Any, resources: Any) -> None:
    subscribers, sfn = admin
    email = "ada@example.com"
    store.upsert(email, add_tags=["pro", "beta"], attributes={"plan": "pro"})
    store.upsert("bob@example.com", add_tags=["pro"])
    store.put_execution(email, "onboarding", "arn:exec:ada-onboarding")
    store.put_execution("bob@example.com", "onboarding", "arn:exec:bob-onboarding")
    store.record_event(
        email,
        {
            "SK": keys.event_sk("2026-01-01T00:00:00.000Z", "open", "x1"),
            "template": "t/a",
            "source": "onboarding",
            "type": "open",
        },
    )
    store.client.put_item(
        TableName=store.table,
        Item={
            "PK": {"S": keys.sub_pk(email)},
            "SK": {"S": keys.SUPPRESSION},
            "reason": {"S": "bounce"},
            "detail": {"S": "x"},
            "at": {"S": "2026-01-01T00:00:00Z"},
        },
    )
    main, events = resources.tables["table_name"], resources.tables["events_table_name"]
    assert items_mentioning(email, main, events)

    result = subscribers.delete(email)

    assert result.sequences_stopped == ("onboarding",) and sfn.stopped == ["arn:exec:ada-onboarding"]
    assert items_mentioning(email, main, events) == []
    # no orphaned partner anywhere: every TAG#/EXEC# partner names an existing profile
    remaining = scan_all(main)
    profiles = {i["email"] for i in remaining if i["SK"] == keys.PROFILE}
    for item in remaining:
        if item["PK"].startswith(("TAG#", "EXEC#")):
            assert keys.email_from_sub(item["SK"]) in profiles
    assert store.tag_members("pro") == ["bob@example.com"]
    assert store.sequence_members("onboarding") == ["bob@example.com"]
    with pytest.raises(SubscriberNotFound):
        subscribers.delete(email)


def test_update_past_a_per_subscriber_limit_is_refused_naming_the_field(
    store: SubscriberStore, admin: Any
) -> None:
    # The CLI and the MCP server update through the same store write as the events API
    subscribers, _ = admin
    store.upsert("ada@example.com", add_tags=[f"t{i}" for i in range(50)])
    before = store.require_profile("ada@example.com")

    with pytest.raises(InvalidInput) as refused:
        subscribers.update("ada@example.com", parse_update(["+one-more"]))

    assert [p.field for p in refused.value.problems] == ["tags"]
    assert "at most 50 tags" in refused.value.message
    assert store.require_profile("ada@example.com") == before
