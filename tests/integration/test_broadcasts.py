"""Broadcasts on moto: paged audience resolution against a brute-force filter, fan-out,
exactly-once counting, cancel/resume, redelivery and crash windows, and the shared rate."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from ops import broadcasts as ops_broadcasts
from shared.broadcasts import worker as worker_module
from shared.broadcasts.audience import AudienceResolver
from shared.broadcasts.model import (
    CANCELLED,
    DONE,
    RESOLVING,
    STEP,
    Audience,
    Condition,
    parse_batch,
    parse_request,
)
from shared.broadcasts.worker import IN_FLIGHT_WAITS_S, BatchIncomplete, process_batch
from shared.core.aws import client
from shared.core.errors import InvalidInput
from shared.sending.jobs import SendJob
from shared.sending.pipeline import SendContext, send, send_id_for
from shared.store.stats import StatsStore
from shared.store.subscribers import SubscriberStore
from tests.integration.broadcast_support import Env, eligible, seeded

TEMPLATE = "newsletter/monthly"


@pytest.fixture
def people(store: SubscriberStore) -> list[dict[str, Any]]:
    return seeded(store, 240)


Predicate = Callable[[set[str], dict[str, Any]], bool]


def brute_force(people: list[dict[str, Any]], wanted: Predicate) -> set[str]:
    """The audience by a filter written here, not by the product's ``Audience.matches``."""
    return {p["email"] for p in eligible(people) if wanted(p["tags"], p["attributes"])}


# (filters as the CLI/API take them, the same audience as a plain Python predicate)
AUDIENCES: list[tuple[dict[str, Any], Predicate]] = [
    (
        {"tags": ["a"], "exclude_tags": ["b"], "where": ["plan=pro"]},
        lambda t, a: "a" in t and "b" not in t and a.get("plan") == "pro",
    ),
    ({"any_tags": ["b", "c"]}, lambda t, a: bool(t & {"b", "c"})),
    (
        {"any_tags": ["c", "a"], "exclude_tags": ["b"], "where": ["seats>3", "country in de,fr"]},
        lambda t, a: (
            bool(t & {"c", "a"}) and "b" not in t and a["seats"] > 3 and a.get("country") in ("de", "fr")
        ),
    ),
    ({}, lambda t, a: True),
    (
        {"where": ["country not in de,us", "seats<=2"]},
        lambda t, a: a.get("country") not in ("de", "us") and a["seats"] <= 2,
    ),
    ({"tags": ["a", "c"], "where": ["plan!=free"]}, lambda t, a: {"a", "c"} <= t and a.get("plan") != "free"),
]


@pytest.mark.parametrize(("filters", "wanted"), AUDIENCES, ids=[str(f) for f, _ in AUDIENCES])
def test_paged_resolution_matches_a_brute_force_filter_once_each(env: Env, people, filters, wanted) -> None:
    # Given subscribers with mixed tags/attributes and a filter, resolved in small pages
    audience = Audience.model_validate(filters)
    resolver = AudienceResolver(env.table, page_size=13, max_evaluated=40)

    # When the audience is resolved page by page
    found = list(resolver.iterate(audience))

    # Then it is exactly the brute-force set, each recipient once
    assert len(found) == len(set(found))
    assert set(found) == brute_force(people, wanted)
    assert found, "the filter should match someone in the seeded data"


