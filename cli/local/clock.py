"""The virtual clock behind Step Functions Wait states and Retry intervals.

``speed=None`` makes every wait instant (tests); ``speed=N`` waits ``seconds / N`` of
wall time (``mailstep dev --speed N``). Either way the virtual time each wait stood for
is recorded, so tests can assert that "30 days" really went by.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field


@dataclass
class VirtualClock:
    speed: float | None = None
    advanced_s: float = 0.0  # total virtual seconds waited (sum over all waits)
    waits: list[float] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def wall_seconds(self, seconds: float) -> float:
        return 0.0 if self.speed is None else max(0.0, seconds) / self.speed

    def record(self, seconds: float) -> None:
        with self._lock:
            self.advanced_s += max(0.0, seconds)
            self.waits.append(seconds)

    def wait(self, seconds: float, interrupt: threading.Event | None = None) -> None:
        """Stand for ``seconds`` of virtual time; returns early when ``interrupt`` is set."""
        self.record(seconds)
        wall = self.wall_seconds(seconds)
        if wall <= 0:
            return
        if interrupt is not None:
            interrupt.wait(wall)
        else:
            time.sleep(wall)

    def sleep(self, seconds: float) -> None:
        self.wait(seconds)
