"""The resolver's pacing (no network): how many batches may wait before it holds its next page,
how long it then waits, and how long one invocation resolves pages."""

from __future__ import annotations

import pytest

from shared.broadcasts.fanout import (
    INVOCATION_BUDGET_S,
    MAX_DELAY_S,
    MIN_QUEUED_BATCHES,
    MIN_WAIT_S,
    RESERVE_S,
    invocation_deadline,
    queue_limit,
    queue_wait_s,
)
from shared.core.settings import Settings


@pytest.mark.parametrize(
    ("ahead_s", "rate", "limit"),
    [
        (120, 1000.0, 1200),  # two minutes at 1,000/s: 120,000 mails in batches of 100
        (120, 2500.0, 3000),
        (120, 14.0, MIN_QUEUED_BATCHES),  # 17 batches of sending: the floor
        (60, 333.0, 200),  # 199.8 batches, rounded up
    ],
)
def test_the_queue_may_hold_ahead_s_of_sending_at_the_broadcasts_rate(ahead_s, rate, limit) -> None:
    assert queue_limit(ahead_s, rate) == limit


@pytest.mark.parametrize(
    ("queued", "limit", "rate", "wait"),
    [
        (1300, 1200, 1000.0, 10),  # 100 batches above: 10,000 mails at 1,000/s
        (1201, 1200, 1000.0, MIN_WAIT_S),  # 0.1 s of excess: the shortest wait
        (100_000, 20, 14.0, MAX_DELAY_S),  # hours of excess: SQS's longest delay, then it looks again
        (30, 20, 0.0, MAX_DELAY_S),  # no rate recorded: not a division by zero
    ],
)
def test_the_next_page_waits_until_the_excess_went_out(queued, limit, rate, wait) -> None:
    assert queue_wait_s(queued, limit, rate) == wait


def test_an_invocation_resolves_for_its_budget_and_keeps_a_reserve() -> None:
    assert invocation_deadline(119.9, now=1000.0) == 1000.0 + INVOCATION_BUDGET_S
    assert invocation_deadline(50.0, now=1000.0) == 1000.0 + 50.0 - RESERVE_S
    assert invocation_deadline(10.0, now=1000.0) < 1000.0  # no time left: only its own page


def test_back_pressure_is_on_by_default_and_can_be_turned_off() -> None:
    assert Settings(table_name="t").broadcast_resolver_ahead_s == 120
    off = Settings.from_env({"TABLE_NAME": "t", "BROADCAST_RESOLVER_AHEAD_S": "0"})
    assert off.broadcast_resolver_ahead_s == 0
