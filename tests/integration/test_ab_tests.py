"""A/B tests on moto (docs/broadcasts.md, "A/B tests"): the test groups get their variant, the
decision at the rest's schedule counts human opens only and is made once however often its
message comes, and the rest (its pages and batches delivered twice) reaches everyone else once:
every reader has exactly one mail across the test and the rest."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from typing import Any

import pytest

from local_aws.provision import LocalResources
from ops.broadcast_requests import ab_request, broadcast_request
from ops.broadcasts import Broadcasts
from shared.broadcasts.abtest import variant_of
from shared.broadcasts.audience import AudienceResolver
from shared.broadcasts.decide import decide_for_rest
from shared.broadcasts.model import DONE, SCHEDULED, Broadcast
from shared.broadcasts.records import ResendExists
from shared.core.errors import InvalidInput
from shared.engagement.consumer import EngagementContext, process_body
from shared.engagement.machine import MPP_USER_AGENT
from shared.engagement.suppression import Suppressions
from shared.store.subscribers import SubscriberStore
from tests.integration.broadcast_support import Env
from tests.integration.resolver_support import batch_emails, deliver, invoke, resolver_handler
from tests.integration.test_engagement import event, sns

TEMPLATE = "newsletter/monthly"
READERS = [f"ab{i:03d}@example.com" for i in range(120)]
TEST_ID = "spring-ab"


@dataclass
class FakeScheduler:
    """The schedule state machine's part: the first message it would put on the control queue
    at the send time, kept for the test to deliver when it likes (the decision time)."""

    started: dict[str, str] = field(default_factory=dict)  # execution name -> message

    def schedule(self, record: Broadcast, first_message: str) -> str:
        self.started[record.id] = first_message
        return f"arn:aws:states:us-east-1:000000000000:execution:schedule:{record.id}"

    def unschedule(self, execution_arn: str) -> bool:
        return True


@pytest.fixture
def subjects(env: Env, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """The subject of every mail SES was given, by recipient."""
    seen: dict[str, list[str]] = {}
    send = env.ses.send_email

    def send_email(**request: Any) -> dict[str, Any]:
        answer = send(**request)
        mail = message_from_bytes(request["Content"]["Raw"]["Data"], policy=policy.default)
        seen.setdefault(request["Destination"]["ToAddresses"][0], []).append(str(mail["Subject"]))
        return answer

    monkeypatch.setattr(env.ses, "send_email", send_email)
    return seen


@pytest.fixture
def scheduler() -> FakeScheduler:
    return FakeScheduler()


@pytest.fixture
def service(env: Env, scheduler: FakeScheduler) -> Broadcasts:
    resolver = AudienceResolver(env.table, page_size=7, events_table=env.events_table)
    return dataclasses.replace(env.service, resolver=resolver, scheduler=scheduler)  # type: ignore[arg-type]


@pytest.fixture
def resolver(env: Env, resources: LocalResources, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    module = resolver_handler(env, resources, monkeypatch, page_size=7)
    module.context.resolver.events_table = env.events_table
    yield module


def ab_test(metric: str = "opens", min_sample: int = 5, **options: Any) -> Any:
    base = broadcast_request(template=TEMPLATE, subject="Spring", tags=["ab"], broadcast_id=TEST_ID)
    return ab_request(
        base,
        variants=["subject=Spring is here", "subject=Our spring sale"],
        test_share=options.get("test_share", 30),
        metric=metric,
        decide_after=options.get("decide_after", "4h"),
        min_sample=min_sample,
    )


def engage(store: SubscriberStore, email: str, *, machine: bool = False) -> None:
    """A human open of the test's mail (or Apple's prefetch: a machine's)."""
    changes = {"userAgent": MPP_USER_AGENT} if machine else {}
    record = event("open", email=email, source=TEST_ID, template=TEMPLATE, message_id=f"m-{email}", **changes)
    process_body(sns(record), EngagementContext(store=store, suppressions=Suppressions(store)))


