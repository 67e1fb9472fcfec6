"""Operators' view of topics and sign-ups on moto: the sign-up counters (each counted once per
effect, however often a request repeats), topic counts by the one rule, one reader's topics
and their change through the preference centre's write, and the live pending sign-ups."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from ops.topics import CHOICE, DEFAULT, TopicAdmin
from shared.consent.confirm import confirm
from shared.consent.context import ConsentContext
from shared.consent.preferences import PREFERENCES_EVENT, change_topics, save_choices
from shared.consent.record import Requester
from shared.consent.signup import signup
from shared.core.aws import client
from shared.core.errors import ConcurrentModification, InvalidInput, SubscriberNotFound
from shared.core.topics import TOPICS_FILE, require_topics
from shared.store.dynamo import key, serialize, values
from shared.store.pending import PendingSignup, PendingSignups
from shared.store.stats import (
    SignupCounts,
    StatsStore,
    contended,
    retry_contended,
)
from shared.store.subscribers import Profile, SubscriberStore, keys
from tests.integration import test_consent_signup as consent
from tests.integration.conftest import scan_all
from tests.integration.test_consent_signup import ADDRESS, IP, T0, _confirm_token, _request, _Throttled

# The sign-up tests' fixtures, reused: a moto-backed consent context and its sequence engine.
ctx, engine = consent.ctx, consent.engine

CATALOG = require_topics(TOPICS_FILE)  # product-updates (default on), newsletter (default off)


def _stats(resources: Any) -> StatsStore:
    return StatsStore(resources.tables["table_name"], resources.tables["events_table_name"])


def _counts(resources: Any) -> SignupCounts:
    return _stats(resources).signups()


def _conflict() -> ClientError:
    """What DynamoDB answers when a concurrent transaction held one of the items."""
    return ClientError(
        {
            "Error": {"Code": "TransactionCanceledException", "Message": "cancelled"},
            "CancellationReasons": [{"Code": "None"}, {"Code": "TransactionConflict"}],
        },
        "TransactWriteItems",
    )


def _expire(table: str, email: str, at: int) -> None:
    pk, sk = keys.pending_key(email)
    client("dynamodb").update_item(
        TableName=table,
        Key=key(pk, sk),
        UpdateExpression="SET expires_at = :t",
        ExpressionAttributeValues=values(t=at),
    )


# ----- the sign-up counters -------------------------------------------------------------------
def test_a_new_sign_up_is_counted_once_however_often_it_is_repeated(ctx, resources, outbox):
    table = resources.tables["table_name"]
    assert _counts(resources) == SignupCounts()

    # Given one sign-up whose confirmation mail went out
    assert signup(_request(), ctx, now=T0).action == "pending"
    assert _counts(resources) == SignupCounts(signups=1)

    # When the same address signs up again within the cooldown (twice), then after it (the
    # sign-up is live: a second mail of the same sign-up)
    assert [signup(_request(), ctx, now=T0 + timedelta(minutes=m)).action for m in (1, 2)] == [
        "cooldown",
        "cooldown",
    ]
    assert signup(_request(), ctx, now=T0 + timedelta(hours=2)).action == "pending"
    assert len(outbox) == 2

    # Then it is still one sign-up
    assert _counts(resources) == SignupCounts(signups=1)

    # and once it expired, a new sign-up of the address counts again
    _expire(table, ADDRESS, int((T0 + timedelta(hours=3)).timestamp()))
    assert signup(_request(), ctx, now=T0 + timedelta(hours=4)).action == "pending"
    assert _counts(resources) == SignupCounts(signups=2)


def test_a_confirmation_is_counted_once_and_gives_the_rate(ctx, resources, outbox):
    signup(_request(), ctx, now=T0)
    token = _confirm_token(outbox[0])

    first = confirm(token, ctx, requester=Requester(IP), now=T0 + timedelta(minutes=5))
    again = confirm(token, ctx, requester=Requester(IP), now=T0 + timedelta(minutes=6))

    assert (first.status, again.status) == ("confirmed", "already_confirmed")
    counts = _counts(resources)
    assert counts == SignupCounts(signups=1, confirmed=1)
    assert counts.confirmation_rate == 1.0
    assert counts.public() == {"signups": 1, "confirmed": 1, "confirmation_rate": 1.0, "single_opt_in": 0}
    # a second address that never confirms halves the rate
    signup(_request(email="grace@example.com"), ctx, now=T0)
    assert _counts(resources).confirmation_rate == 0.5


def test_a_single_opt_in_is_counted_once_and_not_as_a_confirmation(ctx, resources, outbox):
    single = replace(ctx, config=replace(ctx.config, single_opt_in_forms=frozenset({"crm"})))
    actions = [signup(_request(form="crm"), single, now=T0 + timedelta(minutes=m)).action for m in (0, 1)]
    assert actions == ["subscribed", "already_subscribed"]
    assert _counts(resources) == SignupCounts(single_opt_in=1)
    assert _counts(resources).confirmation_rate is None


def test_a_mail_that_could_not_go_out_is_not_counted_until_its_redelivery_sends_it(ctx, resources, outbox):
    queue = ctx.queue
    queue.send_ctx = replace(ctx.send, ses=_Throttled("mailstep"))
    assert signup(_request(), ctx, now=T0).action == "pending"
    # nothing was sent for it yet: the job stays queued, nothing counted
    assert outbox == [] and len(queue.held) == 1
    assert _counts(resources) == SignupCounts()

    # the redelivery sends it and counts it; a duplicate delivery of the same job neither
    queue.send_ctx = ctx.send
    job = queue.held[0]
    assert [o.status for o in queue.redeliver(T0 + timedelta(minutes=1))] == ["sent"]
    assert queue.deliver(job, T0 + timedelta(minutes=2)).status == "skipped"
    assert len(outbox) == 1 and _counts(resources) == SignupCounts(signups=1)


def test_a_mailed_new_sign_up_is_counted_once_and_its_claim_dropped(resources):
    table = resources.tables["table_name"]
    pending = PendingSignups(table)
    signup_ = PendingSignup(
        email=ADDRESS, signup_id="1", form="default", created_at="", expires_at=2**31, last_mail_at=1
    )
    client("dynamodb").put_item(TableName=table, Item=serialize(signup_.to_item(uncounted=True)))
    claim_key = key(keys.sub_pk(ADDRESS), keys.send_claim_sk("signup", signup_.step))
    client("dynamodb").put_item(TableName=table, Item={**claim_key, "state": {"S": "sending"}})

    pending.sent(signup_, "signup", at="2026-03-02T09:00:00.000Z")
    pending.sent(signup_, "signup", at="2026-03-02T09:00:01.000Z")

    assert client("dynamodb").get_item(TableName=table, Key=claim_key).get("Item") is None
    assert _counts(resources) == SignupCounts(signups=1)
    stored = pending.get(ADDRESS, now=0)
    assert stored is not None and stored.mailed


class _Contended:
    """A DynamoDB client whose first ``times`` transactions a concurrent writer cancels."""

    def __init__(self, times: int) -> None:
        self.real = client("dynamodb")
        self.left = times
        self.transactions = 0

    def transact_write_items(self, **kwargs: Any) -> Any:
        self.transactions += 1
        if self.left:
            self.left -= 1
            raise _conflict()
        return self.real.transact_write_items(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def test_a_confirmation_whose_counter_was_contended_is_written_again_once(ctx, resources, outbox):
    signup(_request(), ctx, now=T0)
    flaky = _Contended(times=2)
    store = SubscriberStore(
        resources.tables["table_name"], resources.tables["events_table_name"], client=flaky
    )
    contended_ctx = replace(ctx, store=store)

    result = confirm(
        _confirm_token(outbox[0]), contended_ctx, requester=Requester(IP), now=T0 + timedelta(minutes=1)
    )

    assert result.status == "confirmed" and (flaky.transactions, flaky.left) == (3, 0)
    assert ctx.store.get_profile(ADDRESS).status == "subscribed"  # type: ignore[union-attr]
    assert _counts(resources) == SignupCounts(signups=1, confirmed=1)


def test_only_a_cancellation_by_a_concurrent_transaction_is_retried():
    assert contended(_conflict())
    condition = ClientError(
        {
            "Error": {"Code": "TransactionCanceledException", "Message": "x"},
            "CancellationReasons": [{"Code": "ConditionalCheckFailed"}, {"Code": "TransactionConflict"}],
        },
        "TransactWriteItems",
    )
    assert not contended(condition)
    assert not contended(ClientError({"Error": {"Code": "ValidationException"}}, "TransactWriteItems"))

    calls: list[int] = []

    def write() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise _conflict()
        return "done"

    assert retry_contended(write, sleep=lambda _: None) == "done" and len(calls) == 3
    with pytest.raises(ClientError):
        retry_contended(lambda: (_ for _ in ()).throw(condition), sleep=lambda _: None)

    def always() -> None:
        raise _conflict()

    with pytest.raises(ConcurrentModification):
        retry_contended(always, sleep=lambda _: None)


# ----- topics -----------------------------------------------------------------------------------
def _reader(store: SubscriberStore, email: str, **fields: Any) -> None:
    store.mutate(email, lambda current, now: replace(current or Profile(email=email), **fields))


def _admin(store: SubscriberStore, resources: Any) -> TopicAdmin:
    return TopicAdmin(store, PendingSignups(resources.tables["table_name"]), CATALOG, data_ttl_days=30)


def test_topic_counts_follow_the_one_rule_over_subscribed_unsuppressed_readers(store, resources):
    _reader(store, "a@example.com")  # defaults: product-updates on, newsletter off
    _reader(store, "b@example.com", topics_in=frozenset({"newsletter"}))
    _reader(store, "c@example.com", topics_out=frozenset({"product-updates"}))
    _reader(store, "d@example.com", topics_in=frozenset({"newsletter", "product-updates"}))
    _reader(store, "gone@example.com", status="unsubscribed", topics_in=frozenset({"newsletter"}))
    _reader(store, "bounced@example.com", suppressed=True, topics_in=frozenset({"newsletter"}))
    store.add_to_counter("onboarding", "send")  # other items of the table are not readers

    counts = _admin(store, resources).counts()

    assert counts.public() == {
        "subscribers": 4,
        "topics": [
            {
                "id": "product-updates",
                "name": "Product updates",
                "default": "on",
                "receiving": 3,
                "opted_in": 1,
                "opted_out": 1,
            },
            {
                "id": "newsletter",
                "name": "Newsletter",
                "default": "off",
                "receiving": 2,
                "opted_in": 2,
                "opted_out": 0,
            },
        ],
    }


def test_a_readers_topics_say_what_they_receive_and_why(store, resources):
    _reader(store, "a@example.com", topics_out=frozenset({"product-updates", "retired-topic"}))

    shown = _admin(store, resources).subscriber(" a@EXAMPLE.com ")

    assert [(t.topic.id, t.receives, t.source) for t in shown.topics] == [
        ("product-updates", False, CHOICE),
        ("newsletter", False, DEFAULT),
    ]
    assert shown.public()["undeclared"] == {"in": [], "out": ["retired-topic"]}
    with pytest.raises(SubscriberNotFound):
        _admin(store, resources).subscriber("nobody@example.com")


def test_an_operator_change_touches_only_the_named_topics_and_records_one_event(store, resources):
    events_table = resources.tables["events_table_name"]
    _reader(store, "a@example.com")
    admin = _admin(store, resources)

    changed = admin.change("a@example.com", ["newsletter"], [])
    again = admin.change("a@example.com", ["newsletter"], [])

    assert changed.changed is True and again.changed is False
    assert [(t.topic.id, t.receives, t.source) for t in changed.topics] == [
        ("product-updates", True, DEFAULT),  # untouched: still follows its default
        ("newsletter", True, CHOICE),
    ]
    profile = store.get_profile("a@example.com")
    assert profile is not None and (profile.topics_in, profile.topics_out) == (
        frozenset({"newsletter"}),
        frozenset(),
    )
    events = [e for e in scan_all(events_table) if e.get("type") == PREFERENCES_EVENT]
    assert len(events) == 1
    assert events[0]["origin"] == "operator"
    assert events[0]["data"] == {"topics_in": ["newsletter"], "topics_out": []}

    off = admin.change("a@example.com", [], ["newsletter", "product-updates"])
    assert [t.receives for t in off.topics] == [False, False]
    assert [t.source for t in off.topics] == [CHOICE, CHOICE]


@pytest.mark.parametrize(
    ("on", "off", "named"),
    [
        (["casino"], [], "'casino'"),
        (["newsletter"], ["casino", "poker"], "'casino', 'poker'"),
        (["newsletter"], ["newsletter"], "newsletter"),
        ([], [], "nothing to change"),
    ],
)
def test_a_bad_change_names_the_problem_and_writes_nothing(store, resources, on, off, named):
    _reader(store, "a@example.com")
    before = scan_all(resources.tables["table_name"]), scan_all(resources.tables["events_table_name"])

    with pytest.raises(InvalidInput) as raised:
        _admin(store, resources).change("a@example.com", on, off)

    assert named in str(raised.value)
    if on == ["casino"]:
        assert "declared: product-updates, newsletter" in str(raised.value)
    after = scan_all(resources.tables["table_name"]), scan_all(resources.tables["events_table_name"])
    assert after == before


def test_a_change_for_an_unknown_address_writes_nothing(store, resources):
    with pytest.raises(SubscriberNotFound):
        _admin(store, resources).change("nobody@example.com", ["newsletter"], [])
    assert scan_all(resources.tables["table_name"]) == []


def test_the_preference_centre_saves_the_whole_choice_through_the_same_write(store, resources):
    events_table = resources.tables["events_table_name"]
    _reader(store, "a@example.com", topics_in=frozenset({"product-updates"}))

    assert save_choices("a@example.com", frozenset({"newsletter"}), store, CATALOG) is True
    assert save_choices("a@example.com", frozenset({"newsletter"}), store, CATALOG) is False

    profile = store.get_profile("a@example.com")
    assert profile is not None
    assert (profile.topics_in, profile.topics_out) == (
        frozenset({"newsletter"}),
        frozenset({"product-updates"}),
    )
    events = [e for e in scan_all(events_table) if e.get("type") == PREFERENCES_EVENT]
    assert [(e["origin"], e["data"]) for e in events] == [
        ("preferences", {"topics_in": ["newsletter"], "topics_out": ["product-updates"]})
    ]
    with pytest.raises(SubscriberNotFound):
        change_topics("nobody@example.com", ["newsletter"], [], store, CATALOG)


# ----- pending sign-ups -------------------------------------------------------------------------
def test_pending_sign_ups_are_the_live_ones_newest_first(ctx: ConsentContext, store, resources, outbox):
    table = resources.tables["table_name"]
    for minutes, email in enumerate(["p1@example.com", "p2@example.com", "p3@example.com"]):
        signup(_request(email=email, topics=["newsletter"]), ctx, now=T0 + timedelta(minutes=minutes))
    # p2 expired (DynamoDB TTL has not deleted it: the item is still there)
    _expire(table, "p2@example.com", int((T0 + timedelta(minutes=30)).timestamp()))
    admin = _admin(store, resources)

    page = admin.pending(now=T0 + timedelta(hours=1))

    assert page.total == 2
    assert page.public()["pending"] == [
        {
            "email": "p3@example.com",
            "form": "default",
            "created_at": "2026-03-02T09:02:00.000Z",
            "expires_at": "2026-03-09T09:02:00.000Z",
            "last_mail_at": "2026-03-02T09:02:00.000Z",
            "topics": ["newsletter"],
        },
        {
            "email": "p1@example.com",
            "form": "default",
            "created_at": "2026-03-02T09:00:00.000Z",
            "expires_at": "2026-03-09T09:00:00.000Z",
            "last_mail_at": "2026-03-02T09:00:00.000Z",
            "topics": ["newsletter"],
        },
    ]
    assert [p.email for p in admin.pending(limit=1, now=T0 + timedelta(hours=1)).signups] == [
        "p3@example.com"
    ]
    assert admin.pending(now=T0 + timedelta(days=8)).total == 0
    with pytest.raises(InvalidInput):
        admin.pending(limit=0)
