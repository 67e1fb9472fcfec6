"""Waiting in tests, for every tier: :func:`eventually` polls the state a test then asserts and,
when it gives up, names what it waited for and the last value it saw (docs/testing.md, "A calm
suite": wait for the state you assert, never for a proxy of it, never with a bare sleep)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

T = TypeVar("T")


def eventually(
    condition: Callable[[], T], timeout_s: float = 30.0, what: str = "", interval_s: float = 0.1
) -> T:
    """Call ``condition`` until it returns something truthy (returned) or ``timeout_s`` passed:
    then fail naming ``what`` and the last value seen. ``condition`` runs once more at the deadline,
    so a slow machine that reaches the state just then still passes."""
    assert what, "eventually() names what it waits for"
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what} (last: {value!r:.300})")
        time.sleep(interval_s)


async def eventually_async(
    condition: Callable[[], Awaitable[T]], timeout_s: float = 30.0, what: str = "", interval_s: float = 0.1
) -> T:
    """:func:`eventually` for a condition that is awaited (an MCP tool's answer, say)."""
    assert what, "eventually_async() names what it waits for"
    deadline = time.monotonic() + timeout_s
    while True:
        value = await condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what} (last: {value!r:.300})")
        await anyio.sleep(interval_s)
