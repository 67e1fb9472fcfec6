"""A pause of the local clock holds the waits already running too (``mailstep dev --speed N``:
a wall-clock wait), not only the ones that start while it is paused: mail a sequence scheduled
weeks ahead does not go out while the clock stands still."""

from __future__ import annotations

import threading

from local_aws.clock import VirtualClock
from tests.eventually import eventually


def test_a_pause_holds_a_wait_already_running_until_the_clock_resumes() -> None:
    clock = VirtualClock(speed=1.0)  # a day of virtual time is a day of wall time: it runs now
    stopped, running = threading.Event(), threading.Event()
    running.set()
    wait = threading.Thread(target=clock.wait, args=(86400, stopped, running.is_set), daemon=True)
    wait.start()
    eventually(lambda: clock.waits == [86400], 5, "the wait under way", interval_s=0.01)
    assert clock.held == 0

    clock.pause()

    eventually(lambda: clock.held == 1, 5, "the running wait held by the pause", interval_s=0.01)
    assert wait.is_alive()

    clock.resume()  # it goes on with the rest of its day

    eventually(lambda: clock.held == 0, 5, "the wait running again", interval_s=0.01)
    assert wait.is_alive()
    stopped.set()  # the execution's state changed (StopExecution): the wait ends
    wait.join(5)
    assert not wait.is_alive() and clock.waits == [86400]


def test_a_running_wait_held_by_a_pause_ends_unserved_when_its_execution_stops() -> None:
    clock, running = VirtualClock(speed=1.0), threading.Event()
    running.set()
    wait = threading.Thread(target=clock.wait, args=(86400, None, running.is_set), daemon=True)
    wait.start()
    eventually(lambda: clock.waits == [86400], 5, "the wait under way", interval_s=0.01)
    clock.pause()
    eventually(lambda: clock.held == 1, 5, "the running wait held by the pause", interval_s=0.01)

    running.clear()  # StopExecution while paused

    wait.join(5)
    assert not wait.is_alive() and clock.paused and clock.held == 0
