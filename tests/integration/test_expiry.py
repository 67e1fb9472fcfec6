"""What expires, and when (docs/data-model.md): every item kind that grows with subscribers x
sends carries the ``ttl`` of the window it protects, and a redelivery inside that window is
still deduplicated. Driven through the real send pipeline, broadcast worker and resolver, and
engagement consumer on moto; time is moved by replacing ``shared.core.clock.utc_now``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from local_aws.provision import LocalResources
from shared.broadcasts import records as broadcast_records
from shared.broadcasts.model import DONE, FAILED, STEP, parse_batch, parse_request, parse_resolve
from shared.broadcasts.records import (
    EXPIRY_MARGIN_DAYS,
    SEND_WINDOW_DAYS,
    SendWindowClosed,
    dead_letter_sk,
)
from shared.broadcasts.worker import process_batch
from shared.core import clock
from shared.core.aws import client
from shared.engagement.consumer import EngagementContext, process_body
from shared.engagement.suppression import Suppressions
from shared.sending.jobs import SendJob
from shared.sending.pipeline import SendContext, send, send_id_for
from shared.store import keys
from shared.store.dynamo import key
from shared.store.send_log import SendLog
from shared.store.stats import SIGNUP_SOURCE, SOURCE_SCOPE, TEMPLATE_SCOPE
from shared.store.subscribers import SubscriberStore
from tests.integration.broadcast_support import Env, seed
from tests.integration.conftest import scan_all
from tests.integration.test_engagement import event, sns

DAY = 86_400
YEAR_DAYS = 366  # a Step Functions standard execution runs at most one year (a leap year's)
T0 = datetime(2027, 3, 1, 12, 0, tzinfo=UTC)
TEMPLATE = "newsletter/monthly"


@pytest.fixture
def now(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[datetime], None]]:
    """The moment ``shared.core.clock`` reads as now (T0 until a test moves it)."""
    moment = [T0]
    monkeypatch.setattr(clock, "utc_now", lambda: moment[0])

    def move(to: datetime) -> None:
        moment[0] = to

    yield move


def _items(table: str, pk_prefix: str = "", sk_prefix: str = "") -> list[dict[str, Any]]:
    return [
        i
        for i in scan_all(table)
        if str(i["PK"]).startswith(pk_prefix) and str(i["SK"]).startswith(sk_prefix)
    ]


def _epoch(moment: datetime) -> int:
    return int(moment.timestamp())


# ----- sequence (and send-queue) sends ---------------------------------------------------------
def test_a_sequence_send_claim_expires_a_year_and_a_day_after_the_send(
    now, send_ctx: SendContext, store: SubscriberStore, resources: LocalResources
) -> None:
    # Given a subscriber and a sequence step's send job
    store.upsert("seq@example.com")
    job = SendJob(email="seq@example.com", template="welcome", source="onboarding", step="welcome:run-1")

    # When it is sent at T0
    assert send(job, send_ctx).status == "sent"

    # Then its claim expires 367 days later (one year of execution + a day) and its SENT# log
    # after DATA_TTL_DAYS (30 in send_ctx)
    table = resources.tables["table_name"]
    (claim,) = _items(table, sk_prefix=keys.SEND_CLAIM_PREFIX)
    assert claim["ttl"] == _epoch(T0) + (YEAR_DAYS + 1) * DAY
    (log,) = _items(table, sk_prefix=keys.SENT_PREFIX)
    assert log["ttl"] == _epoch(T0) + 30 * DAY


def test_a_retry_late_in_the_year_is_still_deduplicated_after_the_log_expired(
    now, send_ctx: SendContext, store: SubscriberStore, resources: LocalResources, outbox: list[Any]
) -> None:
    # Given a sequence step sent at T0
    store.upsert("late@example.com")
    job = SendJob(email="late@example.com", template="welcome", source="onboarding", step="welcome:run-1")
    first = send(job, send_ctx)
    assert first.status == "sent"
    table = resources.tables["table_name"]

    # and its SENT# log deleted by TTL (30 days), as DynamoDB would
    for item in _items(table, sk_prefix=keys.SENT_PREFIX):
        client("dynamodb").delete_item(TableName=table, Key=key(item["PK"], item["SK"]))

    # When Step Functions retries the step at the last moment its execution can still run
    # (one year after a start at or before the send)
    retry_at = T0 + timedelta(days=YEAR_DAYS)
    now(retry_at)
    (claim,) = _items(table, sk_prefix=keys.SEND_CLAIM_PREFIX)
    assert claim["ttl"] > _epoch(retry_at)  # the claim is still there to answer
    again = send(job, send_ctx)

    # Then nothing is sent again
    assert (again.status, again.reason) == ("skipped", "already_sent")
    assert len(outbox) == 1


def test_a_confirmation_claim_expires_a_day_after_its_sign_up(resources: LocalResources) -> None:
    # Given a sign-up that expires at ``expires`` (its confirmation mail's ``log_until``)
    log = SendLog(resources.tables["table_name"])
    taken = _epoch(T0)
    expires = taken + 7 * DAY

    # When its confirmation mail's claim is taken
    claim = log.claim(
        "signup@example.com",
        SIGNUP_SOURCE,
        "confirm-abc",
        send_id="s1",
        template="signup/confirm",
        now=taken,
        lease_seconds=300,
        log_until=expires,
    )

    # Then it expires a day after the sign-up: after that the job finds no sign-up to mail
    assert claim.status == "claimed"
    (item,) = _items(resources.tables["table_name"], sk_prefix=keys.SEND_CLAIM_PREFIX)
    assert item["ttl"] == expires + DAY


# ----- broadcasts -----------------------------------------------------------------------------
def _broadcast(env: Env, broadcast_id: str) -> list[dict[str, Any]]:
    """Send ``broadcast_id`` to tag ``c`` and resolve it: its batch messages."""
    env.service.send(parse_request(id=broadcast_id, template=TEMPLATE, audience={"tags": ["c"]}))
    env.resolve_all(page_size=7)
    return env.batches()


def test_broadcast_claims_pages_and_markers_expire_a_day_after_the_send_window(
    now, env: Env, store: SubscriberStore
) -> None:
    # Given a broadcast created at T0, resolved and sent
    seed(store, 60)
    messages = _broadcast(env, "expiry")
    env.work(messages)
    record = env.service.get("expiry")
    assert record.status == DONE and record.sent > 0

    # Then every item it wrote per recipient, page or batch expires at
    # T0 + SEND_WINDOW_DAYS + EXPIRY_MARGIN_DAYS (30 + 1 days)
    until = _epoch(T0) + (SEND_WINDOW_DAYS + EXPIRY_MARGIN_DAYS) * DAY
    assert (SEND_WINDOW_DAYS, EXPIRY_MARGIN_DAYS) == (30, 1)
    claims = [i for i in _items(env.table, sk_prefix=keys.SEND_CLAIM_PREFIX) if i["source"] == "expiry"]
    assert len(claims) == record.sent and all(c["step"] == STEP for c in claims)
    assert {c["ttl"] for c in claims} == {until}
    pages = _items(env.table, pk_prefix=keys.broadcast_pk("expiry"), sk_prefix="PAGE#")
    batches = _items(env.table, pk_prefix=keys.broadcast_pk("expiry"), sk_prefix="BATCH#")
    assert pages and len(batches) == len(messages)
    assert {i["ttl"] for i in pages + batches} == {until}
    # the SENT# log keeps DATA_TTL_DAYS (30 in the broadcast send context), from the send
    logs = [i for i in _items(env.table, sk_prefix=keys.SENT_PREFIX) if i["source"] == "expiry"]
    assert {i["ttl"] for i in logs} == {_epoch(T0) + 30 * DAY}
    # the record and its pointer never expire
    (stored,) = [i for i in scan_all(env.table) if i["PK"] == keys.BROADCAST and i.get("id") == "expiry"]
    assert "ttl" not in stored
    pointer = _items(env.table, pk_prefix=keys.broadcast_pk("expiry"), sk_prefix=keys.BROADCAST_POINTER)
    assert "ttl" not in pointer[0]


def test_a_dead_letter_marker_expires_with_the_broadcast(now, env: Env, store: SubscriberStore) -> None:
    seed(store, 20)
    _broadcast(env, "dead")
    record = env.service.get("dead")
    assert env.service.records.mark_dead_lettered(record, 0, 0, 5)
    (marker,) = _items(env.table, pk_prefix=keys.broadcast_pk("dead"), sk_prefix=dead_letter_sk(1, 0, 0))
    assert marker["ttl"] == _epoch(T0) + 31 * DAY


def test_a_scheduled_broadcast_window_starts_at_its_time(now, env: Env) -> None:
    at = T0 + timedelta(days=5)
    record, _ = env.service.records.create(
        parse_request(id="later", template=TEMPLATE, at=at.isoformat()), send_rate=10.0
    )
    assert broadcast_records.window_end(record) == at + timedelta(days=SEND_WINDOW_DAYS)
    assert broadcast_records.items_until(record) == _epoch(at) + 31 * DAY


def test_a_batch_redelivered_at_the_end_of_the_window_sends_and_counts_nothing(
    now, env: Env, store: SubscriberStore
) -> None:
    # Given a broadcast sent at T0 (claims and batch markers written)
    seed(store, 60)
    messages = _broadcast(env, "redelivered")
    ctx = env.worker()
    assert {r.status for r in env.work(messages, ctx)} == {"counted"}
    sent = len(env.ses.sends)
    record = env.service.get("redelivered")

    # When every batch is delivered again a minute before the send window ends (a redriven
    # dead letter: a new SQS message, whatever its first enqueue time)
    end = broadcast_records.window_end(record)
    now(end - timedelta(minutes=1))
    again = [process_batch(parse_batch(m["Body"]), ctx) for m in messages]

    # Then the claims still exist and answer: no mail twice, nothing counted twice
    assert all(c["ttl"] > _epoch(end) for c in _items(env.table, sk_prefix=keys.SEND_CLAIM_PREFIX))
    assert {r.status for r in again} == {"duplicate"}
    assert len(env.ses.sends) == sent
    assert env.service.get("redelivered").sent == record.sent


def test_after_the_window_a_batch_sends_nothing_and_the_broadcast_fails_and_cannot_resume(
    now, env: Env, store: SubscriberStore
) -> None:
    # Given a broadcast resolved at T0 whose batches never ran
    seed(store, 40)
    messages = _broadcast(env, "stuck")
    record = env.service.get("stuck")
    end = broadcast_records.window_end(record)

    # When a batch arrives after the window (its claims would be expiring)
    now(end + timedelta(seconds=1))
    results = [process_batch(parse_batch(m["Body"]), env.worker()) for m in messages]

    # Then nothing is sent or counted, and the broadcast says why it stopped
    assert {r.status for r in results} == {"expired"}
    assert env.ses.sends == []
    failed = env.service.get("stuck")
    assert failed.status == FAILED and failed.processed == 0
    assert failed.error is not None and "send window ended" in failed.error
    # and it cannot start a new round: earlier rounds' claims no longer protect anyone
    with pytest.raises(SendWindowClosed):
        env.service.resume("stuck")


def test_after_the_window_a_resolve_message_hands_off_nothing(now, env: Env, store: SubscriberStore) -> None:
    seed(store, 20)
    env.service.send(parse_request(id="unresolved", template=TEMPLATE, audience={"tags": ["c"]}))
    record = env.service.get("unresolved")
    now(broadcast_records.window_end(record))
    message = env.receive(env.queues.control_url, 1)[0]
    from shared.broadcasts.fanout import resolve_step

    result = resolve_step(parse_resolve(message["Body"]), env.fanout())
    assert result.status == "stopped"
    assert env.batches() == []
    assert env.service.get("unresolved").status == FAILED


def test_a_broadcast_send_claim_written_by_the_pipeline_alone_keeps_the_default_window(
    now, env: Env, store: SubscriberStore
) -> None:
    # A send with the broadcast's source outside the worker (no window given) is not shortened
    store.upsert("plain@example.com")
    job = SendJob(email="plain@example.com", template=TEMPLATE, source="plain", step=STEP)
    assert send(job, env.send_context()).status == "sent"
    claim = next(
        i for i in _items(env.table, sk_prefix=keys.SEND_CLAIM_PREFIX) if i["send_id"] == send_id_for(job)
    )
    assert claim["ttl"] == _epoch(T0) + 367 * DAY


# ----- unique open/click markers ---------------------------------------------------------------
def test_unique_markers_expire_with_the_event_they_counted(store: SubscriberStore) -> None:
    # Given the engagement consumer keeping events 30 days
    ctx = EngagementContext(store=store, suppressions=Suppressions(store), data_ttl_days=30)
    store.upsert("recipient@example.com")

    # When the first open and the first click of a mail arrive, then a second open
    opened, clicked = "2026-01-01T10:00:00.000Z", "2026-01-01T10:05:00.000Z"
    process_body(sns(event("open", at=opened)), ctx)
    process_body(sns(event("click", at=clicked)), ctx)
    process_body(sns(event("open", at="2026-01-02T09:00:00.000Z")), ctx)

    # Then one marker per metric and scope (source, template), each expiring with the event
    # that put it: DATA_TTL_DAYS after that event
    markers = _items(store.table, pk_prefix=keys.sub_pk("recipient@example.com"), sk_prefix="UNIQ#")
    assert sorted(m["SK"] for m in markers) == sorted(
        keys.unique_marker_sk(metric, scope, value)
        for metric in ("open", "click")
        for scope, value in ((SOURCE_SCOPE, "onboarding"), (TEMPLATE_SCOPE, "onboarding/welcome"))
    )
    expected = {"open": clock.ttl_after(30, opened), "click": clock.ttl_after(30, clicked)}
    for marker in markers:
        metric = str(marker["SK"]).split("#")[1]
        assert marker["ttl"] == expected[metric], marker["SK"]
