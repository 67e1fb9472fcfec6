"""The console's background reads (console.jobs): one read per key, its answer kept, a
failure handed out once and then read again, the oldest finished reads dropped."""

from __future__ import annotations

import threading

import pytest

from console.jobs import Jobs


def test_a_key_reads_once_while_running_and_keeps_its_answer() -> None:
    jobs = Jobs()
    gate = threading.Event()
    calls: list[int] = []

    def read() -> str:
        calls.append(1)
        gate.wait(5)
        return "answer"

    first = jobs.start("k", read)
    again = jobs.start("k", read)  # while it runs: the same read

    assert again is first and not first.done.wait(0.05)
    gate.set()
    assert first.done.wait(5) and first.result == "answer" and first.error is None
    assert first.seconds is not None and first.elapsed() == first.seconds
    assert jobs.start("k", read) is first  # done: the same answer, no new read
    assert len(calls) == 1
    other = jobs.start("other", read)
    assert other is not first and other.done.wait(5) and len(calls) == 2


def test_a_failed_read_is_handed_out_once_then_read_again() -> None:
    jobs = Jobs()
    outcomes = iter([RuntimeError("throttled"), "fine"])

    def read() -> str:
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    failed = jobs.start("k", read)
    assert failed.done.wait(5)
    shown = jobs.start("k", read)  # the page that finds it done shows the failure

    assert shown is failed and isinstance(shown.error, RuntimeError)
    retried = jobs.start("k", read)
    assert retried is not failed and retried.done.wait(5) and retried.result == "fine"


@pytest.mark.parametrize("kept", [1, 3])
def test_only_the_newest_finished_reads_are_kept(kept: int) -> None:
    jobs = Jobs(kept=kept)
    for n in range(kept + 2):
        assert jobs.start(n, lambda n=n: n).done.wait(5)
    running = threading.Event()
    jobs.start("running", lambda: running.wait(5))  # starting one drops the oldest finished ones

    assert [n for n in range(kept + 2) if n in jobs] == list(range(2, kept + 2))
    assert "running" in jobs
    running.set()
