"""The local runtime's garbage collector policy (local_aws.collector): after a full collection,
what survived it is frozen, so the next full collection does not walk it; frozen objects are
still freed when their last reference goes. Run in a child process: freezing is process-wide."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import gc, json, time, weakref

    class Item:  # tracked by the collector, like the emulator's stored items
        pass

    def wait_frozen(before):
        deadline = time.monotonic() + 10
        while gc.get_freeze_count() <= before and time.monotonic() < deadline:
            time.sleep(0.01)
        return gc.get_freeze_count()

    from local_aws import collector
    collector.install()
    collector.install()  # idempotent: one callback
    store = [Item() for _ in range(50_000)]
    gone = Item()
    ref = weakref.ref(gone)
    store.append(gone)
    before = gc.get_freeze_count()
    gc.collect()  # a full collection (generation 2)
    frozen = wait_frozen(before)
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    store.remove(gone)
    del gone
    print(json.dumps({
        "callbacks": sum(1 for c in gc.callbacks if c is collector._after),
        "frozen": frozen - before,
        "store_in_oldest": sum(1 for o in store if id(o) in oldest),
        "freed": ref() is None,
    }))
    """
)


def test_a_full_collections_survivors_are_frozen_and_still_freed_by_reference_counting() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)

    assert found["callbacks"] == 1
    assert found["frozen"] >= 50_000  # the store and everything else alive
    assert found["store_in_oldest"] == 0  # the next full collection does not walk them
    assert found["freed"] is True  # a frozen object still goes with its last reference