def test_the_winner_goes_to_the_rest_once_and_every_reader_has_one_mail(
    env: Env,
    store: SubscriberStore,
    service: Broadcasts,
    resolver: Any,
    scheduler: FakeScheduler,
    subjects: dict[str, list[str]],
) -> None:
    for email in READERS:
        store.upsert(email, add_tags=["ab"])
    answer = service.send(ab_test())
    assert answer.created and answer.record.ab is not None
    rest = service.get(f"{TEST_ID}-rest")
    assert rest.status == SCHEDULED and rest.id in scheduler.started
    assert service.details(TEST_ID)["rest"]["id"] == rest.id
    with pytest.raises(ResendExists):  # one follow-up per broadcast: the rest is the test's
        service.resend(TEST_ID, after="48h")

    deliver(env, resolver, times=2)  # the test's pages, each message twice
    messages, tested = batch_emails(env)
    env.work(messages + messages)  # each batch twice
    assert 20 <= len(set(tested)) <= 52  # 30% of 120, give or take
    assert Counter(env.ses.recipients()) == dict.fromkeys(tested, 1)
    groups: dict[int, list[str]] = {0: [], 1: []}
    for email in tested:
        groups[variant_of(TEST_ID, email, 2)].append(email)
        assert subjects[email] == [("Spring is here", "Our spring sale")[variant_of(TEST_ID, email, 2)]]
    assert min(len(g) for g in groups.values()) >= 5

    # A: every reader's mail opened by Apple's prefetch (a machine: never counted), 1 person;
    # B: three people
    for email in groups[0]:
        engage(store, email, machine=True)
    engage(store, groups[0][0])
    for email in groups[1][:3]:
        engage(store, email)

    first_message = scheduler.started[rest.id]
    invoke(resolver, first_message)  # the decision time: the schedule's message, twice
    invoke(resolver, first_message)
    decided = service.get(TEST_ID).ab_decision
    assert decided is not None and (decided.winner, decided.reason) == ("B", "higher_rate")
    a, b = decided.variants
    assert (a.delivered, a.engaged, b.delivered, b.engaged) == (len(groups[0]), 1, len(groups[1]), 3)
    rest = service.get(rest.id)
    assert (rest.template, rest.subject) == (TEMPLATE, "Our spring sale")
    assert service.details(TEST_ID)["ab_decision"]["winner"] == "B"

    deliver(env, resolver, times=2)  # the rest's next pages, each twice
    env.ses.sends.clear()
    messages, rested = batch_emails(env)
    env.work(messages + messages)
    assert set(rested) == set(READERS) - set(tested)
    assert Counter(env.ses.recipients()) == dict.fromkeys(rested, 1)
    assert all(subjects[email] == ["Our spring sale"] for email in rested)
    done = service.get(rest.id)
    assert (done.status, done.sent, done.audience_size) == (DONE, len(rested), len(rested))


def test_a_decision_made_twice_decides_once(
    env: Env, store: SubscriberStore, service: Broadcasts, resolver: Any, scheduler: FakeScheduler
) -> None:
    for email in READERS[:40]:
        store.upsert(email, add_tags=["ab"])
    service.send(ab_test(min_sample=1, test_share=50))
    deliver(env, resolver)
    messages, tested = batch_emails(env)
    env.work(messages)
    b_readers = [e for e in tested if variant_of(TEST_ID, e, 2) == 1]
    engage(store, b_readers[0])
    rest = service.get(f"{TEST_ID}-rest")
    fanout = resolver.context
    first = decide_for_rest(rest, fanout.records, fanout.resolver)
    decided = service.get(TEST_ID).ab_decision
    for email in tested:  # later opens of A change nothing: the decision was made
        if variant_of(TEST_ID, email, 2) == 0:
            engage(store, email)
    again = decide_for_rest(service.get(rest.id), fanout.records, fanout.resolver)
    assert service.get(TEST_ID).ab_decision == decided and decided is not None and decided.winner == "B"
    assert (first.subject, again.subject) == ("Our spring sale", "Our spring sale")


def test_too_small_a_sample_sends_the_first_variant(
    env: Env, store: SubscriberStore, service: Broadcasts, resolver: Any, scheduler: FakeScheduler
) -> None:
    for email in READERS[:30]:
        store.upsert(email, add_tags=["ab"])
    service.send(ab_test(min_sample=1000))
    deliver(env, resolver)
    messages, tested = batch_emails(env)
    env.work(messages)
    for email in tested:
        if variant_of(TEST_ID, email, 2) == 1:
            engage(store, email)
    invoke(resolver, scheduler.started[f"{TEST_ID}-rest"])
    decided = service.get(TEST_ID).ab_decision
    assert decided is not None and (decided.winner, decided.reason) == ("A", "too_small_sample")
    assert service.get(f"{TEST_ID}-rest").subject == "Spring is here"


def test_a_bad_test_is_refused_and_writes_nothing(env: Env, service: Broadcasts) -> None:
    with pytest.raises(InvalidInput) as caught:
        service.send(
            ab_request(
                broadcast_request(template=TEMPLATE, tags=["ab"], broadcast_id=TEST_ID),
                variants=["template=no/such", "subject=x"],
                test_share=20,
                metric="clicks",
                decide_after="4h",
                min_sample=5,
            )
        )
    assert caught.value.message.startswith("--variant variant 1")
    unscheduled = dataclasses.replace(service, scheduler=None)
    with pytest.raises(InvalidInput) as caught:
        unscheduled.send(ab_test())
    assert caught.value.message.startswith("--decide-after")
    assert service.records.get(TEST_ID) is None and service.records.get(f"{TEST_ID}-rest") is None


def test_cancelling_the_test_cancels_its_rest(env: Env, store: SubscriberStore, service: Broadcasts) -> None:
    for email in READERS[:10]:
        store.upsert(email, add_tags=["ab"])
    service.send(ab_test())
    record, changed = service.cancel(TEST_ID)
    assert changed and record.status == "cancelled"
    assert service.get(f"{TEST_ID}-rest").status == "cancelled"
