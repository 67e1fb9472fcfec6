"""Compiler output shape, determinism and the structural checker; conditions and windows."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from shared.core.models import NAME_RE
from shared.sequences import SEQUENCES_DIR
from shared.sequences.compiler import (
    CALLBACK_GRACE_S,
    CALLBACK_RESOURCE,
    CALLBACK_TIMEOUT,
    CONTRACT,
    FAIL_TASK_STATE,
    HALTED_STATE,
    RETRYABLE_ERROR,
    STEP_FUNCTION_PLACEHOLDER,
    WINDOW_DEFERRAL_MAX_S,
    compile_sequence,
    definition_json,
    render_definition,
    tag_key,
)
from shared.sequences.engine import execution_name
from shared.sequences.evaluate import evaluate, next_in_window, wake_at
from shared.sequences.loader import Source, _Composer, parse_source
from shared.sequences.model import SendWindow, Sequence, parse_condition
from shared.sequences.sfn import execution_arn, state_machine_of
from shared.sequences.structure import structural_problems
from shared.sequences.validate import require_catalog


def seq(text: str, sequence_id: str = "t") -> Sequence:
    composer = _Composer(f"{sequence_id}.yaml")
    data = composer.build(yaml.compose(text, Loader=yaml.SafeLoader), ())
    sequence, problems = parse_source(Source(f"{sequence_id}.yaml", data, composer.lines), sequence_id)
    assert not problems and sequence is not None, problems
    return sequence


LINEAR = seq(
    "trigger: go\nsteps:\n"
    + "  - wait: 1d\n".join(f"  - send: onboarding/tips\n    subject: Mail {i}\n" for i in range(4))
)


def path_lengths(asl: dict[str, Any]) -> list[int]:
    """States entered on every success path (Catch edges excluded)."""
    states = asl["States"]
    lengths = []

    def walk(name: str, depth: int) -> None:
        state = states[name]
        if state.get("End") or state["Type"] in ("Succeed", "Fail"):
            lengths.append(depth)
            return
        targets = [state["Next"]] if "Next" in state else []
        if state["Type"] == "Choice":
            targets = [r["Next"] for r in state["Choices"]] + [state["Default"]]
        for target in targets:
            walk(target, depth + 1)

    walk(asl["StartAt"], 1)
    return lengths


def test_linear_sequence_compiles_to_callback_tasks_and_a_last_plain_task() -> None:
    asl = compile_sequence(LINEAR)
    kinds = sorted(s["Type"] for name, s in asl["States"].items() if name[0] == "S")
    assert kinds == ["Task"] * 4  # each send and the wait after it: one callback Task
    assert path_lengths(asl) == [4]  # 4 mails: 4 transitions = 1.00 per mail (7 with Wait states)
    last = asl["States"]["S7_send_onboarding-tips"]
    assert last["End"] is True and last["Parameters"]["finish"] is True
    assert last["Resource"] == STEP_FUNCTION_PLACEHOLDER and "token.$" not in last["Parameters"]
    first = asl["States"][asl["StartAt"]]
    assert first["Resource"] == CALLBACK_RESOURCE
    assert first["Parameters"]["FunctionName"] == STEP_FUNCTION_PLACEHOLDER
    payload = first["Parameters"]["Payload"]
    assert payload["contract"] == CONTRACT and payload["version"] == 1 and payload["email.$"] == "$.email"
    assert (payload["wait"], payload["token.$"]) == (86400, "$$.Task.Token") and "finish" not in payload
    assert first["Next"] == "S3_send_onboarding-tips" and first["ResultPath"] == "$.r"
    assert first["Retry"][0]["ErrorEquals"] == [RETRYABLE_ERROR] and first["Retry"][0]["BackoffRate"] > 1
    assert [c["Next"] for c in first["Catch"]] == [HALTED_STATE, FAIL_TASK_STATE]


@pytest.mark.parametrize("window", [None, {"days": ["sat"], "start": "09:00", "end": "10:00"}])
def test_a_callback_task_times_out_after_its_wait_and_is_tried_once_more(window: Any) -> None:
    """A schedule that never fires must not hold the execution for a year: every callback Task
    times out once its wait, the longest deferral of a send window (none without one) and a day
    have passed; the timeout is retried once, then caught like any failure."""
    sequences = [*require_catalog(SEQUENCES_DIR), LINEAR]
    if window is not None:
        sequences.append(LINEAR.model_copy(update={"send_window": SendWindow.model_validate(window)}))
    callbacks = 0
    for sequence in sequences:
        for name, state in compile_sequence(sequence)["States"].items():
            if state.get("Resource") != CALLBACK_RESOURCE:
                assert "TimeoutSeconds" not in state, name  # a plain Task answers, or its Lambda times out
                continue
            callbacks += 1
            deferral = WINDOW_DEFERRAL_MAX_S if sequence.send_window is not None else 0
            wait = state["Parameters"]["Payload"]["wait"]
            assert state["TimeoutSeconds"] == wait + deferral + CALLBACK_GRACE_S, name
            timeouts = [r for r in state["Retry"] if CALLBACK_TIMEOUT in r["ErrorEquals"]]
            assert [r["MaxAttempts"] for r in timeouts] == [1], name
            assert state["Catch"][-1]["ErrorEquals"] == ["States.ALL"]  # then: the failure Task
    assert callbacks >= 4


def test_output_is_byte_identical_and_names_are_readable() -> None:
    for sequence in require_catalog(SEQUENCES_DIR):
        text = definition_json(sequence)
        assert text == definition_json(sequence.model_copy(deep=True))
        asl = json.loads(text)
        assert structural_problems(asl) == []
        assert all(len(name) <= 80 for name in asl["States"])
    onboarding = compile_sequence(require_catalog(SEQUENCES_DIR).sequences["onboarding"])
    assert "S1_send_onboarding-welcome" in onboarding["States"]
    assert "S5_branch" in onboarding["States"]
    assert render_definition(definition_json(LINEAR), "arn:fn").count("arn:fn") == 4 + 1  # + the fail Task


def test_fresh_conditions_are_native_and_stale_ones_call_a_check() -> None:
    asl = compile_sequence(
        seq(
            """
