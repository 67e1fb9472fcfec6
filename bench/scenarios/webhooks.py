"""Webhooks: what one delivery costs, measured as the difference of two runs of the same
events.

The same 100 new subscribers (one ``contact.created`` batch through ``POST /v1/events``) are
created twice: once with no webhook endpoint (the subscribers' own cost, and the dispatcher
reading the table's change stream and finding no endpoint), once with one endpoint subscribed to
``subscriber.created`` and a receiver on loopback answering 200 at once. Each run waits until
the stream is consumed and, in the second, every delivery arrived. The second minus the first
is the cost of 100 webhook deliveries at the first attempt: the dispatcher's delivery items and
queue sends, the delivery function's reads, attempt and outcome writes, its invocations and
CPU, and the webhook queue's requests. A warm-up delivery first, so cold starts (the secret
fetch, imports) are not charged to the steady state.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from bench.harness import Bench
from bench.meter import Measurement

NAME = "webhooks"
DESCRIPTION = (
    "webhook deliveries: 100 subscriber.created events with and without an endpoint, and the difference"
)
EVENTS = 100


class _Receiver:
    """A webhook receiver on 127.0.0.1 answering 204, counting what it received."""

    def __init__(self) -> None:
        self.count = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                self.rfile.read(int(self.headers.get("content-length", "0")))
                receiver.count += 1
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _subscribers(bench: Bench, prefix: str) -> None:
    events = [{"type": "contact.created", "email": f"{prefix}{i}@example.com"} for i in range(EVENTS)]
    status, answer = bench.post("/v1/events", {"events": events})
    if status != 200:
        raise RuntimeError(f"POST /v1/events answered {status}: {answer}")


def run(bench: Bench) -> list[Measurement]:
    from ops.targets import local_target
    from ops.webhooks import Webhooks

    receiver = _Receiver()
    try:
        target = local_target(str(bench.runtime.state_dir), bench.runtime.config.region, bench.aws)
        _subscribers(bench, "warmup-no-endpoint-")  # cold starts of the API and the dispatcher
        bench.settle()
        without = bench.measure(
            "no endpoint", EVENTS, "event", lambda: (_subscribers(bench, "plain-"), bench.settle())
        )
        webhooks = Webhooks.for_target(target)
        endpoint = webhooks.add(receiver.url, "subscriber.created", "bench").endpoint
        time.sleep(3)  # the dispatcher reads the endpoints every 2 s
        _subscribers(bench, "warmup-endpoint-")  # the delivery function's cold start and secret fetch
        bench.settle(lambda: receiver.count >= EVENTS)
        start = receiver.count

        def with_endpoint() -> None:
            _subscribers(bench, "hooked-")
            bench.settle(lambda: receiver.count >= start + EVENTS)

        with_ = bench.measure("one endpoint", EVENTS, "event", with_endpoint)
        webhooks.remove(endpoint.id)
    finally:
        receiver.stop()
    return [without, with_, with_.minus(without, "webhook delivery (difference)", unit_name="delivered POST")]
