"""Waiting in tests, for every tier: :func:`eventually` polls the state a test then asserts and,
when it gives up, names what it waited for and the last value it saw (docs/testing.md, "A calm
suite": wait for the state you assert, never for a proxy of it, never with a bare sleep).

Unless a test asks for a fixed ``interval_s`` (a state that lasts only a moment), the pause between
two looks grows x1.5 from :data:`FIRST_INTERVAL_S` up to :data:`MAX_INTERVAL_S`: a wait of a few
seconds looks a dozen times, not a hundred. Either way a pause is never shorter than
:data:`COST_FACTOR` times what the last look took, so a look that costs CPU (a query the local
runtime answers, a large outbox) takes at most a fifth of the CPU from the work it waits for.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

T = TypeVar("T")

FIRST_INTERVAL_S = 0.05
MAX_INTERVAL_S = 1.0
COST_FACTOR = 4


class _Pauses:
    """The pauses between the looks of one wait (the module docstring says how they grow)."""

    def __init__(self, interval_s: float | None, timeout_s: float) -> None:
        self.fixed = interval_s is not None
        self.pause = FIRST_INTERVAL_S if interval_s is None else interval_s
        self.deadline = time.monotonic() + timeout_s

    def over(self) -> bool:
        return time.monotonic() >= self.deadline

    def next(self, look_started: float) -> float:
        """How long to sleep after a look that started at ``look_started`` (never past the
        deadline, where the last look is made)."""
        now = time.monotonic()
        wanted = max(self.pause, COST_FACTOR * (now - look_started))
        if not self.fixed:
            self.pause = min(self.pause * 1.5, MAX_INTERVAL_S)
        return max(0.0, min(wanted, self.deadline - now))


def eventually(
    condition: Callable[[], T], timeout_s: float = 30.0, what: str = "", interval_s: float | None = None
) -> T:
    """Call ``condition`` until it returns something truthy (returned) or ``timeout_s`` passed:
    then fail naming ``what`` and the last value seen. ``condition`` runs once more at the deadline,
    so a slow machine that reaches the state just then still passes."""
    assert what, "eventually() names what it waits for"
    pauses = _Pauses(interval_s, timeout_s)
    while True:
        started = time.monotonic()
        value = condition()
        if value:
            return value
        if pauses.over():
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what} (last: {value!r:.300})")
        time.sleep(pauses.next(started))


async def eventually_async(
    condition: Callable[[], Awaitable[T]],
    timeout_s: float = 30.0,
    what: str = "",
    interval_s: float | None = None,
) -> T:
    """:func:`eventually` for a condition that is awaited (an MCP tool's answer, say)."""
    assert what, "eventually_async() names what it waits for"
    pauses = _Pauses(interval_s, timeout_s)
    while True:
        started = time.monotonic()
        value = await condition()
        if value:
            return value
        if pauses.over():
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what} (last: {value!r:.300})")
        await anyio.sleep(pauses.next(started))
