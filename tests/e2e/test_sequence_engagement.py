"""A sequence that branches on a named step's mail, on the local runtime: the nudge of
docs/sequences.md ("a nudge for those who did not open the welcome within two days") goes only
to readers who did not open the welcome as a person. An open Apple Mail Privacy Protection made
(``mailstep local open --mpp``) is a machine's and counts as not opened.

No shipped sequence has the nudge, so the test deploys its own file the way
``tests/e2e/test_sequence_topics.py`` does (a state machine calling the runtime's step function,
started by ``mailstep subscribers import --trigger --sequences-dir``): every step runs in the
deployed shape, the two-day wait on the virtual clock.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.e2e.conftest import ROOT, Local
from tests.e2e.helpers import events_of, eventually, ok_json, ops, paused_clock, unique
from tests.e2e.test_sequence_topics import _deploy, _mail_to, _runs_done

WELCOME, NUDGE = "Welcome aboard", "Did you see our welcome?"


def _project(tmp_path: Path, sequence_id: str) -> Path:
    shutil.copy(ROOT / "topics.yaml", tmp_path / "topics.yaml")
    (tmp_path / "templates").symlink_to(ROOT / "templates", target_is_directory=True)
    folder = tmp_path / "sequences"
    folder.mkdir()
    (folder / f"{sequence_id}.yaml").write_text(
        "trigger: subscriber.subscribed\nsteps:\n"
        f"  - send: onboarding/welcome\n    name: welcome\n    subject: {WELCOME}\n"
        "  - wait: 2d\n"
        "  - if: {not: {opened: {step: welcome}}}\n"
        f"    then:\n      - send: onboarding/tips\n        subject: {NUDGE}\n"
    )
    return folder


def _opens(local: Local, email: str) -> list[str | None]:
    return [e.get("machine") for e in events_of(local, email) if e["type"] == "open"]


def test_the_nudge_goes_only_to_readers_who_did_not_open_the_welcome_as_a_person(
    local: Local, tmp_path: Path
) -> None:
    run = unique("nudge")
    person, machine, silent = (f"{who}-{run}@example.com" for who in ("person", "machine", "silent"))
    readers = (person, machine, silent)
    folder = _project(tmp_path, run)
    _deploy(local, folder)
    imported = tmp_path / "readers.csv"
    imported.write_text("email\n" + "\n".join(readers) + "\n")

    with paused_clock(local):  # the executions stop at their two-day wait
        # Given three readers in the sequence, each with the welcome
        start = ("import", str(imported), "--trigger", "--sequences-dir", str(folder), "--json")
        report = ok_json(ops(local, "subscribers", *start))
        assert report["rejected"] == [] and report["sequences_started"] == 3, report
        eventually(
            lambda: all(len(_mail_to(local, run, email)) == 1 for email in readers),
            what="the welcome to the three readers",
        )
        # When one opens it as a person, and Apple's proxy prefetches it for another
        assert ops(local, "local", "open", person).returncode == 0
        assert ops(local, "local", "open", "--mpp", machine).returncode == 0
        eventually(lambda: _opens(local, person) == [None], what="the person's open recorded")
        eventually(lambda: _opens(local, machine) == ["mpp"], what="the machine open recorded")

    # Then after the two days the nudge goes to the machine-only reader and the silent one, not
    # to the reader who opened; every execution ends normally
    eventually(lambda: _runs_done(local, run, 3), what="the three executions to succeed", timeout_s=60)
    subjects = {email: [m["Subject"] for m in _mail_to(local, run, email)] for email in readers}
    assert subjects == {person: [WELCOME], machine: [WELCOME, NUDGE], silent: [WELCOME, NUDGE]}, subjects
