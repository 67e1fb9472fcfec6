"""The StartExecution pace and backoff of ``shared.sequences.sfn`` on a virtual clock."""

from __future__ import annotations

import threading

import pytest

from shared.sequences.sfn import Pacer, StartPolicy


class VirtualClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.lock = threading.Lock()

    def __call__(self) -> float:
        with self.lock:
            return self.now

    def sleep(self, seconds: float) -> None:
        with self.lock:
            self.now += seconds


def test_the_pace_holds_the_average_rate_after_the_burst() -> None:
    clock = VirtualClock()
    pacer = Pacer(100.0, burst=10, clock=clock, sleep=clock.sleep)

    waits = [pacer.acquire() for _ in range(1010)]

    # the first 10 go at once, then one every 10 ms: 1,000 more take 10 s
    assert waits[:10] == [0.0] * 10 and all(w > 0 for w in waits[10:])
    assert clock.now == pytest.approx(10.0)


def test_the_pace_is_shared_by_threads() -> None:
    clock = VirtualClock()
    pacer = Pacer(50.0, burst=1, clock=clock, sleep=lambda s: None)  # each thread is told its wait
    waits: list[float] = []
    lock = threading.Lock()

    def take(n: int) -> None:
        for _ in range(n):
            wait = pacer.acquire()
            with lock:
                waits.append(wait)

    threads = [threading.Thread(target=take, args=(25,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    # 100 slots at 50/s with no time passing: the reserved slots reach 99 / 50 s ahead
    assert len(waits) == 100
    assert sorted(waits) == pytest.approx([i / 50 for i in range(100)])


def test_an_idle_pace_refills_only_up_to_its_burst() -> None:
    clock = VirtualClock()
    pacer = Pacer(10.0, burst=3, clock=clock, sleep=clock.sleep)
    clock.now = 60.0  # a minute idle

    assert [pacer.acquire() for _ in range(4)] == pytest.approx([0.0, 0.0, 0.0, 0.1])


def test_backoff_grows_to_its_cap_with_full_jitter() -> None:
    policy = StartPolicy(base_delay_s=0.2, max_delay_s=4.0)
    for attempt, ceiling in ((0, 0.2), (1, 0.4), (3, 1.6), (5, 4.0), (12, 4.0)):
        delays = [policy.delay(attempt) for _ in range(200)]
        assert all(0.0 <= d <= ceiling for d in delays)
        assert max(delays) > ceiling / 2  # jitter spreads over the whole range


def test_a_pace_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        Pacer(0)
