"""Broadcast models, the --where grammar, queue envelopes and the window limiter (no network)."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bench.scenarios.limiter_scale import ClockItem
from shared.broadcasts.model import (
    BATCH_CONTRACT,
    RESOLVE_CONTRACT,
    Audience,
    BatchMessage,
    Condition,
    parse_batch,
    parse_request,
    parse_resolve,
    to_body,
)
from shared.core.errors import InvalidInput
from shared.sending.rate import RateLimiter, TokenPool, lease_size, share_of


@pytest.mark.parametrize(
    ("text", "attributes", "matches"),
    [
        ("plan=pro", {"plan": "pro"}, True),
        ("plan=pro", {"plan": "free"}, False),
        ("plan=pro", {}, False),
        ("plan!=pro", {}, True),
        ("plan!=pro", {"plan": "pro"}, False),
        ("seats>3", {"seats": 4}, True),
        ("seats>3", {"seats": 3}, False),
        ("seats>=3", {"seats": 3.0}, True),
        ("seats<3", {"seats": "2"}, True),  # a text attribute compares as text
        ("seats<3", {"seats": "10"}, True),  # ... so "10" < "3"
        ("seats<3", {"seats": True}, False),
        ("seats=3", {"seats": 3}, True),
        ("beta=true", {"beta": True}, True),
        ("country in de,fr", {"country": "fr"}, True),
        ("country in de, fr", {"country": "us"}, False),
        ("country not in de,fr", {}, True),
        ("country not in de,fr", {"country": "de"}, False),
        ("langs=de", {"langs": ["en", "de"]}, True),
        ("name<m", {"name": "ada"}, True),
    ],
)
def test_where_conditions(text: str, attributes: dict[str, Any], matches: bool) -> None:
    assert Condition.parse(text).matches(attributes) is matches


@pytest.mark.parametrize(
    "text", ["", "plan", "plan~pro", "plan=", "1plan=x", "pl-an=x", "x in ", "x in a,,b"]
)
def test_bad_where_conditions_are_rejected(text: str) -> None:
    with pytest.raises(ValueError):
        Condition.parse(text)


def test_audience_validates_tags_and_rejects_contradictions() -> None:
    with pytest.raises(ValueError, match="tag"):
        Audience.model_validate({"tags": ["Bad#Tag"]})
    with pytest.raises(ValueError, match="both required and excluded"):
        Audience.model_validate({"tags": ["a"], "exclude_tags": ["a"]})
    audience = Audience.model_validate({"tags": ["a", "a"], "any_tags": ["b", "c"], "where": ["plan = pro"]})
    assert audience.tags == ("a",) and audience.where == ("plan=pro",)
    assert audience.matches(frozenset({"a", "c"}), {"plan": "pro"})
    assert not audience.matches(frozenset({"a"}), {"plan": "pro"})
    assert Audience().everyone and Audience().describe() == "everyone"


def test_request_validation_names_the_option() -> None:
    for values, field in [
        ({"id": "Bad Id", "template": "newsletter/monthly"}, "id"),
        ({"id": "ok", "template": "../etc/passwd"}, "template"),
        ({"id": "ok", "template": "newsletter/monthly", "at": "2030-01-01T09:00:00"}, "at"),
        ({"id": "ok", "template": "newsletter/monthly", "at": "soon"}, "at"),
        ({"id": "ok", "template": "newsletter/monthly", "audience": {"where": ["x~1"]}}, "audience.where"),
    ]:
        with pytest.raises(InvalidInput) as caught:
            parse_request(**values)
        assert caught.value.problems[0].field == field, values
    request = parse_request(id="ok", template="newsletter/monthly", at="2030-01-01T10:00:00+01:00")
    assert request.at == datetime(2030, 1, 1, 9, tzinfo=UTC)
    with pytest.raises(InvalidInput, match="not in the future"):
        request.check_future(datetime(2030, 1, 1, 9, 0, 1, tzinfo=UTC))
    request.check_future(datetime(2030, 1, 1, 9, tzinfo=UTC) - timedelta(seconds=1))


def test_envelopes_round_trip_and_bad_ones_fail_with_invalid_input() -> None:
    batch = BatchMessage(broadcast_id="spring", round=1, page=2, index=3, emails=("a@example.com",))
    assert parse_batch(to_body(BATCH_CONTRACT, batch)) == batch
    head = '{"contract": "broadcast.batch", "version": %s, "broadcast_id": "%s", "round": 1, "page": 0, '
    for body in [
        "not json",
        "[1]",
        head % (2, "x") + '"index": 0, "emails": ["a@example.com"]}',  # unknown version
        '{"contract": "send.job", "version": 1}',  # another contract
        head % (1, "x") + '"index": 0}',  # a field missing
        head % (1, "X#") + '"index": 0, "emails": ["a@example.com"]}',  # a forged id
    ]:
        with pytest.raises(InvalidInput):
            parse_batch(body)
    with pytest.raises(InvalidInput):
        parse_resolve(to_body(BATCH_CONTRACT, batch))
    assert (
        parse_resolve(
            f'{{"contract": "{RESOLVE_CONTRACT}", "version": 1, "broadcast_id": "x", "round": 1, "page": 0}}'
        ).page
        == 0
    )


@pytest.mark.parametrize(
    ("rate", "in_flight", "size"),
    [(1000.0, 8, 16), (10_000.0, 8, 100), (50.0, 8, 16), (12.0, 8, 6), (1.0, 8, 1), (47.5, 1, 2)],
)
def test_a_lease_is_twice_the_sends_in_flight_within_the_clock_writes_and_half_a_second(
    rate: float, in_flight: int, size: int
) -> None:
    assert lease_size(rate, in_flight) == size


def test_leases_follow_each_other_on_the_shared_clock_and_no_worker_is_refused() -> None:
    table, now = ClockItem(), [1000.0]
    limiters = [RateLimiter("t", "broadcast", 50.0, client=table, clock=lambda: now[0]) for _ in range(3)]

    leases = [limiter.lease(10, 50.0) for limiter in limiters] + [limiters[0].lease(10, 50.0)]

    # Then each lease starts where the one before ended: 10 tokens = 0.2 s at 50/s
    assert [lease.start for lease in leases] == pytest.approx([1000.0, 1000.2, 1000.4, 1000.6])
    assert all(lease.count == 10 and lease.spacing == pytest.approx(0.02) for lease in leases)
    # And a worker new to the clock guessed it behind: the first restarted it, the two others
    # were refused once each (the refusal carries the clock), then advanced it: none polls
    assert sum(limiter.requests for limiter in limiters) == 6 and table.refused == 2


def test_workers_together_never_get_more_than_the_rate_in_any_second() -> None:
    table, now = ClockItem(), [5000.0]
    rate = 47.5
    limiters = [RateLimiter("t", "broadcast", rate, client=table, clock=lambda: now[0]) for _ in range(5)]
    pools = [TokenPool(replace(limiter, sleep=lambda s: None), in_flight=8) for limiter in limiters]
    due: list[float] = []
    for _ in range(128):  # 5 workers, each always wanting more (8 leases each): the tokens' instants
        for pool in pools:
            pool.take(wanted_ahead=100)
            due.append(pool._next - pool._spacing)
    due.sort()
    per_second = [sum(1 for t in due if start <= t < start + 1) for start in due]
    assert max(per_second) <= math.ceil(rate)
    assert (len(due) - 1) / (due[-1] - due[0]) == pytest.approx(rate, rel=0.01)
    # And one request per lease of 16 tokens, plus one refused guess per worker new to the clock
    assert sum(p.limiter.requests for p in pools) == len(due) / 16 + len(pools) - 1


def test_the_pool_sleeps_until_each_token_is_due_and_asks_once_per_lease() -> None:
    table, now, sleeps = ClockItem(), [2000.0], []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    limiter = RateLimiter("t", "broadcast", 10.0, client=table, clock=lambda: now[0], sleep=sleep)
    pool = TokenPool(limiter, in_flight=2)  # leases of 4
    taken = [pool.take(wanted_ahead=100) for _ in range(12)]

    assert all(taken) and limiter.requests == 3 + table.refused  # 3 leases of 4 tokens, no polling
    assert now[0] == pytest.approx(2001.1) and all(s == pytest.approx(0.1) for s in sleeps)
    # a token due after the deadline is not taken: the lease is dropped
    assert not pool.take(wanted_ahead=1, deadline=now[0] - 1)


def test_the_broadcast_share_leaves_the_rest_of_the_rate_reserved() -> None:
    assert share_of(50, cap=0, share=0.95) == pytest.approx(47.5)
    assert share_of(50, cap=20, share=0.9) == pytest.approx(18)
    assert share_of(0.5, cap=0, share=0.1) == 0.1
