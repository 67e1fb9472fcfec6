"""The virtual clock behind Step Functions Wait states and Retry intervals.

``speed=None`` makes every wait instant (tests); ``speed=N`` waits ``seconds / N`` of
wall time (``mailstep dev --speed N``). Either way the virtual time each wait stood for
is recorded, so tests can assert that "30 days" really went by. SQS message delays
(``DelaySeconds``) run on it too (``local_aws.hooks``) and are recorded in ``delays``.

The clock can be paused (``POST /_local/clock {"paused": true}``): virtual time stands
still, so no Wait state and no Retry interval ends until it is resumed. A paused wait
still ends early when its execution stops (``running`` turns false). A wait already running
when the clock is paused (``mailstep dev --speed N``: a wall-clock wait) is held too, with the
rest of its time; it goes on from there when the clock resumes. This is how a test or the demo
holds executions in the middle of a sequence, deterministically, even when waits are otherwise
instant. ``held`` counts the waits the pause is holding right now.

The calendar is apart from the waits: ``mailstep local advance --days N`` moves the runtime's
days ahead of the wall clock (``calendar_offset_s``): the scheduled EventBridge rules fire for
each schedule time it passes (``local_aws.eventbridge.ScheduledRules``), and the local SES
stamps the events it publishes with the calendar's time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

PAUSE_POLL_S = 0.05  # how often a held wait checks that its execution still runs


@dataclass
class VirtualClock:
    speed: float | None = None
    advanced_s: float = 0.0  # total virtual seconds waited (sum over all waits)
    waits: list[float] = field(default_factory=list)
    # SQS DelaySeconds of messages sent while it ran (virtual seconds each), kept apart from
    # the Wait states and Retry intervals above
    delays: list[float] = field(default_factory=list)
    held: int = 0  # waits held by a pause right now
    # The calendar (``mailstep local advance``): seconds the runtime's days are ahead of the wall
    # clock. Scheduled rules fire for the days it passes; local SES stamps its events with it.
    calendar_offset_s: float = 0.0
    _running: threading.Event = field(default_factory=threading.Event, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self._running.set()

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def wall_seconds(self, seconds: float) -> float:
        return 0.0 if self.speed is None else max(0.0, seconds) / self.speed

    def record(self, seconds: float) -> None:
        with self._lock:
            self.advanced_s += max(0.0, seconds)
            self.waits.append(seconds)

    def record_delay(self, seconds: float) -> None:
        with self._lock:
            self.delays.append(max(0.0, seconds))

    def _hold(self, running: Callable[[], bool] | None) -> bool:
        """Block while paused; False when the execution stopped meanwhile (the wait ends unserved)."""
        if self._running.is_set():
            return True
        with self._lock:
            self.held += 1
        try:
            while not self._running.wait(PAUSE_POLL_S):
                if running is not None and not running():
                    return False
            return True
        finally:
            with self._lock:
                self.held -= 1

    def wait(
        self,
        seconds: float,
        interrupt: threading.Event | None = None,
        running: Callable[[], bool] | None = None,
    ) -> None:
        """Stand for ``seconds`` of virtual time; returns early when ``interrupt`` is set
        (a wall-clock wait) or ``running`` turns false (its execution stopped)."""
        if not self._hold(running):
            return
        self.record(seconds)
        remaining = self.wall_seconds(seconds)
        # in slices: a pause while it runs holds the rest of it too (virtual time stands still
        # for the waits already running, not only for the ones that start meanwhile)
        while remaining > 0:
            step = min(remaining, PAUSE_POLL_S)
            started = time.monotonic()
            if interrupt is not None:
                if interrupt.wait(step):
                    return
            else:
                time.sleep(step)
            if running is not None and not running():
                return
            remaining -= time.monotonic() - started
            if remaining > 0 and not self._hold(running):
                return

    def sleep(self, seconds: float) -> None:
        self.wait(seconds)

    def calendar_now(self) -> datetime:
        """The runtime's calendar now: the wall clock, plus every advance."""
        return datetime.now(UTC) + timedelta(seconds=self.calendar_offset_s)

    def advance_calendar(self, seconds: float) -> tuple[datetime, datetime]:
        """Move the calendar ``seconds`` ahead; (the calendar before, after)."""
        with self._lock:
            before = self.calendar_now()
            self.calendar_offset_s += max(0.0, seconds)
            return before, self.calendar_now()
