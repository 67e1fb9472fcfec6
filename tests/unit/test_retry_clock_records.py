"""The retry policy, the clock, the events-table record builder, the validated name types
and how a cancelled transaction is read back (by the action, never by its position)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import BaseModel, ValidationError

from shared.core import clock
from shared.core.errors import AlreadyEntered, ExecutionAlreadyActive, SubscriberNotFound
from shared.core.models import AttributeName, EventType, Tag, TagChange, TemplateKey
from shared.core.retry import Backoff
from shared.store import keys
from shared.store.dynamo import CONDITION_FAILED, Action, Cancellation
from shared.store.events import event_record
from shared.store.subscribers import ENTERED, EXEC_FORWARD, EXEC_INVERSE, PROFILE_EXISTS, entry_refusal


# ----- retry ---------------------------------------------------------------------------------
def test_tries_are_bounded_and_pause_only_between_tries() -> None:
    pauses: list[float] = []
    tries = list(Backoff(attempts=5, base=0.1, cap=10.0).tries(sleep=pauses.append, rand=lambda: 0.0))
    assert tries == [0, 1, 2, 3, 4]
    assert pauses == [0.1, 0.2, 0.4, 0.8]  # exponential, none before the first try or after the last


def test_a_loop_that_never_succeeds_gives_up_after_the_last_try() -> None:
    calls = 0
    for _ in Backoff(attempts=3, base=0.0, cap=0.0).tries(sleep=lambda s: None):
        calls += 1
        continue  # never succeeds
    else:
        gave_up = True
    assert calls == 3 and gave_up


@pytest.mark.parametrize("jitter", [1.0, 0.5, 0.0])
def test_pauses_stay_within_the_jitter_bounds_and_the_cap(jitter: float) -> None:
    policy = Backoff(attempts=10, base=0.2, cap=3.0, jitter=jitter)
    for retry in range(9):
        ceiling = min(3.0, 0.2 * 2**retry)
        lowest = policy.pause(retry, rand=lambda: 0.999999)
        highest = policy.pause(retry, rand=lambda: 0.0)
        assert highest == pytest.approx(ceiling)
        assert lowest == pytest.approx(ceiling * (1 - jitter), abs=1e-5)
        assert all(ceiling * (1 - jitter) - 1e-9 <= policy.pause(retry) <= ceiling for _ in range(50))


def test_no_pause_starts_that_would_end_past_the_deadline() -> None:
    pauses: list[float] = []
    now = [100.0]

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        now[0] += seconds

    policy = Backoff(attempts=10, base=1.0, cap=60.0)
    tries = list(policy.tries(sleep=sleep, rand=lambda: 0.0, deadline=106.5, clock=lambda: now[0]))
    assert tries == [0, 1, 2] and pauses == [1.0, 2.0]  # the next pause (4 s) would end at 107


def test_a_policy_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        Backoff(attempts=0, base=0.1, cap=1.0)
    with pytest.raises(ValueError):
        Backoff(attempts=3, base=0.1, cap=1.0, jitter=1.5)


# ----- clock ---------------------------------------------------------------------------------
def test_iso_is_utc_milliseconds_with_z() -> None:
    moment = datetime(2026, 3, 1, 12, 30, 5, 123456, tzinfo=UTC)
    assert clock.iso(moment) == "2026-03-01T12:30:05.123Z"
    assert (
        clock.iso(moment.astimezone(__import__("zoneinfo").ZoneInfo("Europe/Paris")))
        == "2026-03-01T12:30:05.123Z"
    )
    now = clock.iso()
    assert len(now) == 24 and now.endswith("Z")


def test_parse_iso_reads_z_offsets_and_naive_times_as_utc() -> None:
    assert clock.parse_iso("2026-03-01T12:30:05.123Z") == datetime(2026, 3, 1, 12, 30, 5, 123000, tzinfo=UTC)
    assert clock.parse_iso("2026-03-01T13:30:05+01:00") == datetime(2026, 3, 1, 12, 30, 5, tzinfo=UTC)
    assert clock.parse_iso("2026-03-01").tzinfo is not None
    with pytest.raises(ValueError):
        clock.parse_iso("yesterday")


def test_ttl_is_epoch_seconds_days_after_the_moment_or_its_iso_form() -> None:
    moment = datetime(2026, 1, 1, tzinfo=UTC)
    expected = int((moment + timedelta(days=180)).timestamp())
    assert clock.ttl_after(180, moment) == expected
    assert clock.ttl_after(180, "2026-01-01T00:00:00.000Z") == expected
    assert clock.ttl_after(1, moment) - clock.epoch(moment) == clock.DAY_SECONDS
    assert abs(clock.ttl_after(0) - clock.epoch()) <= 1


# ----- events-table records ------------------------------------------------------------------------
def test_an_event_record_has_its_key_time_and_expiry() -> None:
    moment = datetime(2026, 5, 4, 3, 2, 1, 500000, tzinfo=UTC)
    record = event_record(
        "ann@example.com",
        "send_failed",
        at=moment,
        ttl_days=30,
        suffix="abc",
        reason="x",
        template=None,
    )
    assert record == {
        "PK": keys.sub_pk("ann@example.com"),
        "SK": keys.event_sk("2026-05-04T03:02:01.500Z", "send_failed", "abc"),
        "type": "send_failed",
        "at": "2026-05-04T03:02:01.500Z",
        "ttl": int((moment + timedelta(days=30)).timestamp()),
        "reason": "x",  # None fields are left out
    }


def test_an_event_record_takes_a_stored_time_as_is_and_a_random_suffix_by_default() -> None:
    a = event_record("ann@example.com", "open", at="2026-05-04T03:02:01.500Z", ttl_days=1)
    b = event_record("ann@example.com", "open", at="2026-05-04T03:02:01.500Z", ttl_days=1)
    assert a["at"] == "2026-05-04T03:02:01.500Z" and a["SK"] != b["SK"]
    assert a["ttl"] == clock.ttl_after(1, "2026-05-04T03:02:01.500Z")
    with pytest.raises(keys.KeyError_):
        event_record("ann@example.com", "a#b", at="2026-05-04T03:02:01.500Z", ttl_days=1)


# ----- validated names -----------------------------------------------------------------------
class Names(BaseModel):
    tag: Tag | None = None
    event: EventType | None = None
    template: TemplateKey | None = None
    attribute: AttributeName | None = None


@pytest.mark.parametrize(
    "field, value",
    [
        ("tag", "vip#admin"),
        ("tag", "VIP"),
        ("tag", "x" * 65),
        ("event", "signed#up"),
        ("template", "news#letter/monthly"),
        ("template", "news/#monthly"),
        ("template", "/monthly"),
        ("template", "a" * 129),
        ("attribute", "plan#x"),
        ("attribute", "1plan"),
    ],
)
def test_a_name_outside_its_pattern_is_refused(field: str, value: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Names.model_validate({field: value})
    assert caught.value.errors()[0]["loc"] == (field,)


def test_names_inside_their_patterns_pass_unchanged() -> None:
    names = Names(tag="vip.2026", event="order_paid", template="newsletter/monthly-2", attribute="Plan_2")
    assert (names.tag, names.event, names.template, names.attribute) == (
        "vip.2026",
        "order_paid",
        "newsletter/monthly-2",
        "Plan_2",
    )
    with pytest.raises(ValidationError, match="tag 'a#b'"):
        TagChange(add=("a#b",))


# ----- transaction outcomes --------------------------------------------------------------------
def _actions(*roles: str) -> list[Action]:
    return [Action(role, {"Put": {"TableName": "t", "Item": {}}}) for role in roles]


def _cancelled(actions: list[Action], failing: str) -> Cancellation:
    codes = [CONDITION_FAILED if a.role == failing else "None" for a in actions]
    return Cancellation.of(actions, {"CancellationReasons": [{"Code": c} for c in codes]})


def test_a_cancellation_names_the_action_that_failed_whatever_its_position() -> None:
    production_order = _actions(PROFILE_EXISTS, EXEC_FORWARD, EXEC_INVERSE, ENTERED)
    other_order = _actions(ENTERED, PROFILE_EXISTS, EXEC_INVERSE, EXEC_FORWARD)
    # the second action fails: in production order that is the forward pair half, here the profile check
    second_fails = Cancellation.of(
        other_order, {"CancellationReasons": [{"Code": "None"}, {"Code": CONDITION_FAILED}, {}, {}]}
    )
    assert second_fails.failed() == [other_order[1]] and other_order[1].role == PROFILE_EXISTS
    assert isinstance(entry_refusal(second_fails, "onboarding"), SubscriberNotFound)
    for actions in (production_order, other_order):
        assert isinstance(entry_refusal(_cancelled(actions, PROFILE_EXISTS), "s"), SubscriberNotFound)
        assert isinstance(entry_refusal(_cancelled(actions, EXEC_FORWARD), "s"), ExecutionAlreadyActive)
        assert isinstance(entry_refusal(_cancelled(actions, EXEC_INVERSE), "s"), ExecutionAlreadyActive)
        assert isinstance(entry_refusal(_cancelled(actions, ENTERED), "s"), AlreadyEntered)


def test_reasons_that_do_not_match_the_actions_are_unknown_not_guessed() -> None:
    actions = _actions("a", "b")
    partial = Cancellation.of(actions, {"CancellationReasons": [{"Code": CONDITION_FAILED}]})
    assert not partial.known and partial.failed() == []
    assert Cancellation.of(actions, {}).outcomes == ()
    known = _cancelled(actions, "b")
    assert (
        known.known and known.code_of(actions[1]) == CONDITION_FAILED and known.code_of(actions[0]) == "None"
    )
