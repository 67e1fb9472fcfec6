"""The engagement consumer on moto: dedup, counters, uniques, suppression, batch policy."""

from __future__ import annotations

import copy
import importlib
import json
import random
import uuid
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from local_aws.apigw import LambdaContext
from local_aws.provision import LocalResources
from shared.core.aws import client, register_hook, unregister_hook
from shared.core.settings import Settings
from shared.engagement.consumer import EngagementContext, process_body
from shared.engagement.suppression import Suppressions
from shared.sending.jobs import SendJob
from shared.sending.pipeline import SendContext, send
from shared.sending.sender import encode_tag_value
from shared.sequences.engine import SequenceEngine
from shared.sequences.validate import Catalog
from shared.store.stats import NOT_RECOUNTED, Counters, StatsStore
from shared.store.subscribers import SubscriberStore, keys
from tests.integration.conftest import fold_stream, scan_all, sqs_record

FIXTURES = Path(__file__).resolve().parents[1] / "unit" / "fixtures" / "ses"
ALL = sorted(p.stem for p in FIXTURES.glob("*.json"))
EMAIL = "recipient@example.com"


def arn(sequence: str, run: str = "r1") -> str:
    return f"arn:aws:states:us-east-1:123456789012:execution:mailstep-seq-{sequence}:{run}"


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def sns(record: dict[str, Any], message_id: str | None = None) -> str:
    return json.dumps(
        {"Type": "Notification", "MessageId": message_id or str(uuid.uuid4()), "Message": json.dumps(record)}
    )


def event(
    kind: str,
    *,
    email: str = EMAIL,
    message_id: str = "m-1",
    template: str = "onboarding/welcome",
    source: str = "onboarding",
    at: str = "2026-01-01T10:00:00.000Z",
    **changes: Any,
) -> dict[str, Any]:
    """A documented fixture re-addressed to ``email`` and tagged like the send pipeline tags."""
    record = copy.deepcopy(fixture(kind))
    mail = record["mail"]
    mail["messageId"], mail["destination"] = message_id, [email]
    mail["tags"].update({"template": [encode_tag_value(template)], "source": [encode_tag_value(source)]})
    body = next(k for k in record if k not in ("eventType", "mail"))
    for field in ("bouncedRecipients", "complainedRecipients", "delayedRecipients"):
        if field in record[body]:
            record[body][field] = [{**record[body][field][0], "emailAddress": email}]
    if "recipients" in record[body]:
        record[body]["recipients"] = [email]
    if "timestamp" in record[body]:
        record[body]["timestamp"] = at
    record[body].update(changes)
    return record


class Stopper:
    def __init__(self, engine: SequenceEngine) -> None:
        self.engine, self.fail = engine, False
        self.calls: list[tuple[str, str, bool]] = []

    def stop_all(self, email: str, *, reason: str, transactional_too: bool = True) -> list[str]:
        self.calls.append((email, reason, transactional_too))
        if self.fail:
            raise RuntimeError("crash while stopping")
        return self.engine.stop_all(email, reason=reason, transactional_too=transactional_too)


@pytest.fixture
def stopper(store: SubscriberStore) -> Stopper:
    return Stopper(SequenceEngine(catalog=Catalog(), arn_prefix="", store=store))


@pytest.fixture
def ctx(store: SubscriberStore, stopper: Stopper) -> EngagementContext:
    return EngagementContext(
        store=store, suppressions=Suppressions(store, stopper), data_ttl_days=30, stopper=stopper
    )


@pytest.fixture
def stats(store: SubscriberStore) -> StatsStore:
    return StatsStore(store.table, store.events_table)


def event_counts(counters: Counters) -> tuple[dict[str, int], dict[str, int]]:
    """Totals and uniques of the metrics the events indexes can recount (``send`` is counted by
    the send path, a Delivery is not indexed)."""
    return {m: n for m, n in counters.totals.items() if m not in NOT_RECOUNTED}, counters.uniques


def snapshot(store: SubscriberStore) -> list[Any]:
    def rows(table: str) -> list[Any]:
        return sorted(json.dumps(i, sort_keys=True, default=str) for i in scan_all(table))

    return [rows(store.table), rows(store.events_table)]


