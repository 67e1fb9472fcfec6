"""Broadcast audiences on engagement, and the resend to non-openers, on moto through the real
resolver handler and the real engagement consumer.

Given twelve readers of a broadcast, some of whom opened or clicked it as people, one whose
mail only Apple's prefetch opened, and some who engaged with a sequence's mail long ago or
recently (by machine), when an audience names an engagement condition, then the dry run and
the resolved (sent) audience are both exactly the readers the test's own table says, people
only unless machine opens count; a resend goes to the readers who did not open as people,
minus whoever unsubscribed since, once each even with every resolve message delivered twice,
and a second resend is refused.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from local_aws.provision import LocalResources
from ops.broadcasts import Broadcasts
from shared.broadcasts.audience import AudienceResolver
from shared.broadcasts.fanout import resolve_step
from shared.broadcasts.model import DONE, SCHEDULED, parse_request, parse_resolve
from shared.broadcasts.records import ResendExists
from shared.core import clock
from shared.core.aws import client, register_hook, unregister_hook
from shared.core.errors import InvalidInput
from shared.core.specs import ENV
from shared.engagement.consumer import EngagementContext, process_body
from shared.engagement.machine import MPP_USER_AGENT
from shared.engagement.suppression import Suppressions
from shared.store.dynamo import serialize
from shared.store.hygiene import engagement_item
from shared.store.subscribers import SubscriberStore
from tests.integration.broadcast_support import Env
from tests.integration.resolver_support import batch_emails, deliver
from tests.integration.test_engagement import event, sns

TEMPLATE = "newsletter/monthly"
ORIGINAL = "spring"
SEQUENCE = "onboarding"
READERS = [f"eng{i:02d}@example.com" for i in range(12)]
# Who did what, as the test knows it (readers 6-11 did nothing)
OPENED = {READERS[0], READERS[1]}  # opened the broadcast as people
MACHINE_OPENED = {READERS[2]}  # only Apple's prefetch opened it
CLICKED = {READERS[3]}  # clicked (no open recorded)
OLD_SEQUENCE_OPEN = {READERS[4]}  # opened a sequence mail 40 days ago
MACHINE_SEQUENCE_OPEN = {READERS[5]}  # a machine opened a sequence mail 2 days ago
UNSUBSCRIBED_SINCE = READERS[11]  # unsubscribes after the broadcast


def ago(days: float) -> str:
    return clock.iso(clock.utc_now() - timedelta(days=days))


@pytest.fixture
def service(env: Env) -> Broadcasts:
    """The broadcast service with pages of 3 recipients, reading the events table too."""
    resolver = AudienceResolver(env.table, page_size=3, events_table=env.events_table)
    return dataclasses.replace(env.service, resolver=resolver)


@pytest.fixture
def resolver(env: Env, resources: LocalResources, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The resolver Lambda's handler as deployed (its environment names the events table), with
    pages of 3 recipients."""
    for name, value in resources.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(ENV["broadcast_queue_url"], env.queues.batch_url)
    monkeypatch.setenv(ENV["broadcast_control_queue_url"], env.queues.control_url)
    module = importlib.reload(importlib.import_module("functions.broadcast_resolver.handler"))
    assert module.context.resolver.events_table == env.events_table
    module.context.resolver.page_size = 3
    yield module


