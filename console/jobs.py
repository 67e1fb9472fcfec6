"""Reads that take longer than a page may: run in the background while the page answers at once.

The Hygiene page's forecast reads the day buckets of the next 14 days (about 530 DynamoDB
requests: docs/console.md). Against AWS that is a second or two; on the local runtime, where one
process serves every request, several seconds. A page asking for it starts it here (or joins the
read already under way for the same key) and, while the read is not done, answers at once
"still reading" with a page that refreshes itself; the read's answer is shown by the refresh
that finds it done. Each such read is named by the page's URL (a ``run``
id the page adds): reloading a shown forecast shows the same one, a new "Forecast now" reads
again. Only reads go through here: nothing that changes the target runs in the background.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

KEPT = 16  # finished reads kept (the oldest dropped first); a dropped one is read again if asked


@dataclass
class Job:
    """One background read: its answer or its failure once ``done`` is set."""

    started: float  # time.monotonic() at the start
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None
    seconds: float | None = None  # how long it took, once done

    def elapsed(self) -> float:
        return self.seconds if self.seconds is not None else time.monotonic() - self.started


class Jobs:
    """The console's background reads, by key (at most one running per key)."""

    def __init__(self, kept: int = KEPT) -> None:
        self._jobs: dict[Hashable, Job] = {}
        self._lock = threading.Lock()
        self._kept = kept

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._jobs

    def start(self, key: Hashable, read: Callable[[], Any]) -> Job:
        """The read named ``key``: the one running or done under that key, else ``read()``
        started in a thread. A read that failed is forgotten once its failure was handed out,
        so asking again reads again."""
        with self._lock:
            job = self._jobs.get(key)
            if job is not None:
                if job.done.is_set() and job.error is not None:
                    del self._jobs[key]  # its failure is shown now; the next ask reads again
                return job
            job = Job(started=time.monotonic())
            self._jobs[key] = job
            self._drop_old()
        threading.Thread(target=self._run, args=(job, read), name="console-read", daemon=True).start()
        return job

    def _run(self, job: Job, read: Callable[[], Any]) -> None:
        try:
            job.result = read()
        except BaseException as exc:  # handed to the page that asks next (the problem page)  # noqa: BLE001
            job.error = exc
        finally:
            job.seconds = time.monotonic() - job.started
            job.done.set()

    def _drop_old(self) -> None:
        finished = [k for k, j in self._jobs.items() if j.done.is_set()]  # oldest first (insertion order)
        for key in finished[: max(0, len(finished) - self._kept)]:
            del self._jobs[key]