@pytest.mark.parametrize("name", ALL)
def test_each_fixture_delivered_three_times_changes_state_once(
    name: str, ctx: EngagementContext, store: SubscriberStore
) -> None:
    store.upsert(EMAIL, first_name="Ada")
    record = event(name)
    before = snapshot(store)
    first = process_body(sns(record), ctx)
    after_first = snapshot(store)
    assert first.recorded == 1 and after_first != before
    # SQS redelivery (same body), then SNS delivering the same SES event under a new MessageId
    again = [process_body(sns(record, "same-sns-id"), ctx), process_body(json.dumps(record), ctx)]
    assert [o.status for o in again] == ["duplicate", "duplicate"]
    assert snapshot(store) == after_first
    events = store.list_events(EMAIL)
    assert len(events) == 1
    assert events[0]["template"] == "onboarding/welcome" and events[0]["source"] == "onboarding"
    assert events[0]["ttl"] > 0 and events[0]["origin"] == "ses"


def test_two_opens_of_one_mail_count_total_two_unique_one(ctx: EngagementContext, stats: StatsStore) -> None:
    process_body(sns(event("open", at="2026-01-01T10:00:00.000Z")), ctx)
    process_body(sns(event("open", at="2026-01-01T11:00:00.000Z")), ctx)
    counters = stats.source("onboarding")
    assert counters.total("open") == 2 and counters.unique("open") == 1
    assert stats.template("onboarding/welcome").unique("open") == 1
    # another subscriber's open is a new unique; a click is its own metric
    process_body(sns(event("open", email="b@example.com", message_id="m-2")), ctx)
    process_body(sns(event("click", email="b@example.com", message_id="m-2")), ctx)
    counters = stats.source("onboarding")
    assert (counters.total("open"), counters.unique("open")) == (3, 2)
    assert (counters.total("click"), counters.unique("click")) == (1, 1)


def test_the_first_open_of_another_template_is_unique_per_template_not_per_source(
    ctx: EngagementContext, stats: StatsStore
) -> None:
    process_body(sns(event("open", template="onboarding/welcome")), ctx)
    process_body(sns(event("open", message_id="m-2", template="onboarding/tips")), ctx)
    assert stats.source("onboarding").unique("open") == 1
    assert stats.template("onboarding/welcome").unique("open") == 1
    assert stats.template("onboarding/tips").unique("open") == 1


def random_event(rng: random.Random, kinds: list[str], *, at: str) -> dict[str, Any]:
    """One SES event of a random kind, subscriber (of 6), mail (of 10), template and source."""
    kind = rng.choice(kinds)
    changes = {"bounceType": rng.choice(["Permanent", "Transient"])} if kind == "bounce" else {}
    return event(
        kind,
        email=f"s{rng.randrange(6)}@example.com",
        message_id=f"m-{rng.randrange(10)}",
        template=rng.choice(["onboarding/welcome", "onboarding/tips"]),
        source=rng.choice(["onboarding", "spring-sale"]),
        at=at,
        **changes,
    )


def test_stats_equal_counts_recomputed_from_the_events_table(
    ctx: EngagementContext, stats: StatsStore, resources: LocalResources
) -> None:
    rng = random.Random(7)
    kinds = ["send", "delivery", "open", "open", "click", "bounce", "complaint", "delivery-delay", "reject"]
    for n in range(60):
        record = random_event(rng, kinds, at=f"2026-01-01T10:{n:02d}:00.000Z")
        for _ in range(rng.choice([1, 1, 2])):  # some redelivered
            process_body(sns(record), ctx)
    assert fold_stream(resources).events > 0  # the Deliveries, counted by the stats fold
    for source in ("onboarding", "spring-sale"):
        assert event_counts(stats.source(source)) == event_counts(stats.recompute(source=source))
        assert stats.source(source).total("delivery") > 0 and stats.source(source).unique("open")
        assert stats.recompute(source=source).totals.get("delivery") is None  # not indexed
    for template in ("onboarding/welcome", "onboarding/tips"):
        assert event_counts(stats.template(template)) == event_counts(stats.recompute(template=template))
    assert set(stats.sources()) == {"onboarding", "spring-sale"}
    since = stats.recompute(source="onboarding", since="2026-01-01T10:30")
    assert sum(since.totals.values()) < sum(stats.source("onboarding").totals.values())
    # the day counters repeat every source's counts: the events fall on 2026-01-01 (but the
    # Rejects, whose time is their mail's: a Reject object has no timestamp of its own)
    day_before, day, day_after = stats.daily(date(2025, 12, 31), 3)
    sources = [stats.source(s) for s in ("onboarding", "spring-sale")]
    assert day_before == day_after == {}
    metrics = set().union(*(c.totals for c in sources)) - {"reject"}
    assert {m: n for m, n in day.items() if not m.endswith("_unique")} == {
        m: sum(c.total(m) for c in sources) for m in metrics
    }
    assert day["open_unique"] == sum(c.uniques.get("open", 0) for c in sources) > 0