@pytest.fixture
def engaged(env: Env, store: SubscriberStore, service: Broadcasts) -> None:
    """The broadcast sent to the twelve readers (tag ``eng``), then their engagement written by
    the engagement consumer from SES events."""
    for email in READERS:
        store.upsert(email, add_tags=["eng"])
        # subscribed 90 days ago: the engagement item's starting point (shared.store.hygiene)
        item = engagement_item(email, ago(90))
        client("dynamodb").put_item(TableName=env.events_table, Item=serialize(item))
    request = parse_request(id=ORIGINAL, template=TEMPLATE, audience={"tags": ["eng"]})
    assert service.send(request).created
    env.resolve_all()
    env.work(env.batches())
    assert sorted(env.ses.recipients()) == READERS

    ctx = EngagementContext(store=store, suppressions=Suppressions(store))

    def ses_event(kind: str, email: str, source: str, at: str, **changes: Any) -> None:
        template = TEMPLATE if source == ORIGINAL else "onboarding/welcome"
        record = event(kind, email=email, source=source, template=template, message_id=f"m-{email}-{source}",
                       at=at, **changes)  # fmt: skip
        process_body(sns(record), ctx)

    for email in OPENED:
        ses_event("open", email, ORIGINAL, ago(2))
    for email in MACHINE_OPENED:
        ses_event("open", email, ORIGINAL, ago(2), userAgent=MPP_USER_AGENT)
    for email in CLICKED:
        ses_event("click", email, ORIGINAL, ago(2))
    for email in OLD_SEQUENCE_OPEN:
        ses_event("open", email, SEQUENCE, ago(40))
    for email in MACHINE_SEQUENCE_OPEN:
        ses_event("open", email, SEQUENCE, ago(2), userAgent=MPP_USER_AGENT)


def sent_audience(
    env: Env, service: Broadcasts, resolver: Any, broadcast_id: str, **audience: Any
) -> set[str]:
    """The audience the resolver hands to the workers, every resolve message delivered twice."""
    request = parse_request(id=broadcast_id, template=TEMPLATE, audience={"tags": ["eng"], **audience})
    assert service.send(request).created
    deliver(env, resolver, times=2)
    _, emails = batch_emails(env)
    assert service.get(broadcast_id).audience_size == len(set(emails))  # counted once
    return set(emails)


EVERYONE = set(READERS)
HUMAN_RECENT = OPENED | CLICKED
MACHINE_RECENT = MACHINE_OPENED | MACHINE_SEQUENCE_OPEN
CASES = [
    ({"opened": [ORIGINAL]}, OPENED | CLICKED),  # a click shows the mail was read
    ({"opened": [ORIGINAL], "machine_opens": True}, OPENED | CLICKED | MACHINE_OPENED),
    ({"clicked": [ORIGINAL]}, CLICKED),
    ({"not_opened": [ORIGINAL]}, EVERYONE - OPENED - CLICKED),
    ({"not_opened": [ORIGINAL], "machine_opens": True}, EVERYONE - OPENED - CLICKED - MACHINE_OPENED),
    ({"opened": [SEQUENCE]}, OLD_SEQUENCE_OPEN),
    ({"engaged_within_days": 7}, HUMAN_RECENT),
    ({"engaged_within_days": 60}, HUMAN_RECENT | OLD_SEQUENCE_OPEN),
    ({"engaged_within_days": 7, "machine_opens": True}, HUMAN_RECENT | MACHINE_RECENT),
    ({"not_engaged_within_days": 7}, EVERYONE - HUMAN_RECENT),
    ({"not_engaged_within_days": 7, "machine_opens": True}, EVERYONE - HUMAN_RECENT - MACHINE_RECENT),
]


@pytest.mark.parametrize(("audience", "want"), CASES, ids=[str(c[0]) for c in CASES])
def test_each_engagement_condition_dry_run_equals_the_sent_audience(
    engaged: None, env: Env, service: Broadcasts, resolver: Any, audience: dict[str, Any], want: set[str]
) -> None:
    request = parse_request(id="preview", template=TEMPLATE, audience={"tags": ["eng"], **audience})
    size, _ = service.preview(request, sample=0)
    dry_run = set(service.resolver.iterate(request.audience))
    sent = sent_audience(env, service, resolver, "conditioned", **audience)
    assert dry_run == sent == want
    assert size == len(want)


