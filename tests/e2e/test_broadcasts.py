"""Broadcasts end to end on the local runtime, through the CLI: audience, exactly once,
idempotent id, cancel mid-way, and mail on the send queue not waiting behind the backlog."""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.broadcasts.model import BATCH_CONTRACT, BatchMessage, to_body
from shared.core.specs import BROADCAST_CONTROL_QUEUE, BROADCAST_QUEUE, SEND_QUEUE
from shared.store.dynamo import serialize
from shared.store.subscribers import Profile, profile_items
from tests.e2e.conftest import Local
from tests.e2e.helpers import (
    broadcast_record,
    drained,
    enqueue,
    eventually,
    ops,
    post,
    queue_url,
    receipt,
    sent_by,
    ses_rate,
    settled,
    wait_until_drained,
)

TEMPLATE = "newsletter/monthly"
PEOPLE = 2000
TAGS = ("bca", "bcb", "bcc")  # names no other e2e test uses


@pytest.fixture(scope="module")
def people(local: Local) -> list[dict[str, Any]]:
    """2,000 subscribers with mixed tags and attributes, written as the store writes them
    (profile + TAG# partners) with BatchWriteItem: seeding through the API would cost a
    transaction per subscriber."""
    rng = random.Random(2026)
    now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    ddb = local.client("dynamodb", retries=8)
    table = local.state["tables"]["table_name"]
    seeded, items = [], []
    for i in range(PEOPLE):
        email = f"bc{i:05d}@example.com"
        tags = frozenset(t for t in TAGS if rng.random() < 0.5)
        attributes = {"plan": rng.choice(["free", "pro", "team"]), "seats": rng.randint(1, 9)}
        status = "unsubscribed" if i % 41 == 7 else "subscribed"
        suppressed = i % 53 == 11
        profile = Profile(
            email=email,
            status=status,
            first_name=f"P{i}",
            attributes=attributes,
            tags=tags,
            suppressed=suppressed,
            created_at=now,
            updated_at=now,
            version=1,
        )
        items += profile_items(profile, now)
        seeded.append(
            {
                "email": email,
                "tags": tags,
                "attributes": attributes,
                "eligible": status == "subscribed" and not suppressed,
            }
        )
    for start in range(0, len(items), 25):
        request = {table: [{"PutRequest": {"Item": serialize(i)}} for i in items[start : start + 25]]}
        while request:
            request = ddb.batch_write_item(RequestItems=request).get("UnprocessedItems") or {}
    return seeded


def expected(
    people: list[dict[str, Any]], wanted: Callable[[frozenset[str], dict[str, Any]], bool]
) -> set[str]:
    """The audience by a filter written in the test, not by the product's ``Audience.matches``."""
    return {p["email"] for p in people if p["eligible"] and wanted(p["tags"], p["attributes"])}


def broadcast(local: Local, *args: str, timeout: float = 150) -> Any:
    answer = ops(local, "broadcast", *args, timeout=timeout)
    answer.stdout = " ".join(answer.stdout.split())  # rich wraps at the terminal width
    return answer


def send(local: Local, *options: str, timeout: float = 150) -> Any:
    """``mailstep broadcast send --template <TEMPLATE> <options>``."""
    return broadcast(local, "send", "--template", TEMPLATE, *options, timeout=timeout)


def recipients(local: Local, broadcast_id: str) -> Counter[str]:
    """How many mails of the broadcast each address got."""
    return Counter(d for m in sent_by(local, broadcast_id) for d in m["destination"])


# The spring audience: its options, and the same filter written in the test.
SPRING = ("--tag", "bca", "--exclude-tag", "bcb", "--where", "plan=pro")


def spring(tags: frozenset[str], attributes: dict[str, Any]) -> bool:
    return "bca" in tags and "bcb" not in tags and attributes["plan"] == "pro"


def test_dry_run_and_bad_arguments(local: Local, people) -> None:
    want = expected(people, spring)
    answer = send(local, *SPRING, "--dry-run")
    assert answer.returncode == 0, answer.stdout + answer.stderr
    assert f"audience: {len(want)} subscriber(s)" in answer.stdout

    for bad, message in [
        (["--tag", "Bad#Tag"], "--tag"),
        (["--where", "plan~pro"], "--where"),
        (["--at", "2020-01-01T00:00:00Z"], "not in the future"),
        (["--at", "tomorrow"], "--at"),
        (["--id", "Not Valid"], "--id"),
    ]:
        answer = send(local, *bad, "--dry-run")
        assert answer.returncode == 2 and message in answer.stdout, (bad, answer.stdout)
    answer = broadcast(local, "send", "--template", "newsletter/nope", "--dry-run")
    assert answer.returncode == 2 and "--template" in answer.stdout


