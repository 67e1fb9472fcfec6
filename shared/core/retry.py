"""Retries: bounded attempts with jittered exponential backoff and an injectable sleep.

Plain throttling and transient request errors are botocore's job (standard retry mode,
``shared.core.aws``). This is for what a successful call leaves to do again: a transaction
cancelled by a concurrent writer (optimistic concurrency), keys or items DynamoDB left
unprocessed, a chunk of engagement writes cancelled without progress, an SES throttle the
send pipeline reports as retryable.

    for attempt in POLICY.tries(sleep=sleep):
        if try_once():
            break
    else:
        raise GaveUp(...)
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """``attempts`` tries in all (the first included); before try ``n + 1`` a pause of at most
    ``min(cap, base * 2**n)`` seconds, of which the share ``jitter`` is random (1.0: "full
    jitter", anywhere from 0 to the ceiling; 0.5: between half the ceiling and the ceiling)."""

    attempts: int
    base: float
    cap: float
    jitter: float = 1.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.base < 0 or self.cap < 0 or not 0.0 <= self.jitter <= 1.0:
            raise ValueError("attempts >= 1, base and cap >= 0, 0 <= jitter <= 1")

    def pause(self, retry: int, rand: Callable[[], float] = random.random) -> float:
        """The pause before retry number ``retry`` (0: the one before the second try);
        ``rand()`` returns a number in [0, 1)."""
        factor: int = 2**retry
        ceiling = min(self.cap, self.base * factor)
        return ceiling * (1.0 - self.jitter * rand())

    def tries(
        self,
        *,
        sleep: Callable[[float], None] = time.sleep,
        rand: Callable[[], float] = random.random,
        deadline: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> Iterator[int]:
        """Yield the try numbers ``0 .. attempts - 1``, sleeping the backoff before every try
        after the first. With ``deadline`` (a ``clock()`` time), stop instead of starting a
        pause that would end past it. The caller breaks out on success; running out of tries
        (the loop's ``else``) means giving up."""
        for attempt in range(self.attempts):
            if attempt:
                pause = self.pause(attempt - 1, rand)
                if deadline is not None and clock() + pause > deadline:
                    return
                sleep(pause)
            yield attempt