def test_engagement_conditions_apply_to_the_everyone_scan_too(engaged: None, service: Broadcasts) -> None:
    """Without a tag the conditions apply to the "everyone" Scan's candidates alike."""
    request = parse_request(id="preview", template=TEMPLATE, audience={"opened": [ORIGINAL]})
    assert set(service.resolver.iterate(request.audience)) == OPENED | CLICKED


def test_a_tag_audience_on_engagement_reads_by_key_never_by_scan(engaged: None, service: Broadcasts) -> None:
    """People only: markers, claims and ENGAGEMENT items by key (BatchGetItem) beside the tag's
    Query; with machine opens, one Query of each candidate's own events; never a Scan."""
    seen: Counter[str] = Counter()

    def hook(model: Any, **_: Any) -> None:
        seen[model.name] += 1

    people = {"tags": ["eng"], "not_opened": [ORIGINAL], "engaged_within_days": 7}
    register_hook("before-call.dynamodb", hook)
    try:
        service.preview(parse_request(id="p", template=TEMPLATE, audience=people))
        assert set(seen) == {"Query", "BatchGetItem"} and seen["Query"] <= 5, seen
        seen.clear()
        service.preview(parse_request(id="p", template=TEMPLATE, audience={**people, "machine_opens": True}))
    finally:
        unregister_hook("before-call.dynamodb", hook)
    assert set(seen) == {"Query", "BatchGetItem"} and seen["Query"] >= len(READERS), seen


