"""Evaluate conditions in Python (the ``check`` step and trigger filters) and compute
send-window wake-up times. The native Choice rules of compiler.py have the same meaning;
tests run both on the same inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from shared.sequences.model import (
    WEEKDAYS,
    All,
    Any_,
    AttributeCondition,
    Condition,
    Engagement,
    HasTag,
    Not,
    SendWindow,
    StepEngagement,
)

TIMEZONE_ATTRIBUTE = "timezone"
# (kind: opened | clicked | sent, template key) -> bool, looked up only when a condition asks.
EngagementLookup = Callable[[str, str], bool]
# (kind: opened | clicked, step name) -> bool: a person opened (clicked) that step's mail.
StepMailLookup = Callable[[str, str], bool]


def _no_engagement(kind: str, key: str) -> bool:
    raise ValueError("engagement conditions need live data (use a check step)")


def _equals(actual: Any, expected: Any) -> bool:
    if isinstance(expected, bool):
        return isinstance(actual, bool) and actual == expected
    if isinstance(expected, int | float):
        return isinstance(actual, int | float) and not isinstance(actual, bool) and actual == expected
    return isinstance(actual, str) and actual == expected


def evaluate(
    condition: Condition,
    tags: Iterable[str],
    attributes: dict[str, Any],
    engagement: EngagementLookup = _no_engagement,
    step_mail: StepMailLookup = _no_engagement,
) -> bool:
    tag_set = frozenset(tags)
    if isinstance(condition, HasTag):
        return condition.tag in tag_set
    if isinstance(condition, All):
        return all(evaluate(c, tag_set, attributes, engagement, step_mail) for c in condition.all)
    if isinstance(condition, Any_):
        return any(evaluate(c, tag_set, attributes, engagement, step_mail) for c in condition.any)
    if isinstance(condition, Not):
        return not evaluate(condition.not_, tag_set, attributes, engagement, step_mail)
    if isinstance(condition, Engagement):
        return engagement(condition.kind, condition.template)
    if isinstance(condition, StepEngagement):
        return step_mail(condition.kind, condition.step)
    assert isinstance(condition, AttributeCondition)
    present = condition.attribute in attributes
    value = attributes.get(condition.attribute)
    test = condition.test
    if test == "exists":
        return (present and value is not None) == condition.exists
    if not present:
        return False
    if test == "equals":
        return _equals(value, condition.equals)
    if test == "in":
        return any(_equals(value, v) for v in condition.in_ or [])
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    limit = condition.greater if test == "greater" else condition.less
    assert limit is not None
    return value > limit if test == "greater" else value < limit


def subscriber_zone(attributes: dict[str, Any], default: str) -> ZoneInfo:
    name = attributes.get(TIMEZONE_ATTRIBUTE)
    if isinstance(name, str):
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            pass
    return ZoneInfo(default)


def _minutes(hhmm: str) -> int:
    hours, minutes = hhmm.split(":")
    return int(hours) * 60 + int(minutes)


def next_in_window(moment: datetime, window: SendWindow, zone: ZoneInfo) -> datetime:
    """The first instant at or after ``moment`` inside the window (local days and hours)."""
    local = moment.astimezone(zone)
    start, end = _minutes(window.start), _minutes(window.end)
    for offset in range(8):
        day = (local + timedelta(days=offset)).date()
        if WEEKDAYS[day.weekday()] not in window.days:
            continue
        opens = datetime(day.year, day.month, day.day, tzinfo=zone) + timedelta(minutes=start)
        closes = datetime(day.year, day.month, day.day, tzinfo=zone) + timedelta(minutes=end)
        if offset == 0 and opens <= local < closes:
            return moment
        if local < opens:
            return opens.astimezone(UTC)
    raise AssertionError("a window with at least one day always opens within a week")


def wake_at(now: datetime, seconds: int, window: SendWindow | None, attributes: dict[str, Any]) -> str:
    """``now + seconds`` moved into the send window, as the UTC timestamp a Wait state reads."""
    moment = now + timedelta(seconds=seconds)
    if window is not None:
        moment = next_in_window(moment, window, subscriber_zone(attributes, window.timezone))
    # Round up to the second so a Wait never resumes just before the window opens.
    if moment.microsecond:
        moment = moment.replace(microsecond=0) + timedelta(seconds=1)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
