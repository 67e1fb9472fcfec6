"""The subscribe path: new subscribers (profile, two tags, two attributes) through
POST /v1/events, as an event that triggers no sequence, so the numbers are those of
ingestion alone (validation, the profile + TAG# transaction, the event record).
``subscriber.subscribed`` also starts the sequences it triggers: the ``sequences``
scenario measures that part (StartExecution, the EXEC pair, every step).

Two shapes of the same 100 new subscribers: one event per request, and one request
carrying a batch of 100; then the first 100 again, one event per request, as existing
subscribers (a new tag: the write that assumed them new is refused and brings the profile
back). A warm-up request first, so the cold start (secret fetch, imports) is not charged to
the steady state. Each step ends when the table streams' pollers are idle (``Bench.settle``): the
list-health fold's and the webhook dispatcher's requests for the step's profiles are counted in it.
"""

from __future__ import annotations

from bench.harness import Bench
from bench.meter import Measurement

NAME = "subscribe"
DESCRIPTION = "new subscribers via POST /v1/events (no sequence triggered): one per request vs a batch of 100"
EVENTS = 100


def _event(prefix: str, i: int, tags: tuple[str, ...] = ("newsletter", "trial")) -> dict[str, object]:
    return {
        "type": "contact.created",  # upserts the profile like subscriber.subscribed; triggers nothing
        "email": f"{prefix}{i}@example.com",
        "first_name": f"Reader {i}",
        "tags": {"add": list(tags)},
        "attributes": {"plan": "trial", "source": "bench"},
    }


def _expect_ok(status: int, answer: object) -> None:
    if status != 200:
        raise RuntimeError(f"POST /v1/events answered {status}: {answer}")


def run(bench: Bench) -> list[Measurement]:
    _expect_ok(*bench.post("/v1/events", _event("warmup", 0)))
    bench.settle()

    def one_per_request() -> None:
        for i in range(EVENTS):
            _expect_ok(*bench.post("/v1/events", _event("single", i)))
        bench.settle()

    def one_batch() -> None:
        _expect_ok(*bench.post("/v1/events", {"events": [_event("batch", i) for i in range(EVENTS)]}))
        bench.settle()

    def existing_one_per_request() -> None:
        for i in range(EVENTS):
            _expect_ok(*bench.post("/v1/events", _event("single", i, tags=("customer",))))
        bench.settle()

    return [
        bench.measure("1 event per request", EVENTS, "event", one_per_request),
        bench.measure(f"batch of {EVENTS}", EVENTS, "event", one_batch),
        bench.measure("existing subscriber, 1 event per request", EVENTS, "event", existing_one_per_request),
    ]
