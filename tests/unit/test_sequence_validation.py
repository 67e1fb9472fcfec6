"""Invalid sequence files: each gives exactly one clear error naming file, line and step."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from shared.sending.rendering import TEMPLATES_DIR
from shared.sequences import SEQUENCES_DIR
from shared.sequences.loader import SequenceInvalid
from shared.sequences.validate import load_catalog, require_catalog

OK_SEND = "  - send: onboarding/tips\n    subject: Tips\n"

# name -> (file text, expected line, expected step label or None, text the message contains)
INVALID: dict[str, tuple[str, int, str | None, str]] = {
    "unknown-top-key": (f"trigger: go\nsteps:\n{OK_SEND}sned: now\n", 5, None, "unknown key 'sned'"),
    "unknown-step-key": (
        "trigger: go\nsteps:\n  - send: onboarding/tips\n    subjct: Tips\n",
        4,
        "steps[0]",
        "unknown key 'subjct'",
    ),
    "bad-duration": (f"trigger: go\nsteps:\n{OK_SEND}  - wait: 2 days\n", 5, "steps[1]", "bad duration"),
    "zero-duration": (f"trigger: go\nsteps:\n  - wait: 0d\n{OK_SEND}", 3, "steps[0]", "bad duration"),
    "missing-template": (
        "trigger: go\nsteps:\n  - send: onboarding/nope\n    subject: x\n",
        3,
        "steps[0]",
        "template 'onboarding/nope' not found",
    ),
    "undefined-subject-variable": (
        'trigger: go\nsteps:\n  - send: onboarding/tips\n    subject: "Hi {{ nickname }}"\n',
        3,
        "steps[0]",
        "undefined variable 'nickname'",
    ),
    "undefined-template-variable": (
        "trigger: go\nsteps:\n  - send: bad/undefined\n    subject: Hi\n",
        3,
        "steps[0]",
        "undefined variable 'favourite_colour'",
    ),
    "empty-steps": ("trigger: go\nsteps: []\n", 2, None, "steps must not be empty"),
    "unknown-condition": (
        f"trigger: go\nsteps:\n  - if: {{haz_tag: pro}}\n    then:\n  {OK_SEND.strip()}\n",
        3,
        "steps[0]",
        "unknown condition 'haz_tag'",
    ),
    "400-days-of-waits": (
        f"trigger: go\nsteps:\n{OK_SEND}  - wait: 52w\n{OK_SEND}  - wait: 4w\n{OK_SEND}",
        8,
        "steps[3]",
        "longest path reaches 392.0 days",
    ),
    "longest-branch-plus-send-windows": (
        "trigger: go\nsend_window: {days: [mon], start: '09:00', end: '10:00'}\nsteps:\n"
        f"  - wait: 50w\n  - if: {{tag: pro}}\n    then:\n      - wait: 2w\n    else:\n"
        f"      - send: onboarding/tips\n        subject: Tips\n      - wait: 1d\n{OK_SEND}",
        12,
        "steps[2]",
        "past the 365 days",
    ),
    "hash-in-tag": (f"trigger: go\nsteps:\n{OK_SEND}  - tag: {{add: ['vip#1']}}\n", 5, "steps[1]", "no '#'"),
    "unreachable-after-exit": (
        f"trigger: go\nsteps:\n  - exit\n{OK_SEND}",
        4,
        "steps[1]",
        "unreachable step: it follows an exit",
    ),
    "unknown-step": (
        f"trigger: go\nsteps:\n{OK_SEND}  - mail: onboarding/tips\n",
        5,
        "steps[1]",
        "unknown step 'mail'",
    ),
    "bad-reentry": (f"trigger: go\nreentry: sometimes\nsteps:\n{OK_SEND}", 2, None, "reentry"),
    "two-attribute-tests": (
        "trigger: go\nsteps:\n  - if: {attribute: plan, equals: a, exists: true}\n"
        f"    then:\n  {OK_SEND.strip()}\n",
        3,
        "steps[0]",
        "exactly one of equals, in, exists, greater, less",
    ),
    "bad-timezone": (
        f"trigger: go\nsend_window: {{timezone: Mars/Olympus}}\nsteps:\n{OK_SEND}",
        2,
        None,
        "unknown time zone 'Mars/Olympus'",
    ),
    "yaml-syntax": ("trigger: go\nsteps:\n  - send: [unclosed\n", 4, None, "YAML syntax error"),
    "exit-on-trigger": (
        f"trigger: go\nexit_on: [go]\nsteps:\n{OK_SEND}",
        2,
        None,
        "exit_on names the trigger",
    ),
    "duplicate-key": (f"trigger: go\ntrigger: again\nsteps:\n{OK_SEND}", 2, None, "duplicate key 'trigger'"),
    "missing-trigger": (f"steps:\n{OK_SEND}", 1, None, "missing key 'trigger'"),
    "empty-if": (
        "trigger: go\nsteps:\n  - if: {tag: pro}\n",
        3,
        "steps[0]",
        "if needs steps in then or else",
    ),
    "live-trigger-filter": (
        f"trigger: {{event: go, where: {{opened: onboarding/tips}}}}\nsteps:\n{OK_SEND}",
        1,
        None,
        "tag and attribute conditions only",
    ),
    "one-off-with-steps": (
        f"on: {{event: paid, send: onboarding/tips, subject: x}}\nsteps:\n{OK_SEND}",
        2,
        None,
        "takes no 'steps'",
    ),
    "nested-bad-tag": (
        "trigger: go\nsteps:\n  - if: {tag: pro}\n    then:\n      - tag: {add: [Pro]}\n",
        5,
        "steps[0].then[0]",
        "must match [a-z0-9][a-z0-9_.-]*",
    ),
    "bad-event-type": (f"trigger: Trial Started\nsteps:\n{OK_SEND}", 1, None, "event type"),
}


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("t") / "templates"
    shutil.copytree(TEMPLATES_DIR, root)
    (root / "bad").mkdir()
    (root / "bad" / "undefined.md").write_text("---\nsubject: Hi\n---\nYour colour: {{ favourite_colour }}\n")
    return root


def test_there_are_at_least_fifteen_invalid_fixtures() -> None:
    assert len(INVALID) >= 15


@pytest.mark.parametrize("name", sorted(INVALID))
def test_invalid_file_gives_one_error_with_file_line_and_step(
    name: str, templates: Path, tmp_path: Path
) -> None:
    text, line, step, needle = INVALID[name]
    folder = tmp_path / "sequences"
    folder.mkdir()
    (folder / f"{name}.yaml").write_text(text)
    catalog, problems = load_catalog(folder, templates)
    assert len(problems) == 1, [str(p) for p in problems]
    problem = problems[0]
    assert problem.file == f"sequences/{name}.yaml"
    assert (problem.line, problem.step) == (line, step), str(problem)
    assert needle in problem.message, str(problem)
    assert str(problem).startswith(f"sequences/{name}.yaml:{line}:")
    assert len(catalog) == 0
    with pytest.raises(SequenceInvalid) as raised:
        require_catalog(folder, templates)
    assert f"sequences/{name}.yaml:{line}:" in str(raised.value)


def test_duplicate_sequence_id_across_yaml_and_yml(templates: Path, tmp_path: Path) -> None:
    folder = tmp_path / "sequences"
    folder.mkdir()
    for suffix in ("yaml", "yml"):
        (folder / f"dup.{suffix}").write_text(f"trigger: go\nsteps:\n{OK_SEND}")
    catalog, problems = load_catalog(folder, templates)
    assert [str(p) for p in problems] == [
        "sequences/dup.yml:1: duplicate sequence id 'dup' (also sequences/dup.yaml)"
    ]
    assert list(catalog.sequences) == ["dup"]


def test_file_name_must_be_a_valid_sequence_id(templates: Path, tmp_path: Path) -> None:
    folder = tmp_path / "sequences"
    folder.mkdir()
    (folder / "Bad Name.yaml").write_text(f"trigger: go\nsteps:\n{OK_SEND}")
    _, problems = load_catalog(folder, templates)
    assert len(problems) == 1 and "sequence id (the file name)" in problems[0].message


def test_shipped_examples_are_valid() -> None:
    catalog = require_catalog(SEQUENCES_DIR)
    assert {"onboarding", "trial-expiring"} <= set(catalog.sequences)
    onboarding = catalog.sequences["onboarding"]
    assert onboarding.trigger_event == "subscriber.subscribed"
    trial = catalog.sequences["trial-expiring"]
    assert (trial.trigger_event, trial.exit_on) == ("trial.started", ["purchase.completed"])
    assert [s.id for s in catalog.exiting_on("purchase.completed")] == ["onboarding", "trial-expiring"]


def test_a_valid_file_with_every_feature_parses(templates: Path, tmp_path: Path) -> None:
    folder = tmp_path / "sequences"
    folder.mkdir()
    (folder / "full.yaml").write_text(
        """
description: everything at once
trigger: {event: trial.started, where: {all: [{tag: trial}, {not: {attribute: plan, in: [pro]}}]}}
exit_on: purchase.completed
transactional: false
reentry: restart
sender: {from: "Acme <hi@acme.test>", reply_to: help@acme.test}
timeout: 4w
send_window: {days: [mon, tue, wed, thu, fri], start: 9, end: "17:30", timezone: Europe/Paris}
steps:
  - send: onboarding/welcome
    variants: [{subject: "B subject"}, {send: onboarding/tips, weight: 2}]
  - wait: 12h
  - if: {any: [{opened: onboarding/welcome}, {clicked: onboarding/welcome}, {sent: onboarding/tips}]}
    then: [{tag: {add: engaged}}]
    else: [{wait: 30m}, exit]
  - if: {attribute: seats, greater: 5}
    then: [{send: onboarding/pro-tips, subject: Team}]
  - tag: {remove: [trial]}
"""
    )
    catalog, problems = load_catalog(folder, templates)
    assert problems == []
    full = catalog.sequences["full"]
    assert full.timeout == 28 * 86400 and full.send_window is not None
    assert full.send_window.start == "09:00"
    assert catalog.by_trigger("trial.started") == [full]