trigger: go
steps:
  - if: {tag: pro}
    then: [{send: onboarding/tips, subject: a}]
  - wait: 1d
  - if: {tag: pro}
    then: [{send: onboarding/tips, subject: b}]
  - if: {opened: onboarding/tips}
    then: [{send: onboarding/tips, subject: c}]
"""
        )
    )
    states = asl["States"]
    assert states["S1_if"]["Choices"][0]["Variable"] == "$.tags.t_pro"
    assert "S1_check" not in states
    # stale (after a wait) and engagement conditions are evaluated by the step function on live
    # data: here in the one Task that also sends the branch's mail
    assert states["S3_branch"]["Parameters"]["condition"] == {"tag": "pro"}
    assert states["S4_branch"]["Parameters"]["condition"] == {"opened": "onboarding/tips"}
    assert not any(state["Type"] == "Choice" for name, state in states.items() if name != "S1_if")


def test_a_live_if_of_single_sends_is_one_branch_task() -> None:
    asl = compile_sequence(
        seq(
            """
trigger: go
steps:
  - wait: 1d
  - if: {tag: pro}
    then: [{send: onboarding/tips, subject: a}, {tag: {add: [x]}}]
  - if: {opened: onboarding/tips}
    then: [{send: onboarding/tips, subject: b}]
    else: [exit]
