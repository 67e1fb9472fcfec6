"""Bench scenarios: one module each, registered here with one line.

A scenario module has ``NAME``, ``DESCRIPTION`` and ``run(bench) -> list[Measurement]``.
"""

from __future__ import annotations

from types import ModuleType

from bench.scenarios import audiences, broadcast, hygiene, sequences, signup, subscribe, webhooks

SCENARIOS: dict[str, ModuleType] = {
    subscribe.NAME: subscribe,
    sequences.NAME: sequences,
    broadcast.NAME: broadcast,
    signup.NAME: signup,
    webhooks.NAME: webhooks,
    hygiene.NAME: hygiene,
    audiences.NAME: audiences,
}
