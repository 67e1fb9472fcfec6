"""The engagement rules of an audience, as pure functions: who meets which condition (people
only unless machine opens count; a click counts as an open), and the resend's ``--after``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ops.broadcast_requests import parse_after, resend_request
from shared.broadcasts.engagement import Engagement, holds
from shared.broadcasts.model import Audience, Broadcast
from shared.core import clock
from shared.core.errors import InvalidInput

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)


def days_ago(days: float) -> str:
    return clock.iso(NOW - timedelta(days=days))


def reader(
    markers: set[tuple[str, str]] = frozenset(),  # type: ignore[assignment]
    sent: set[str] = frozenset(),  # type: ignore[assignment]
    engaged_at: str | None = None,
    machine: tuple[tuple[str, str, str], ...] = (),
) -> Engagement:
    return Engagement(frozenset(markers), frozenset(sent), engaged_at, machine)


MPP_OPEN_OF_X = (("open", "x", days_ago(1)),)


@pytest.mark.parametrize(
    ("audience", "found", "expected"),
    [
        ({"opened": ["x"]}, reader({("open", "x")}), True),
        ({"opened": ["x"]}, reader({("click", "x")}), True),  # a click shows it was read
        ({"opened": ["x"]}, reader({("open", "y")}), False),
        ({"opened": ["x"]}, reader(machine=MPP_OPEN_OF_X), False),  # people only
        ({"opened": ["x"], "machine_opens": True}, reader(machine=MPP_OPEN_OF_X), True),
        ({"clicked": ["x"]}, reader({("open", "x")}), False),
        ({"not_opened": ["x"]}, reader(sent={"x"}), True),
        ({"not_opened": ["x"]}, reader(), False),  # never sent x
        ({"not_opened": ["x"]}, reader({("click", "x")}, sent={"x"}), False),
        ({"not_opened": ["x"]}, reader(sent={"x"}, machine=MPP_OPEN_OF_X), True),
        ({"not_opened": ["x"], "machine_opens": True}, reader(sent={"x"}, machine=MPP_OPEN_OF_X), False),
        ({"engaged_within_days": 7}, reader(engaged_at=days_ago(6.9)), True),
        ({"engaged_within_days": 7}, reader(engaged_at=days_ago(7.1)), False),
        ({"engaged_within_days": 7}, reader(), False),  # no ENGAGEMENT item: not engaged
        ({"engaged_within_days": 7}, reader(machine=MPP_OPEN_OF_X), False),
        ({"engaged_within_days": 7, "machine_opens": True}, reader(machine=MPP_OPEN_OF_X), True),
        ({"not_engaged_within_days": 7}, reader(engaged_at=days_ago(30)), True),
        ({"not_engaged_within_days": 7}, reader(engaged_at=days_ago(1)), False),
        ({"engaged_within_days": 30, "not_engaged_within_days": 60}, reader(engaged_at=days_ago(1)), False),
        ({"opened": ["x"], "clicked": ["y"]}, reader({("open", "x")}), False),  # every condition holds
    ],
)
def test_holds(audience: dict[str, object], found: Engagement, expected: bool) -> None:
    assert holds(Audience.model_validate(audience), found, NOW) is expected


def test_after_takes_minutes_hours_or_days_within_the_original_s_window() -> None:
    assert (parse_after("90m"), parse_after("48h"), parse_after(" 2d ")) == (
        timedelta(minutes=90),
        timedelta(hours=48),
        timedelta(days=2),
    )
    for bad in ("", "48", "h", "1.5h", "-2h", "30m", "29d"):
        with pytest.raises(InvalidInput) as caught:
            parse_after(bad)
        assert [p.field for p in caught.value.problems] == ["after"]


def test_a_resend_keeps_the_original_s_topic_template_and_subject_and_goes_at_start_plus_after() -> None:
    original = Broadcast(
        id="dec", sk="s", template="newsletter/monthly", subject="December", status="done",
        audience=Audience(tags=("news",), topic="newsletter"), created_at=clock.iso(NOW),
    )  # fmt: skip
    request = resend_request(original, after="48h", now=NOW)
    assert (request.id, request.template, request.subject) == ("dec-resend", "newsletter/monthly", "December")
    assert request.audience == Audience(recipients_of="dec", not_opened=("dec",), topic="newsletter")
    assert request.at == NOW + timedelta(hours=48)
    assert resend_request(original, after="48h", now=NOW + timedelta(days=3)).at is None  # due: now
    assert resend_request(original, after="2d", subject="Again", template="a/b", now=NOW).subject == "Again"
