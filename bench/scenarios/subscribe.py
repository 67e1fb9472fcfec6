"""The subscribe path: ``subscriber.subscribed`` events through POST /v1/events.

Two shapes of the same 100 new subscribers: one event per request, and one request
carrying a batch of 100. A warm-up request first, so the cold start (secret fetch,
imports) is not charged to the steady state.
"""

from __future__ import annotations

from bench.harness import Bench
from bench.meter import Measurement

NAME = "subscribe"
DESCRIPTION = "subscriber.subscribed via POST /v1/events: one event per request vs a batch of 100"
EVENTS = 100


def _event(prefix: str, i: int) -> dict[str, object]:
    return {
        "type": "subscriber.subscribed",
        "email": f"{prefix}{i}@example.com",
        "first_name": f"Reader {i}",
        "tags": {"add": ["newsletter", "trial"]},
        "attributes": {"plan": "trial", "source": "bench"},
    }


def _expect_ok(status: int, answer: object) -> None:
    if status != 200:
        raise RuntimeError(f"POST /v1/events answered {status}: {answer}")


def run(bench: Bench) -> list[Measurement]:
    _expect_ok(*bench.post("/v1/events", _event("warmup", 0)))

    def one_per_request() -> None:
        for i in range(EVENTS):
            _expect_ok(*bench.post("/v1/events", _event("single", i)))

    def one_batch() -> None:
        _expect_ok(*bench.post("/v1/events", {"events": [_event("batch", i) for i in range(EVENTS)]}))

    return [
        bench.measure("1 event per request", EVENTS, "event", one_per_request),
        bench.measure(f"batch of {EVENTS}", EVENTS, "event", one_batch),
    ]