def test_broadcast_reaches_exactly_the_filtered_audience_once_and_a_rerun_sends_nothing(
    local, people
) -> None:
    want = expected(people, spring)
    args = (*SPRING, "--id", "e2e-spring", "--yes")

    answer = send(local, *args)

    assert answer.returncode == 0, answer.stdout + answer.stderr
    assert "e2e-spring: done" in answer.stdout
    got = recipients(local, "e2e-spring")
    assert set(got) == want and set(got.values()) == {1}
    stored = broadcast_record(local, "e2e-spring")
    assert (stored["status"], stored["audience"], stored["sent"], stored["failed"]) == (
        "done",
        len(want),
        len(want),
        0,
    )

    again = send(local, *args)

    assert again.returncode == 0 and "nothing new was sent" in again.stdout
    settled(local, BROADCAST_CONTROL_QUEUE.local_name, BROADCAST_QUEUE.local_name)
    assert len(sent_by(local, "e2e-spring")) == len(want)

    # When SQS delivers one of its batches again (at-least-once), after the broadcast is done
    sqs = local.client("sqs")
    queue = queue_url(local, BROADCAST_QUEUE.local_name)
    batch = BatchMessage(
        broadcast_id="e2e-spring", round=stored["round"], page=0, index=0, emails=sorted(want)[:5]
    )
    sqs.send_message(QueueUrl=queue, MessageBody=to_body(BATCH_CONTRACT, batch))
    wait_until_drained(sqs, queue)

    # Then nobody gets a second mail and the record's counts do not move
    assert len(sent_by(local, "e2e-spring")) == len(want)
    after = broadcast_record(local, "e2e-spring")
    assert (after["status"], after["sent"], after["failed"]) == ("done", len(want), 0)


def test_an_audience_without_a_tag_is_read_by_scan_and_filtered_by_attributes(local, people) -> None:
    want = expected(people, lambda t, a: a["plan"] == "team" and a["seats"] == 7)
    answer = send(local, "--where", "plan=team", "--where", "seats=7", "--id", "e2e-all", "--yes")
    assert answer.returncode == 0, answer.stdout + answer.stderr
    assert "e2e-all: done" in answer.stdout
    got = recipients(local, "e2e-all")
    assert want and set(got) == want and set(got.values()) == {1}


def test_cancel_mid_way_stops_sending_and_the_record_says_how_many_went(local, people) -> None:
    want = expected(people, lambda t, a: bool(t & {"bcc", "bcb"}))
    with ses_rate(local, 20):
        started = send(
            local, "--any-tag", "bcc", "--any-tag", "bcb", "--id", "e2e-cancel", "--yes", "--no-wait"
        )
        assert started.returncode == 0, started.stdout + started.stderr
        eventually(
            lambda: len(sent_by(local, "e2e-cancel")) >= 40, 60, "40 mails of e2e-cancel", interval_s=0.2
        )
        cancelled = broadcast(local, "cancel", "e2e-cancel")
        assert cancelled.returncode == 0 and "cancelled" in cancelled.stdout, cancelled.stdout

        # Batches already in a worker's hands stop within seconds; the queued ones drain without
        # sending. A cancel that comes while the audience is still being resolved also stops the
        # resolution: the record then counts the recipients resolved so far (`resolved` stays
        # false), so "all processed" is both queues empty and every resolved recipient processed.
        sqs = local.client("sqs")
        queues = [queue_url(local, q.local_name) for q in (BROADCAST_CONTROL_QUEUE, BROADCAST_QUEUE)]

        def all_processed() -> dict[str, Any] | None:
            if not all(drained(sqs, url) for url in queues):
                return None
            stored = broadcast_record(local, "e2e-cancel")
            return stored if stored["processed"] >= stored["audience"] else None

        stored = eventually(all_processed, 60, "every batch of e2e-cancel to be processed", interval_s=0.5)
    went = sent_by(local, "e2e-cancel")
    assert stored["status"] == "cancelled"
    assert stored["sent"] == len(went) < len(want)
    assert stored["skipped"]["cancelled"] == stored["audience"] - len(went) > 0
    assert len({d for m in went for d in m["destination"]}) == len(went)