@pytest.mark.parametrize(("kind", "reason"), [("bounce", "bounce"), ("complaint", "complaint")])
def test_permanent_bounce_or_complaint_suppresses_stops_executions_and_later_sends_skip(
    kind: str, reason: str, ctx: EngagementContext, store: SubscriberStore, send_ctx: SendContext
) -> None:
    store.upsert(EMAIL)
    store.put_execution(EMAIL, "onboarding", arn("onboarding"))
    store.put_execution(EMAIL, "receipts", arn("receipts"), transactional=True)
    process_body(sns(event(kind)), ctx)
    profile = store.get_profile(EMAIL)
    assert profile is not None and profile.suppressed
    assert store.list_executions(EMAIL) == []  # transactional ones too
    record = ctx.suppressions.get(EMAIL)
    assert record is not None and record.reason == reason and record.source == "onboarding"
    assert [s.email for s in ctx.suppressions.list()] == [EMAIL]
    outcome = send(SendJob(email=EMAIL, template="onboarding/welcome", source="spring-sale"), send_ctx)
    assert (outcome.status, outcome.reason) == ("skipped", "suppressed")


def test_transient_bounces_and_delays_are_only_counted(
    ctx: EngagementContext, store: SubscriberStore, stats: StatsStore
) -> None:
    store.upsert(EMAIL)
    process_body(sns(event("bounce", bounceType="Transient", bounceSubType="MailboxFull")), ctx)
    process_body(sns(event("delivery-delay")), ctx)
    profile = store.get_profile(EMAIL)
    assert profile is not None and not profile.suppressed
    counters = stats.source("onboarding")
    assert counters.total("bounce_transient") == 1 and counters.total("delivery_delay") == 1
    assert counters.total("bounce") == 0


def test_a_crash_while_suppressing_is_repaired_by_the_redelivery(
    ctx: EngagementContext, store: SubscriberStore, stopper: Stopper, stats: StatsStore
) -> None:
    store.upsert(EMAIL)
    store.put_execution(EMAIL, "onboarding", arn("onboarding"))
    body = sns(event("bounce"))
    stopper.fail = True
    with pytest.raises(RuntimeError):
        process_body(body, ctx)
    profile = store.get_profile(EMAIL)
    assert profile is not None and profile.suppressed  # the gate closed first
    assert store.list_events(EMAIL) == [] and stats.source("onboarding").total("bounce") == 0
    stopper.fail = False
    assert process_body(body, ctx).status == "recorded"
    assert store.list_executions(EMAIL) == []
    assert stats.source("onboarding").total("bounce") == 1


def test_untagged_events_correlate_through_the_send_log(
    ctx: EngagementContext, store: SubscriberStore
) -> None:
    store.upsert(EMAIL)
    store.client.put_item(
        TableName=store.table,
        Item={
            "PK": {"S": keys.sub_pk(EMAIL)},
            "SK": {"S": keys.sent_sk("2026-01-01T09:59:00.000Z", "spring-sale", "abc")},
            "template": {"S": "sale/spring"},
            "source": {"S": "spring-sale"},
            "send_id": {"S": "abc"},
            "ses_message_id": {"S": "m-1"},
        },
    )
    record = event("delivery")
    record["mail"]["tags"] = {"ses:configuration-set": ["mailstep"], "template": ["not a key!"]}
    outcome = process_body(sns(record), ctx)
    assert outcome.correlated_via == ["sent_log"]
    (item,) = [e for e in store.list_events(EMAIL) if e["type"] != "send"]  # not the log itself
    assert (item["template"], item["source"], item["send_id"]) == ("sale/spring", "spring-sale", "abc")


def test_an_ses_unsubscribe_unsubscribes_and_stops_marketing_only(
    ctx: EngagementContext, store: SubscriberStore
) -> None:
    store.upsert(EMAIL)
    store.put_execution(EMAIL, "onboarding", arn("onboarding"))
    store.put_execution(EMAIL, "receipts", arn("receipts"), transactional=True)
    process_body(sns(event("subscription")), ctx)
    profile = store.get_profile(EMAIL)
    assert profile is not None and profile.status == "unsubscribed" and not profile.suppressed
    assert [e.sequence_id for e in store.list_executions(EMAIL)] == ["receipts"]


# ----- the Lambda handler: partial batch responses --------------------------------------------
def _sqs(body: str) -> dict[str, Any]:
    return sqs_record(body, "mailstep-engagement")


@pytest.fixture
def handler(resources: LocalResources, monkeypatch: pytest.MonkeyPatch) -> Any:
    for name, value in resources.env().items():
        monkeypatch.setenv(name, value)
    return importlib.reload(importlib.import_module("functions.engagement.handler"))