"""
        )
    )
    states = asl["States"]
    assert structural_problems(asl) == []
    branch = states["S2_branch"]["Parameters"]
    assert (branch["action"], branch["condition"]) == ("branch", {"tag": "pro"})
    assert states["S2_branch"]["Resource"] == STEP_FUNCTION_PLACEHOLDER  # no wait after it
    then = {"step": "S2T1", "template": "onboarding/tips", "subject": "a", "add": ["x"], "remove": []}
    assert branch["then"] == then
    assert "else" not in branch and "S2_check" not in states and "S2_if" not in states
    assert states["S2_branch"]["Retry"][0]["ErrorEquals"] == ["SendRetryable"]
    assert states["S2_branch"]["Next"] == "S3_check"  # an exit in a branch keeps check + Choice
    assert "S3_if" in states
    onboarding = compile_sequence(require_catalog(SEQUENCES_DIR).sequences["onboarding"])
    branch = onboarding["States"]["S5_branch"]
    assert branch["Parameters"]["Payload"]["else"]["template"] == "onboarding/upgrade"
    assert branch["Resource"] == CALLBACK_RESOURCE and branch["Parameters"]["Payload"]["wait"] == 604800
    # 4 mails on either branch: 1.00 transitions per mail (1.75 with Wait states, 2.25 with check + Choice)
    assert path_lengths(onboarding) == [4]


def test_tag_after_send_rides_on_the_send_task() -> None:
    asl = compile_sequence(
        seq("trigger: go\nsteps:\n  - send: onboarding/tips\n    subject: a\n  - tag: {add: [x]}\n")
    )
    tasks = [n for n, s in asl["States"].items() if s["Type"] == "Task" and n[0] == "S"]
    assert tasks == ["S1_send_onboarding-tips"]
    assert asl["States"]["S1_send_onboarding-tips"]["Parameters"]["add"] == ["x"]


def test_send_window_uses_timestamps_from_the_previous_task() -> None:
    asl = compile_sequence(
        seq(
            "trigger: go\nsend_window: {start: '09:00', end: '17:00'}\nsteps:\n"
            "  - send: onboarding/tips\n    subject: a\n  - wait: 2d\n"
            "  - send: onboarding/tips\n    subject: b\n  - tag: {add: [x]}\n  - wait: 1d\n  - wait: 1h\n"
            "  - send: onboarding/tips\n    subject: c\n"
        )
    )
    states = asl["States"]
    assert asl["StartAt"] == "S0_schedule"  # the first mail waits for the window too
    assert states["S0_window"]["TimestampPath"] == "$.r.wake"
    # a send and its wait: the callback Task's schedule is at the window's wake-up time
    first = states["S1_send_onboarding-tips"]
    assert first["Resource"] == CALLBACK_RESOURCE and first["Parameters"]["Payload"]["wait"] == 172800
    assert first["Parameters"]["Payload"]["window"]["start"] == "09:00"
    assert first["Next"] == "S3_send_onboarding-tips" and "S2_wait_2d" not in states
    # a send, its riding tag and a wait: one callback Task; the wait after a wait stays a Wait state,
    # with its schedule Task in front (reached from a Task that does not compute its wake-up)
    second = states["S3_send_onboarding-tips"]["Parameters"]["Payload"]
    assert (second["add"], second["wait"]) == (["x"], 86400)
    assert states["S3_send_onboarding-tips"]["Next"] == "S6_schedule"
    assert states["S6_wait_1h"]["TimestampPath"] == "$.r.wake"
    assert structural_problems(asl) == []


def test_structural_checker_finds_broken_machines() -> None:
    good = compile_sequence(LINEAR)
    assert structural_problems(good) == []
    missing = copy.deepcopy(good)
    missing["States"]["S3_send_onboarding-tips"]["Next"] = "Nowhere"
    assert any("does not exist" in p for p in structural_problems(missing))
    orphan = copy.deepcopy(good)
    orphan["States"]["Lonely"] = {"Type": "Succeed"}
    assert structural_problems(orphan) == ["Lonely: unreachable from StartAt"]
    loop = copy.deepcopy(good)
    loop["States"]["S7_send_onboarding-tips"].pop("End")
    loop["States"]["S7_send_onboarding-tips"]["Next"] = "S5_send_onboarding-tips"
    loop["States"]["S7_send_onboarding-tips"]["Catch"] = []
    loop["States"]["S5_send_onboarding-tips"]["Catch"] = []
    assert any("no path from here ever ends" in p for p in structural_problems(loop))
    both = copy.deepcopy(good)
    both["States"]["S1_send_onboarding-tips"]["End"] = True
    assert any("exactly one of Next and End" in p for p in structural_problems(both))


def test_exit_and_trailing_wait_go_through_one_finish_task() -> None:
    asl = compile_sequence(
        seq(
            "trigger: go\nsteps:\n  - if: {tag: a}\n    then: [exit]\n"
            "    else: [{send: onboarding/tips, subject: x}]\n"
            "  - if: {tag: b}\n    then: [exit]\n  - wait: 1h\n"
        )
    )
    assert structural_problems(asl) == []
    finish = asl["States"]["Finish"]
    assert finish["Parameters"]["action"] == "finish" and finish["End"] is True
    assert asl["States"]["S3_wait_1h"]["Next"] == "Finish"


# ----- conditions and windows ------------------------------------------------------------
@pytest.mark.parametrize(
    ("condition", "tags", "attributes", "expected"),
    [
        ({"tag": "pro"}, {"pro"}, {}, True),
        ({"not": {"tag": "pro"}}, {"pro"}, {}, False),
        ({"attribute": "plan", "equals": "pro"}, set(), {"plan": "pro"}, True),
        ({"attribute": "n", "equals": 1}, set(), {"n": True}, False),
        ({"attribute": "n", "equals": True}, set(), {"n": 1}, False),
        ({"attribute": "plan", "in": ["a", "b"]}, set(), {"plan": "b"}, True),
        ({"attribute": "plan", "exists": True}, set(), {"plan": None}, False),
        ({"attribute": "plan", "exists": False}, set(), {}, True),
        ({"attribute": "n", "greater": 3}, set(), {"n": "9"}, False),
        ({"attribute": "n", "less": 3}, set(), {"n": 2.5}, True),
        ({"all": [{"tag": "a"}, {"any": [{"tag": "b"}, {"tag": "c"}]}]}, {"a", "c"}, {}, True),
    ],
)
def test_evaluate(
    condition: dict[str, Any], tags: set[str], attributes: dict[str, Any], expected: bool
) -> None:
    assert evaluate(parse_condition(condition), tags, attributes) is expected


def test_engagement_conditions_need_the_lookup() -> None:
    condition = parse_condition({"any": [{"opened": "a/b"}, {"sent": "c/d"}]})
    assert evaluate(condition, set(), {}, lambda kind, key: (kind, key) == ("sent", "c/d")) is True
    with pytest.raises(ValueError):
        evaluate(condition, set(), {})


def test_window_waits_for_the_next_opening_in_the_subscriber_zone() -> None:
    window = SendWindow(days=["mon", "tue", "wed", "thu", "fri"], start="09:00", end="17:00", timezone="UTC")
    friday_evening = datetime(2026, 11, 20, 18, 30, tzinfo=UTC)  # a Friday
    assert next_in_window(friday_evening, window, ZoneInfo("UTC")) == datetime(2026, 11, 23, 9, 0, tzinfo=UTC)
    inside = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)
    assert next_in_window(inside, window, ZoneInfo("UTC")) == inside
    # New York is UTC-5 in November: 09:00 local is 14:00 UTC
    assert wake_at(inside, 0, window, {"timezone": "America/New_York"}) == "2026-11-23T14:00:00Z"
    assert wake_at(inside, 0, window, {"timezone": "Not/AZone"}) == "2026-11-23T10:00:00Z"
    assert wake_at(inside, 90, None, {}) == "2026-11-23T10:01:30Z"


@given(
    st.from_regex(NAME_RE, fullmatch=True).filter(lambda s: len(s) <= 64), st.text(min_size=1, max_size=60)
)
def test_execution_names_are_deterministic_short_and_valid(sequence_id: str, event_key: str) -> None:
    name = execution_name(sequence_id, "a@example.com", event_key)
    assert name == execution_name(sequence_id, "a@example.com", event_key)
    assert name != execution_name(sequence_id, "b@example.com", event_key)
    assert len(name) <= 80
    assert all(c.isalnum() or c in "-_." for c in name)
    machine = f"arn:aws:states:us-east-1:1:stateMachine:mailstep-seq-{sequence_id}"
    assert state_machine_of(execution_arn(machine, name)) == machine


@given(st.from_regex(NAME_RE, fullmatch=True), st.from_regex(NAME_RE, fullmatch=True))
def test_tag_keys_are_injective_and_jsonpath_safe(a: str, b: str) -> None:
    assert (tag_key(a) == tag_key(b)) == (a == b)
    assert all(c.isalnum() or c == "_" for c in tag_key(a))