@pytest.mark.parametrize("tags", [(), ("a",)], ids=["everyone", "tag a"])
def test_the_live_count_adds_up_in_parts_to_the_dry_run_and_refuses_a_forged_cursor(
    env: Env, people, monkeypatch: pytest.MonkeyPatch, tags: tuple[str, ...]
) -> None:
    monkeypatch.setattr(ops_broadcasts, "COUNT_PAGE", 40)  # 240 people: several parts
    request = parse_request(id="counted", template=TEMPLATE, audience={"tags": list(tags)})
    size, sample = env.service.preview(request)

    # When the count is asked part by part, each part one page (no time to spare)
    parts, total, cursor = [], 0, None
    while True:
        part = env.service.count(request, cursor, budget_s=0.0)
        parts.append(part)
        total += part.size
        if (cursor := part.cursor) is None:
            break

    # Then the parts add up to the whole dry run, and the first part shows a sample of it
    wanted = brute_force(people, lambda t, a: set(tags) <= t)
    assert len(parts) >= 2 and total == size == len(wanted)
    assert len(parts[0].sample) == len(sample) == 5 and set(parts[0].sample) <= wanted
    # and with time to spare, one answer counts it all
    assert env.service.count(request, budget_s=120).size == size
    # and no answer starts a page it expects to end past the budget: on this clock each page
    # takes 1/32 s, 1/32 s apart, so after two (at 4/32 s) a third would end past 100 ms
    clock = iter(n / 32 for n in range(10_000))
    monkeypatch.setattr(ops_broadcasts, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    pages: list[int] = []
    page = AudienceResolver.page
    monkeypatch.setattr(AudienceResolver, "page", lambda self, *a: pages.append(1) or page(self, *a))
    counted = env.service.count(request, budget_s=0.1)
    assert len(pages) == min(2, len(parts)) and (counted.cursor is None) == (len(parts) <= 2)
    # and a cursor it did not return is a clear error
    scan = '{"part": 0, "segments": "x", "open": {}}'  # the "everyone" Scan's cursor
    tag = '{"part": 0, "key": {"PK": {"N": "1"}}}'  # a tag partition's, with a key of another type
    for forged in ("nonsense", "[1]", tag if tags else scan):
        with pytest.raises(InvalidInput, match="cursor"):
            env.service.count(request, forged)


def test_a_broadcast_reaches_exactly_its_audience_once_and_a_rerun_sends_nothing(env: Env, people) -> None:
    # Given a broadcast to --tag a --exclude-tag b --where plan=pro
    request = parse_request(
        id="spring", template=TEMPLATE, audience={"tags": ["a"], "exclude_tags": ["b"], "where": ["plan=pro"]}
    )
    expected = brute_force(people, AUDIENCES[0][1])  # the same filters as AUDIENCES[0]
    answer = env.service.send(request)
    assert answer.created and answer.record.status == RESOLVING

    # When the resolver (small pages) and the workers run until the queues are empty
    steps = env.resolve_all(page_size=7)
    env.work(env.batches(), env.worker())

    # Then every expected subscriber got exactly one mail and the record is done
    assert steps >= 2
    assert Counter(env.ses.recipients()) == Counter({e: 1 for e in expected})
    record = env.service.get("spring")
    assert (record.status, record.audience_size, record.processed, record.sent, record.failed) == (
        DONE,
        len(expected),
        len(expected),
        len(expected),
        0,
    )
    # Matched subscribers who may not get marketing mail are recorded as skipped, by reason
    matched = [p for p in people if AUDIENCES[0][1](p["tags"], p["attributes"])]
    suppressed = sum(1 for p in matched if p["suppressed"])
    unsubscribed = sum(1 for p in matched if not p["suppressed"] and p["status"] == "unsubscribed")
    assert suppressed + unsubscribed > 0, "the seeded data should match someone who may not be mailed"
    expected_skips = {"suppressed": suppressed, "unsubscribed": unsubscribed}
    assert record.skipped == {reason: n for reason, n in expected_skips.items() if n}

    # When the same id is sent again
    again = env.service.send(request)
    env.resolve_all()
    env.work(env.batches())

    # Then nothing new is sent and the caller is told so
    assert not again.created and again.same
    assert len(env.ses.sends) == len(expected)
    changed = parse_request(id="spring", template=TEMPLATE, subject="Other")
    assert not env.service.send(changed).same


def test_a_redelivered_batch_sends_and_counts_nothing_more(env: Env, people) -> None:
    env.service.send(parse_request(id="dup", template=TEMPLATE, audience={"tags": ["c"]}))
    env.resolve_all()
    messages = env.batches()
    ctx = env.worker()
    first = env.work(messages, ctx)

    # When every batch is delivered a second time
    again = [process_batch(parse_batch(m["Body"]), ctx) for m in messages]

    # Then no mail is sent twice and the counters did not move
    assert {r.status for r in first} == {"counted"}
    assert {r.status for r in again} == {"duplicate"}
    record = env.service.get("dup")
    assert len(env.ses.sends) == len(set(env.ses.recipients())) == record.sent == record.audience_size


def test_a_redelivered_resolve_message_enqueues_nothing_more_and_counts_the_audience_once(env, people):
    env.service.send(parse_request(id="resolve-twice", template=TEMPLATE, audience={"any_tags": ["a", "b"]}))
    message = env.receive(env.queues.control_url, 1)[0]
    from shared.broadcasts.fanout import resolve_step
    from shared.broadcasts.model import parse_resolve

    ctx = env.fanout(page_size=10_000)
    first = resolve_step(parse_resolve(message["Body"]), ctx)
    again = resolve_step(parse_resolve(message["Body"]), ctx)  # SQS delivers it again
    batches = env.batches()
    env.work(batches)

    # the page was handed off: the redelivery sends no batch again (a crash before the
    # hand-off does: tests/integration/test_broadcast_everyone.py)
    assert (first.status, again.status) == ("last_page", "stale")
    assert len(batches) == len({parse_batch(b["Body"]).index for b in batches})
    record = env.service.get("resolve-twice")
    assert record.audience_size == len(brute_force(people, lambda t, a: bool(t & {"a", "b"})))
    assert record.status == DONE and record.sent == record.audience_size == len(env.ses.sends)


def test_cancel_mid_way_stops_further_sends_and_resume_sends_only_the_rest(env: Env, people) -> None:
    env.service.send(parse_request(id="cancel-me", template=TEMPLATE))  # everyone
    env.resolve_all(page_size=25)
    messages = env.batches()
    assert len(messages) >= 4
    env.work(messages[:2])
    went = len(env.ses.sends)

    # When the broadcast is cancelled while batches are still queued
    record, changed = env.service.cancel("cancel-me")
    env.work(messages[2:])

    # Then nothing more is sent, and the record says how many went
    assert changed and record.status == CANCELLED
    assert len(env.ses.sends) == went > 0
    record = env.service.get("cancel-me")
    assert record.status == CANCELLED and record.sent == went
    assert record.skipped.get("cancelled") == record.audience_size - went
    assert env.service.cancel("cancel-me")[1] is False

    # When it is resumed
    resumed = env.service.resume("cancel-me")
    env.resolve_all(page_size=25)
    env.work(env.batches())

    # Then the rest is sent, nobody twice
    record = env.service.get("cancel-me")
    assert resumed.round == 2 and record.status == DONE
    assert len(env.ses.sends) == len(set(env.ses.recipients())) == record.audience_size == record.sent
    assert set(env.ses.recipients()) == {p["email"] for p in eligible(people)}


def test_a_cancel_stops_the_batch_in_a_workers_hands_and_counts_the_rest_skipped(
    env: Env, people, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker_module, "STATUS_CHECK_S", 0.0)  # look at the status before every send
    env.service.send(parse_request(id="cancel-in-hand", template=TEMPLATE))  # everyone
    env.resolve_all(page_size=100)
    (first, *rest) = env.batches()
    size = len(parse_batch(first["Body"]).emails)
    assert size > 10

    # When the broadcast is cancelled after the 5th send of a batch a worker is sending
    def send_then_cancel(job: SendJob, ctx: SendContext) -> Any:
        outcome = send(job, ctx)
        if len(env.ses.sends) == 5:
            env.service.cancel("cancel-in-hand")
        return outcome

    (result,) = env.work([first], env.worker(threads=1, send_fn=send_then_cancel))
    env.work(rest)

    # Then that batch starts no further send, and its unsent recipients are counted skipped
    assert len(env.ses.sends) == 5
    assert result.counts == {"sent": 5, "skipped_cancelled": size - 5, "processed": size}
    record = env.service.get("cancel-in-hand")
    assert record.status == CANCELLED and record.sent == 5
    assert record.skipped.get("cancelled") == record.audience_size - 5 == record.processed - 5


def test_a_cancelled_scheduled_broadcast_never_resolves(env: Env, people) -> None:
    class Recorder:
        def __init__(self) -> None:
            self.started: list[tuple[str, str]] = []
            self.stopped: list[str] = []

        def schedule(self, record: Any, body: str) -> str:
            self.started.append((record.at, body))
            return f"arn:aws:states:us-east-1:123456789012:execution:s:{record.id}"

        def unschedule(self, arn: str) -> bool:
            self.stopped.append(arn)
            return True

    env.service.scheduler = Recorder()  # type: ignore[assignment]
    at = datetime.now(UTC) + timedelta(days=2)
    answer = env.service.send(parse_request(id="later", template=TEMPLATE, at=at.isoformat()))
    assert answer.record.status == "scheduled"
    assert env.service.scheduler.started[0][0] == answer.record.at  # type: ignore[attr-defined]

    record, _ = env.service.cancel("later")
    # The schedule fires anyway (the stop raced): the resolver sees a cancelled broadcast.
    client("sqs").send_message(
        QueueUrl=env.queues.control_url, MessageBody=env.service.scheduler.started[0][1]
    )  # type: ignore[attr-defined]
    env.resolve_all()

    assert env.service.scheduler.stopped  # type: ignore[attr-defined]
    assert env.batches() == []
    assert env.service.get("later").status == CANCELLED


def test_a_claim_another_worker_releases_within_the_wait_is_sent_by_the_batch_not_deferred(
    env: Env, people
) -> None:
    # Given a batch one of whose recipients another worker has claimed (a batch of the round
    # before a resume, still finishing its last send)
    env.service.send(parse_request(id="overlap", template=TEMPLATE, audience={"tags": ["b"]}))
    env.resolve_all()
    messages = env.batches()
    batch = parse_batch(messages[0]["Body"])
    other = batch.emails[0]
    ctx = env.worker()
    job = SendJob(email=other, template=TEMPLATE, source="overlap", step=STEP)
    now = int(datetime.now(UTC).timestamp())
    claim = ctx.send.log.claim(
        other, "overlap", STEP, send_id=send_id_for(job), template=TEMPLATE, now=now,
        lease_seconds=ctx.send.lease_seconds, log_until=now + 30 * 86400,
    )  # fmt: skip

    # When the batch runs and the other worker releases its claim during the first wait
    waits: list[float] = []

    def release_while_waiting(seconds: float) -> None:
        waits.append(seconds)
        ctx.send.log.release(other, "overlap", STEP, claim.claim_id)

    ctx.sleep = release_while_waiting
    result = process_batch(batch, ctx)

    # Then the batch sends to that recipient too and counts the whole batch: nothing deferred to
    # the queue's visibility timeout
    assert result.status == "counted" and waits == [IN_FLIGHT_WAITS_S[0]]
    assert Counter(env.ses.recipients())[other] == 1
    assert env.service.get("overlap").processed == len(batch.emails)


def test_send_rejects_a_past_time_and_an_unknown_template(env: Env) -> None:
    with pytest.raises(InvalidInput, match="not in the future"):
        env.service.send(parse_request(id="past", template=TEMPLATE, at="2020-01-01T00:00:00Z"))
    with pytest.raises(InvalidInput, match="does not exist"):
        env.service.send(parse_request(id="nope", template="newsletter/none"))
    assert env.service.list() == []


def test_a_crash_after_ses_accepted_causes_one_duplicate_at_most_and_no_loss(env: Env, people) -> None:
    env.service.send(
        parse_request(id="crash", template=TEMPLATE, audience={"tags": ["b"], "where": ["seats>=6"]})
    )
    env.resolve_all()
    messages = env.batches()
    batch = parse_batch(messages[0]["Body"])
    victim = batch.emails[0]
    ctx = env.worker()
    waits: list[float] = []
    ctx.sleep = waits.append  # the in-batch waits for a claim in flight (no wall time here)

    # Given a worker that died after SES accepted the victim's mail but before recording it
    job = SendJob(email=victim, template=TEMPLATE, source="crash", step=STEP)
    now = datetime.now(UTC)
    claim = ctx.send.log.claim(
        victim,
        "crash",
        STEP,
        send_id=send_id_for(job),
        template=TEMPLATE,
        now=int(now.timestamp()),
        lease_seconds=ctx.send.lease_seconds,
        log_until=int((now + timedelta(days=30)).timestamp()),
    )
    assert claim.status == "claimed"
    env.ses.send_email(Destination={"ToAddresses": [victim]})

    # When the batch is redelivered within the claim's lease
    with pytest.raises(BatchIncomplete) as deferred:
        process_batch(batch, ctx)
    # Then the victim is deferred (in flight) after the batch waited for the claim, the others are
    # sent, nothing is counted yet
    assert deferred.value.reasons == Counter({"in_flight": 1})
    assert waits == list(IN_FLIGHT_WAITS_S)
    assert env.service.get("crash").processed == 0

    # When it is redelivered after the lease expired
    later = now + timedelta(seconds=ctx.send.lease_seconds + 1)

    def send_later(job: SendJob, send_ctx: SendContext) -> Any:
        return send(job, send_ctx, now=later)

    result = process_batch(batch, env.worker(send_fn=send_later))
    env.work(messages[1:])

    # Then the victim got exactly one duplicate (the documented claim window), nobody was lost
    counts = Counter(env.ses.recipients())
    assert counts[victim] == 2
    assert all(n == 1 for e, n in counts.items() if e != victim)
    record = env.service.get("crash")
    assert result.status == "counted"
    assert set(counts) == brute_force(people, lambda t, a: "b" in t and a["seats"] >= 6)
    assert record.status == DONE and record.sent == record.audience_size
    # and the engagement counters' sends equal the record's, counted once per batch
    stats = StatsStore(env.table, env.events_table, client=client("dynamodb"))
    assert stats.source("crash").total("send") == record.sent
    assert stats.template(TEMPLATE).total("send") >= record.sent


def _run_concurrently(env: Env, broadcast_id: str, workers: int, **worker_args: Any) -> None:
    env.resolve_all()
    messages = env.batches()
    shares = [messages[i::workers] for i in range(workers)]
    threads = [threading.Thread(target=env.work, args=(share, env.worker(**worker_args))) for share in shares]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _achieved(env: Env) -> float:
    times = sorted(t for t, _ in env.ses.sends)
    return (len(times) - 1) / (times[-1] - times[0])


def _fast_send(env: Env) -> Any:
    """SES through the real adapter (throttling classified as SES does), with SES-like
    latency, but without moto's slow in-process DynamoDB behind the rest of the pipeline."""
    from shared.sending.pipeline import SendOutcome
    from shared.sending.sender import SesSender

    ses = SesSender("mailstep", client=env.ses)

    def send_fn(job: SendJob, _ctx: SendContext) -> SendOutcome:
        time.sleep(0.02)
        result = ses.send_raw(
            b"x", from_email="news@acme.test", to_email=job.email, tags={"source": job.source}
        )
        if result.status == "sent":
            return SendOutcome(status="sent", send_id="s", message_id=result.message_id)
        return SendOutcome(status="retryable", send_id="s", reason="throttled", error_code=result.error_code)

    return send_fn


def _broadcast_at_rate(
    env: Env, store: SubscriberStore, tag: str, count: int, ses_rate: float, share: float
) -> None:
    """Given ``count`` subscribers tagged ``tag``, SES at ``ses_rate`` mails/s (an empty bucket:
    no head start) and the broadcast share at ``share`` mails/s, a broadcast ``tag`` to them."""
    for i in range(count):
        store.upsert(f"{tag}{i:04d}@example.com", add_tags=[tag])
    env.ses.max_send_rate, env.ses._tokens = ses_rate, 0.0
    env.rate[0] = share
    env.service.send(parse_request(id=tag, template=TEMPLATE, audience={"tags": [tag]}))


@pytest.mark.bench  # a timed measurement: run by `make bench`, not by `make test`
def test_several_workers_together_reach_90_percent_of_the_ses_rate_and_stay_under_it(env: Env, store) -> None:
    # Given SES at 50 mails/s (empty bucket: no head start), the broadcast share at 95% of it
    _broadcast_at_rate(env, store, "rate", 400, ses_rate=50.0, share=0.95 * 50)

    # When 3 workers (4 sends in flight each) share the batches
    _run_concurrently(env, "rate", 3, threads=4, send_fn=_fast_send(env))

    # Then everyone got one mail, nothing failed, and the rate is >= 90% of 50/s, never above it
    record = env.service.get("rate")
    assert record.status == DONE and record.failed == 0 and record.sent == 400
    assert sorted(env.ses.recipients()) == sorted(set(env.ses.recipients()))
    assert _achieved(env) >= 0.9 * 50, (_achieved(env), env.ses.throttled)
    assert env.ses.throttled == 0  # SES's own bucket never saw more than its rate


def test_throttling_is_retried_with_backoff_and_never_counted_as_failed(env: Env, store) -> None:
    # Given a broadcast share set above what SES accepts (throttling guaranteed)
    _broadcast_at_rate(env, store, "thr", 120, ses_rate=20.0, share=60.0)

    _run_concurrently(env, "thr", 2, threads=4, send_fn=_fast_send(env))

    record = env.service.get("thr")
    assert env.ses.throttled > 0
    assert record.status == DONE and record.failed == 0 and record.sent == 120
    assert len(env.ses.sends) == 120


@pytest.mark.bench  # a timed measurement: run by `make bench`, not by `make test`
def test_full_pipeline_with_concurrent_workers_holds_the_rate(env: Env, store) -> None:
    # Given the whole send pipeline (moto in-process) and SES at 12 mails/s
    _broadcast_at_rate(env, store, "full", 90, ses_rate=12.0, share=0.95 * 12)

    _run_concurrently(env, "full", 3, threads=2)

    record = env.service.get("full")
    assert record.status == DONE and record.failed == 0 and record.sent == 90
    assert _achieved(env) >= 0.9 * 12, _achieved(env)


def test_where_conditions_parse_and_match() -> None:
    assert str(Condition.parse("plan = pro")) == "plan=pro"
    assert Condition.parse("seats>3").matches({"seats": 4})
    assert not Condition.parse("seats>3").matches({"seats": 3})
    assert Condition.parse("country IN de, fr").matches({"country": "fr"})