def test_a_mixed_batch_fails_only_the_malformed_records(handler: Any, store: SubscriberStore) -> None:
    unknown_tags = event("open", email="t@example.com")
    unknown_tags["mail"]["tags"] = {"template": ["%%%"], "source": ["Robert');DROP"], "campaign": ["x"]}
    new_type = event("send")
    new_type["eventType"] = "SomethingNewFromSes"
    records = [
        _sqs(sns(event("delivery"))),
        _sqs("{not json"),
        _sqs(sns({"eventType": "Open", "open": {"timestamp": "2026-01-01T10:00:00.000Z"}})),  # no mail
        _sqs(sns(unknown_tags)),
        _sqs(json.dumps(event("click", email="raw@example.com"))),  # raw message delivery
        _sqs(sns(new_type)),
    ]
    result = handler.handler({"Records": records}, LambdaContext("engagement"))
    failed = [f["itemIdentifier"] for f in result["batchItemFailures"]]
    assert failed == [records[1]["messageId"], records[2]["messageId"]]
    assert [e["type"] for e in store.list_events(EMAIL)] == ["delivery"]
    (untagged,) = store.list_events("t@example.com")
    assert "template" not in untagged and "source" not in untagged
    assert [e["type"] for e in store.list_events("raw@example.com")] == ["click"]


def test_settings_build_a_working_context(resources: LocalResources) -> None:
    settings = Settings.from_env(resources.env())
    ctx = EngagementContext.from_settings(settings)
    assert ctx.store.table == resources.tables["table_name"] and ctx.data_ttl_days == settings.data_ttl_days
    assert client("dynamodb") is ctx.store.client


@pytest.mark.parametrize("batched", [False, True], ids=["one-by-one", "batch"])
def test_ses_events_after_an_erase_leave_nothing_naming_the_address_and_resubscribing_works(
    ctx: EngagementContext, store: SubscriberStore, batched: bool
) -> None:
    from shared.engagement.consumer import EngagementBatch

    # Given a subscriber who got a mail and was then erased
    store.upsert(EMAIL, add_tags=["pro"])
    process_body(sns(event("delivery")), ctx)
    store.erase(EMAIL)
    assert not [
        i
        for t in (store.table, store.events_table)
        for i in scan_all(t)
        if EMAIL in json.dumps(i, default=str)
    ]

    # When that mail's later SES events arrive (an open, a click, a complaint, a delivery again)
    late = [sns(event(kind, at=f"2026-01-02T10:00:0{n}.000Z")) for n, kind in enumerate(KINDS_AFTER_ERASE)]
    if batched:
        batch = EngagementBatch(ctx)
        batch.preload(late)
        outcomes = [batch.add(f"r{n}", body) for n, body in enumerate(late)]
        assert all(r.error is None for r in batch.flush())
    else:
        outcomes = [process_body(body, ctx) for body in late]

    # Then nothing in either table names the address (no event, marker, suppression, profile)
    assert [o.skipped_recipients for o in outcomes] == [1] * len(late)
    assert not [
        i
        for t in (store.table, store.events_table)
        for i in scan_all(t)
        if EMAIL in json.dumps(i, default=str)
    ]
    # and the address can subscribe again, after which its events count as before
    store.upsert(EMAIL)
    assert process_body(sns(event("open", at="2026-01-03T10:00:00.000Z")), ctx).status == "recorded"


KINDS_AFTER_ERASE = ("open", "click", "complaint", "delivery")


def test_the_erase_check_reads_each_recipient_s_tombstone_and_a_profile_only_behind_one(
    store: SubscriberStore,
) -> None:
    # Given subscribers, an erased address, and one erased then subscribed again
    for email in ("a@example.com", "b@example.com", "back@example.com"):
        store.upsert(email)
    store.remember_erased("gone@example.com")
    store.remember_erased("back@example.com")
    keys_read: list[list[str]] = []

    def hook(params: dict[str, Any], **_: Any) -> None:
        for request in params.get("RequestItems", {}).values():
            keys_read.append(sorted(k["PK"]["S"].split("#")[0] + "#" + k["SK"]["S"] for k in request["Keys"]))

    event = "provide-client-params.dynamodb.BatchGetItem"
    register_hook(event, hook)
    try:
        erased = store.erased_among(
            ["a@example.com", "b@example.com", "gone@example.com", "back@example.com"]
        )
    finally:
        unregister_hook(event, hook)

    # Then only the address erased and not back counts as erased
    assert erased == {"gone@example.com"}
    # and the reads were the four tombstones, then the profiles of the two that have one
    assert keys_read == [["ERASED#ERASED"] * 4, ["SUB#PROFILE"] * 2]