def test_transactional_and_sequence_mail_are_not_stuck_behind_a_broadcast_backlog(local, people) -> None:
    with ses_rate(local, 20):
        try:
            started = send(
                local, "--any-tag", "bca", "--any-tag", "bcc", "--id", "e2e-backlog", "--yes", "--no-wait"
            )
            assert started.returncode == 0, started.stdout + started.stderr
            eventually(
                lambda: len(sent_by(local, "e2e-backlog")) >= 20,
                60,
                "20 mails of e2e-backlog",
                interval_s=0.2,
            )
            # When a transactional mail is queued behind a backlog of hundreds of broadcast mails
            job = receipt("bc00001@example.com", "receipts", "order-1", total="9.00")
            enqueue(local, job, queue=SEND_QUEUE.local_name)
            queued = time.monotonic()
            eventually(
                lambda: sent_by(local, "receipts"), 30, "the transactional mail, queued behind the broadcast"
            )
            waited = time.monotonic() - queued
            # And when a sequence starts for a subscriber meanwhile (its first step sends at once)
            customer = "bc00002@example.com"
            shipped = {
                "type": "order.shipped",
                "email": customer,
                "id": f"backlog-{time.time_ns()}",
                "data": {},
            }
            (answer,) = post(local, shipped)
            assert answer["sequences_started"] == ["order-shipped"], answer
            triggered = time.monotonic()
            eventually(
                lambda: [m for m in sent_by(local, "order-shipped") if customer in m["destination"]],
                30,
                "the sequence mail, started behind the broadcast",
            )
            sequence_waited = time.monotonic() - triggered
            backlog = broadcast_record(local, "e2e-backlog")
        finally:
            broadcast(local, "cancel", "e2e-backlog")
    # Then both went out while most of the broadcast was still waiting (the oracle is the
    # backlog left, not a wall-clock bound: on a loaded machine cold starts take seconds)
    print(f"\ntransactional mail after {waited:.1f} s, sequence mail after {sequence_waited:.1f} s")
    assert backlog["audience"] - backlog["sent"] > 100


def test_at_schedules_with_a_step_functions_wait_on_the_virtual_clock(local: Local, people) -> None:
    want = expected(people, lambda t, a: "bcc" in t and a["seats"] >= 8)
    at = (datetime.now(UTC) + timedelta(days=3)).isoformat(timespec="seconds")
    waited_before = local.status()["clock"]["advanced_s"]

    answer = send(local, "--tag", "bcc", "--where", "seats>=8", "--at", at, "--id", "e2e-later", "--yes")

    assert answer.returncode == 0 and "scheduled" in answer.stdout, answer.stdout + answer.stderr
    eventually(
        lambda: broadcast_record(local, "e2e-later")["status"] == "done",
        180,
        "e2e-later to be done",
        interval_s=0.5,
    )
    # The Wait state stood for the three days (virtual clock), then the audience was sent.
    assert local.status()["clock"]["advanced_s"] - waited_before >= 3 * 86400 - 120
    got = recipients(local, "e2e-later")
    assert set(got) == want and set(got.values()) == {1}


@pytest.mark.bench  # a timed measurement: run by `make bench`, not by `make test`
def test_concurrent_workers_reach_90_percent_of_max_send_rate_and_fail_nothing(local, people) -> None:
    # Given the local SES at MaxSendRate 15/s (the mapping runs 3 workers, each in its own
    # process with 8 sends in flight: 24 sends in flight, so the rate, not a local send's
    # latency of up to a second on a loaded 2-core machine, is what limits them; the broadcasts
    # take the whole rate: no other mail is sent meanwhile)
    rate = 15
    want = expected(people, lambda t, a: {"bcb", "bcc"} <= t)
    with ses_rate(local, rate):
        # When a broadcast to ~450 subscribers runs to the end
        answer = send(local, "--tag", "bcb", "--tag", "bcc", "--id", "e2e-rate", "--yes", timeout=300)
        assert answer.returncode == 0, answer.stdout + answer.stderr
    # Then everyone got it once, nothing failed (throttling was retried), at >= 90% of the rate
    stored = broadcast_record(local, "e2e-rate")
    went = sent_by(local, "e2e-rate")
    assert stored["status"] == "done" and stored["failed"] == 0
    assert sorted(d for m in went for d in m["destination"]) == sorted(want)
    stamps = sorted(datetime.fromisoformat(m["timestamp"].replace("Z", "+00:00")).timestamp() for m in went)
    achieved = (len(stamps) - 1) / (stamps[-1] - stamps[0])
    print(f"\n{len(went)} mails at {achieved:.1f}/s ({achieved / rate:.0%} of MaxSendRate {rate}/s)")
    assert achieved >= 0.9 * rate, f"achieved {achieved:.1f}/s"