@pytest.mark.parametrize(
    ("audience", "field"),
    [
        ({"engaged_within_days": 0}, "audience.engaged_within_days"),
        ({"not_engaged_within_days": "7"}, "audience.not_engaged_within_days"),
        ({"opened": ["bad#id"]}, "audience.opened"),
        ({"opened": ["x"], "not_opened": ["x"]}, "audience"),
        ({"engaged_within_days": 60, "not_engaged_within_days": 30}, "audience"),
    ],
)
def test_a_bad_engagement_condition_is_refused_naming_its_field(audience: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_request(id="bad", template=TEMPLATE, audience=audience)
    assert any(p.field.startswith(field) for p in caught.value.problems), caught.value.problems


def test_a_resend_reaches_the_non_openers_minus_who_unsubscribed_once_and_only_once(
    engaged: None, env: Env, store: SubscriberStore, service: Broadcasts, resolver: Any
) -> None:
    store.unsubscribe(UNSUBSCRIBED_SINCE)
    later = clock.utc_now() + timedelta(days=3)  # the 48 hours have passed: it goes out at once
    answer = service.resend(ORIGINAL, after="48h", subject="In case you missed it", now=later)
    assert answer.created and answer.record.status != SCHEDULED
    assert answer.record.subject == "In case you missed it"

    deliver(env, resolver, times=2)  # every resolve message twice
    env.ses.sends.clear()
    messages, emails = batch_emails(env)
    env.work(messages)

    want = EVERYONE - OPENED - CLICKED - {UNSUBSCRIBED_SINCE}  # a machine's open is no person's
    assert set(emails) == want
    assert Counter(env.ses.recipients()) == dict.fromkeys(want, 1)
    record = service.get(answer.record.id)
    assert record.audience_size == len(want) and record.skipped.get("unsubscribed") == 1
    assert service.details(ORIGINAL)["resend"]["id"] == answer.record.id

    with pytest.raises(ResendExists):
        service.resend(ORIGINAL, after="48h", now=later)
    with pytest.raises(ResendExists):  # another id for it: still one resend per broadcast
        service.resend(ORIGINAL, after="48h", resend_id="another", now=later)
    assert service.records.get("another") is None


def test_bad_resend_options_are_refused_naming_the_option_and_write_nothing(
    engaged: None, service: Broadcasts
) -> None:
    bad = [({"after": "soon"}, "after"), ({"after": "10m"}, "after"), ({"after": "90d"}, "after"),
           ({"after": "48h", "to": "openers"}, "to")]  # fmt: skip
    for options, name in bad:
        with pytest.raises(InvalidInput) as caught:
            service.resend(ORIGINAL, **options)
        assert [p.field for p in caught.value.problems] == [name]
    assert service.records.resend_of(ORIGINAL) is None


def test_not_opened_takes_only_a_broadcast_that_exists(engaged: None, service: Broadcasts) -> None:
    for source in (SEQUENCE, "no-such-broadcast"):
        request = parse_request(id="n", template=TEMPLATE, audience={"not_opened": [source]})
        with pytest.raises(InvalidInput) as caught:
            service.check(request)
        assert [p.field for p in caught.value.problems] == ["audience.not_opened"]
    service.check(parse_request(id="n", template=TEMPLATE, audience={"not_opened": [ORIGINAL]}))


def test_a_resend_waits_until_its_original_is_finished(
    env: Env, store: SubscriberStore, service: Broadcasts
) -> None:
    """Given an original resolved but not all sent, a resend due now resolves nothing: its first
    page's message comes back delayed; once the original is done, that message resolves it."""
    for email in READERS[:4]:
        store.upsert(email, add_tags=["eng"])
    assert service.send(parse_request(id=ORIGINAL, template=TEMPLATE, audience={"tags": ["eng"]})).created
    env.resolve_all()  # resolved: its batch waits for a worker
    later = clock.utc_now() + timedelta(days=3)
    resend = service.resend(ORIGINAL, after="48h", now=later).record
    ctx = dataclasses.replace(
        env.fanout(), resolver=AudienceResolver(env.table, events_table=env.events_table)
    )
    (message,) = env.receive(env.queues.control_url, 10)
    env.delete(env.queues.control_url, message)

    waited = resolve_step(parse_resolve(message["Body"]), ctx)

    assert (waited.status, waited.wait_s) == ("waiting", 900)
    assert service.get(resend.id).page == 0 and service.get(resend.id).audience_size == 0
    depth = client("sqs").get_queue_attributes(
        QueueUrl=env.queues.control_url, AttributeNames=["ApproximateNumberOfMessagesDelayed"]
    )
    assert depth["Attributes"]["ApproximateNumberOfMessagesDelayed"] == "1"  # it comes back

    env.work(env.batches())  # the original is sent: done
    assert service.get(ORIGINAL).status == DONE
    assert resolve_step(parse_resolve(message["Body"]), ctx).status == "last_page"
    _, emails = batch_emails(env)
    assert set(emails) == set(READERS[:4])  # nobody opened


def test_the_report_lists_the_non_openers_and_the_people_s_opens_and_clicks_per_hour(
    engaged: None, env: Env, store: SubscriberStore, service: Broadcasts
) -> None:
    """The console's broadcast report: who was sent it and did not open it as a person (the
    resend's audience: whoever unsubscribed since is listed with the unsubscribes instead), all
    or the first few, and the people's opens and clicks over time (a machine's open is none)."""
    from ops.engaged import emails_csv, non_openers
    from ops.engaged import engaged as engaged_with
    from shared.store.stats import StatsStore

    store.unsubscribe(UNSUBSCRIBED_SINCE)
    want = [e for e in READERS if e not in OPENED | CLICKED | {UNSUBSCRIBED_SINCE}]
    assert list(non_openers(service.resolver, ORIGINAL)) == want  # in the pages' order
    assert list(non_openers(service.resolver, ORIGINAL, 4)) == want[:4]
    assert emails_csv(non_openers(service.resolver, ORIGINAL)).splitlines() == ["email", *want]

    over_time = engaged_with(StatsStore(env.table, env.events_table), ORIGINAL).public()["over_time"]
    assert over_time["unit"] == "hour"
    assert sum(b["open"] for b in over_time["buckets"]) == len(OPENED)
    assert sum(b["click"] for b in over_time["buckets"]) == len(CLICKED)
    assert over_time["most"] == max(max(b["open"], b["click"]) for b in over_time["buckets"])
