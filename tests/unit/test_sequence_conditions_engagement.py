"""Conditions on a named step's mail (``{opened: {step: welcome}}``): the validator knows the
step names, the compiler hands the step function the step's code, and the machine keeps its
shape (one ``branch`` Task, as for any live condition)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.sending.rendering import TEMPLATES_DIR
from shared.sequences.compiler import compile_sequence
from shared.sequences.evaluate import evaluate
from shared.sequences.loader import SequenceInvalid
from shared.sequences.model import IfStep, parse_condition
from shared.sequences.validate import load_catalog, require_catalog

NUDGE = """\
trigger: go
steps:
  - send: onboarding/welcome
    name: welcome
    subject: Welcome
  - wait: 2d
    name: pause
  - if: {not: {opened: {step: welcome}}}
    then:
      - send: onboarding/tips
        subject: Did you see our welcome?
"""

# name -> (file text, line, step label, text the message contains)
INVALID: dict[str, tuple[str, int, str, str]] = {
    "unknown-step": (
        NUDGE.replace("{step: welcome}", "{step: welcom}"),
        8,
        "steps[2]",
        "opened: no step is named 'welcom' (named steps: pause, welcome)",
    ),
    "a-wait-step": (
        NUDGE.replace("{step: welcome}", "{step: pause}"),
        8,
        "steps[2]",
        "opened: step 'pause' is a wait step: only a send step's mail can be opened or clicked",
    ),
    "a-later-step": (
        NUDGE.replace("{step: welcome}", "{step: later}") + "        name: later\n",
        8,
        "steps[2]",
        "opened: step 'later' comes after this condition",
    ),
    "a-name-twice": (
        NUDGE.replace("name: pause", "name: welcome"),
        7,
        "steps[1]",
        "step name 'welcome' is used twice (also steps[0])",
    ),
    "a-bad-name": (NUDGE.replace("name: pause", "name: Pause Here"), 7, "steps[1]", "name: "),
    "clicked-in-a-list": (
        NUDGE.replace("{not: {opened: {step: welcome}}}", "{any: [{tag: vip}, {clicked: {step: nope}}]}"),
        8,
        "steps[2]",
        "clicked: no step is named 'nope'",
    ),
}


def _load(tmp_path: Path, text: str, name: str = "nudge") -> tuple[object, list[str]]:
    folder = tmp_path / "sequences"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.yaml").write_text(text)
    catalog, problems = load_catalog(folder, TEMPLATES_DIR)
    return catalog, [str(p) for p in problems]


@pytest.mark.parametrize("name", sorted(INVALID))
def test_a_condition_on_a_step_that_is_no_earlier_send_is_one_clear_error(name: str, tmp_path: Path) -> None:
    text, line, step, needle = INVALID[name]
    _, problems = _load(tmp_path, text, name)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"sequences/{name}.yaml:{line}: {step}: "), problems[0]
    assert needle in problems[0], problems[0]
    with pytest.raises(SequenceInvalid):
        require_catalog(tmp_path / "sequences", TEMPLATES_DIR)


def test_the_nudge_compiles_to_one_branch_task_that_knows_the_step_code(tmp_path: Path) -> None:
    _, problems = _load(tmp_path, NUDGE)
    assert problems == []
    sequence = require_catalog(tmp_path / "sequences", TEMPLATES_DIR).sequences["nudge"]
    states = compile_sequence(sequence)["States"]
    branch = states["S3_branch"]["Parameters"]
    assert branch["action"] == "branch"
    assert branch["condition"] == {"not": {"opened": {"step": "welcome"}}}
    assert branch["steps"] == {"welcome": "S1"}  # the welcome's send-once step code
    assert branch["then"]["step"] == "S3T1"
    # the same shape as the same sequence on a template condition: no state added
    by_template = NUDGE.replace("{step: welcome}", "onboarding/welcome")
    _load(tmp_path, by_template, "by-template")
    other = require_catalog(tmp_path / "sequences", TEMPLATES_DIR).sequences["by-template"]
    assert sorted(compile_sequence(other)["States"]) == sorted(states)
    assert "steps" not in compile_sequence(other)["States"]["S3_branch"]["Parameters"]


def test_the_condition_asks_the_step_lookup_and_never_the_template_lookup() -> None:
    condition = parse_condition(
        {"all": [{"opened": {"step": "welcome"}}, {"not": {"clicked": {"step": "tips"}}}]}
    )
    asked: list[tuple[str, str]] = []

    def step_mail(kind: str, name: str) -> bool:
        asked.append((kind, name))
        return kind == "opened"

    def by_template(kind: str, key: str) -> bool:
        raise AssertionError("a step condition is not a template condition")

    assert evaluate(condition, set(), {}, by_template, step_mail) is True
    assert asked == [("opened", "welcome"), ("clicked", "tips")]
    with pytest.raises(ValueError, match="live data"):
        evaluate(condition, set(), {})


def test_a_trigger_filter_may_not_test_a_step_mail(tmp_path: Path) -> None:
    text = "trigger: {event: go, where: {opened: {step: welcome}}}\n" + NUDGE.split("\n", 1)[1]
    _, problems = _load(tmp_path, text)
    assert len(problems) == 1 and "tag and attribute conditions only" in problems[0], problems


def test_step_names_are_kept_on_every_kind_of_step(tmp_path: Path) -> None:
    text = NUDGE.replace("  - if:", "  - tag: {add: [nudged]}\n    name: mark\n  - name: choose\n    if:")
    _, problems = _load(tmp_path, text)
    assert problems == []
    sequence = require_catalog(tmp_path / "sequences", TEMPLATES_DIR).sequences["nudge"]
    names = [getattr(s, "name", None) for s in sequence.steps]
    assert names == ["welcome", "pause", "mark", "choose"]
    assert isinstance(sequence.steps[3], IfStep)
