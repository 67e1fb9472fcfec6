"""Broadcast models, the --where grammar, queue envelopes and the window limiter (no network)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

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
from shared.sending.rate import TokenPool, WindowLimiter, share_of, window_capacity, window_seconds


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


@pytest.mark.parametrize("rate", [1.0, 2.5, 13.3, 47.5, 50.0, 475.0])
def test_windows_hold_exactly_the_rate_on_average(rate: float) -> None:
    window = window_seconds(rate)
    windows = int(round(100 / window))  # 100 seconds
    total = sum(window_capacity(rate, window, i) for i in range(1000, 1000 + windows))
    assert abs(total - rate * 100) <= 1
    # A window's burst stays within SES's one-second bucket (rounded up for fractional rates).
    assert max(window_capacity(rate, window, i) for i in range(windows)) <= math.ceil(rate)


class FakeTable:
    """UpdateItem ADD on one counter per key, as DynamoDB answers it."""

    def __init__(self) -> None:
        self.used: dict[str, int] = {}

    def update_item(self, **request: Any) -> dict[str, Any]:
        window = request["Key"]["SK"]["S"]
        self.used[window] = self.used.get(window, 0) + int(request["ExpressionAttributeValues"][":n"]["N"])
        return {"Attributes": {"used": {"N": str(self.used[window])}}}


def test_the_limiter_never_grants_more_than_a_window_holds_to_all_workers_together() -> None:
    table, now = FakeTable(), [1000.0]
    limiters = [WindowLimiter("t", "broadcast", 47.5, client=table, clock=lambda: now[0]) for _ in range(3)]
    cap = window_capacity(47.5, limiters[0].window_s, int(now[0] // limiters[0].window_s))

    grants = [limiter.try_acquire(8)[0] for limiter in limiters]

    assert sum(grants) == cap and grants[0] == min(8, cap)
    assert sum(limiter.try_acquire(5)[0] for limiter in limiters) == 0  # the window is full
    now[0] += limiters[0].window_s
    assert limiters[2].try_acquire(5)[0] == 5  # a new window


def test_acquire_sleeps_to_the_next_window_and_the_pool_asks_in_bulk() -> None:
    table, now, sleeps = FakeTable(), [2000.0], []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    limiter = WindowLimiter("t", "broadcast", 10.0, client=table, clock=lambda: now[0], sleep=sleep)
    pool = TokenPool(limiter)
    taken = [pool.take(wanted_ahead=100) for _ in range(25)]

    assert all(taken) and limiter.requests == 3 + len(sleeps)  # one request per window, not per mail
    assert len(sleeps) == 2 and all(0 < s <= limiter.window_s * 1.1 for s in sleeps)
    assert limiter.acquire(1, deadline=now[0]) == 0 or limiter.requests > 3


def test_the_broadcast_share_leaves_the_rest_of_the_rate_reserved() -> None:
    assert share_of(50, cap=0, share=0.95) == pytest.approx(47.5)
    assert share_of(50, cap=20, share=0.9) == pytest.approx(18)
    assert share_of(0.5, cap=0, share=0.1) == 0.1
