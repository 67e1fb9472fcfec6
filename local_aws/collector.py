"""Python's cyclic garbage collector in the local runtime's process: the survivors of each full
collection are frozen (``gc.freeze``), so the next full collection does not walk them again.

The emulator keeps every stored item, message and record as Python objects in this one process
(at 10,000 subscribers, millions of them). A collection of the oldest generation walks every
tracked object while holding the interpreter lock: 1.35 s at 10,000 subscribers, measured by
``python -m bench console`` (docs/console.md), during which no request to the emulator, the
console or a Lambda's endpoint is answered. CPython starts one when the objects that reached the
oldest generation since the last one exceed a quarter of those it holds (``long_lived_pending``
against ``long_lived_total / 4``, ``Modules/gcmodule.c``), so they come again as the store
grows. ``gc.freeze`` (Python's ``gc`` documentation, 3.7 on) moves every tracked object to a
permanent generation that collections ignore.

Here, after a full collection, a thread freezes everything that survived it: the next full
collection walks only what reached the oldest generation since. Frozen objects are still freed by
reference counting when the last reference goes (a deleted item, an expired message); only a
cycle among them that becomes garbage after its freeze stays in memory (the emulator's stored
data holds no cycles; a request's transient cycles are collected young, before they could be
frozen, or are a few objects).
"""

from __future__ import annotations

import gc
import threading
from typing import Any

_installed = False
_lock = threading.Lock()
_collected = threading.Event()  # a full collection ended: freeze its survivors


def _after(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop" and info.get("generation") == 2:
        _collected.set()  # not gc.freeze() here: the collector is still running its callbacks


def _freezer() -> None:
    while True:
        _collected.wait()
        _collected.clear()
        gc.freeze()


def install() -> None:
    """Freeze the survivors of every full collection from now on (idempotent, process-wide)."""
    global _installed
    with _lock:
        if _installed:
            return
        gc.callbacks.append(_after)
        threading.Thread(target=_freezer, name="gc-freezer", daemon=True).start()
        _installed = True
