"""The warm-up's schedule and plan (``shared.sending.warmup``, ``shared.core.specs.parse_warmup``):
what `mailstep broadcast send` prints before sending and what the workers then enforce."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from shared.core.specs import DEFAULT_WARMUP, parse_warmup, warmup_text
from shared.sending.warmup import WarmupState, allowance, describe, plan, seconds_to_next_day

DAY1 = date(2026, 11, 28)


def state(start: date | None = DAY1, finished: bool = False) -> WarmupState:
    return WarmupState("news.acme.test", start, finished)


def test_schedules_parse_and_name_the_wrong_day() -> None:
    assert parse_warmup("100, 200,400") == (100, 200, 400)
    assert parse_warmup("off") == parse_warmup("") == ()
    assert parse_warmup("default") == DEFAULT_WARMUP and warmup_text(DEFAULT_WARMUP).startswith("200,300,")
    with pytest.raises(ValueError, match="day 2: 'x'"):
        parse_warmup("100,x")
    with pytest.raises(ValueError, match="day 1: 0 must be at least 1"):
        parse_warmup("0,10")


def test_the_allowance_follows_the_ramp_and_ends_with_it() -> None:
    schedule = (100, 200, 400)
    assert allowance(schedule, state(None), DAY1) == 100  # not started: today would be day 1
    days = [DAY1 + timedelta(days=i) for i in range(4)]
    assert [allowance(schedule, state(), day) for day in days] == [100, 200, 400, None]
    assert allowance(schedule, state(finished=True), DAY1) is None
    assert allowance((), state(), DAY1) is None


def test_a_broadcast_larger_than_today_spreads_over_the_next_days() -> None:
    days = plan(500, 0, (100, 200, 400), state(), DAY1)
    assert [(d.day.day, d.count) for d in days] == [(28, 100), (29, 200), (30, 200)]
    line = describe(days, 500, DAY1)
    assert line == "today 100 of 500; the rest from tomorrow 00:00 UTC (2026-11-29: 200, 2026-11-30: 200)"


def test_a_domain_that_never_sent_starts_its_ramp_today() -> None:
    assert [d.count for d in plan(500, 0, (100, 200, 400), state(None), DAY1)] == [100, 200, 200]


def test_what_was_sent_today_counts_and_a_used_day_starts_tomorrow() -> None:
    assert [d.count for d in plan(500, 60, (100, 200, 400), state(), DAY1)] == [40, 200, 260]
    used_up = plan(150, 100, (100, 200, 400), state(), DAY1)
    assert [(d.day.day, d.count) for d in used_up] == [(29, 150)]
    assert describe(used_up, 150, DAY1).startswith("today 0 of 150; the rest from tomorrow")


def test_past_the_ramp_everything_goes_today() -> None:
    days = plan(10_000, 0, (100, 200), state(date(2026, 11, 1)), DAY1)
    assert [(d.count, d.allowance) for d in days] == [(10_000, None)]
    assert describe(days, 10_000, DAY1) == "all 10,000 today"


def test_the_hold_lasts_until_the_next_utc_midnight() -> None:
    assert seconds_to_next_day(datetime(2026, 11, 28, 23, 59, 0, tzinfo=UTC)) == 61
    assert seconds_to_next_day(datetime(2026, 11, 28, 0, 0, 0, tzinfo=UTC)) == 86_401
