"""The shared rate limiter at a production account's scale, in simulated time.

The local runtime runs at most 8 worker environments and sends about 50 mails/s, so at
MaxSendRate 1,000/s its workers never wait for the limiter. In AWS the broadcast queue runs
``specs.broadcast_workers(rate)`` workers (60 at 1,000/s), each sending as fast as its vCPU
allows (``WORKER_CPU_MS_PER_MAIL``): together more than the rate, so they wait for tokens, and
what the limiter costs then is what its waiting workers ask. This runs the product's limiter
(``shared.sending.rate``: :class:`RateLimiter` and :class:`TokenPool`, one per worker process)
against one in-memory clock item that answers UpdateItem as DynamoDB does (the condition
checked, a refusal carrying the item), every worker a thread on a virtual clock: a worker's
sleep moves only its own time, and exactly one worker runs at a time, the one whose time is
earliest. It counts every UpdateItem the limiter sends, refused ones included, per token.
"""

from __future__ import annotations

import heapq
import random
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from bench.meter import Measurement
from shared.core import specs
from shared.core.settings import Settings
from shared.sending.rate import RateLimiter, TokenPool

SIMULATED_S = 10.0
SPREAD_S = 1.0  # the workers start within this long of each other
SEED = 7


class ClockItem:
    """UpdateItem on the limiter's clock item, as DynamoDB answers it."""

    def __init__(self) -> None:
        self.tat: int | None = None
        self.refused = 0

    def update_item(self, **request: Any) -> dict[str, Any]:
        v = {name: int(value["N"]) for name, value in request["ExpressionAttributeValues"].items()}
        ahead = self.tat is not None and self.tat >= v[":now"]
        if ahead != request["ConditionExpression"].startswith("tat >="):
            self.refused += 1
            found = {} if self.tat is None else {"Item": {"tat": {"N": str(self.tat)}}}
            error = {"Error": {"Code": "ConditionalCheckFailedException", "Message": "refused"}, **found}
            raise ClientError(error, "UpdateItem")  # type: ignore[arg-type]
        self.tat = (self.tat or 0) + v[":d"] if ahead else v[":end"]
        return {"Attributes": {"tat": {"N": str(self.tat)}}}


@dataclass
class VirtualTime:
    """Runs threads one at a time in the order of their own virtual clocks."""

    now: dict[int, float] = field(default_factory=dict)  # thread id -> its time
    _queue: list[tuple[float, int]] = field(default_factory=list)
    _turn: int | None = None
    _cond: threading.Condition = field(default_factory=threading.Condition)

    def clock(self) -> float:
        return self.now[threading.get_ident()]

    def sleep(self, seconds: float) -> None:
        me = threading.get_ident()
        with self._cond:
            self.now[me] += max(0.0, seconds)
            heapq.heappush(self._queue, (self.now[me], me))
            self._next()
            self._cond.wait_for(lambda: self._turn == me)

    def start(self, me: int, at: float) -> None:
        with self._cond:
            self.now[me] = at
            heapq.heappush(self._queue, (at, me))
            self._cond.wait_for(lambda: self._turn == me)

    def done(self) -> None:
        with self._cond:
            self._next()

    def _next(self) -> None:
        self._turn = heapq.heappop(self._queue)[1] if self._queue else None
        self._cond.notify_all()

    def go(self, workers: int) -> None:
        with self._cond:
            self._cond.wait_for(lambda: len(self._queue) == workers)
            self._next()


def simulate(
    rate: float, workers: int, in_flight: int, mail_s: float, seconds: float = SIMULATED_S
) -> tuple[int, int]:
    """(tokens taken, limiter requests) of ``workers`` workers, each sending a mail every
    ``mail_s`` seconds of its CPU while tokens come, until ``seconds`` after the last start."""
    table, time = ClockItem(), VirtualTime()
    pools = [
        TokenPool(
            RateLimiter("bench", "broadcast", rate, client=table, clock=time.clock, sleep=time.sleep),
            in_flight=in_flight,
        )  # type: ignore[arg-type]  # fmt: skip
        for _ in range(workers)
    ]
    taken = Counter[int]()
    start = 1_000_000.0
    draw = random.Random(SEED)  # noqa: S311 - a reproducible spread, not crypto
    # workers start within a second of each other, and a mail's CPU time varies by +-20%
    offsets = [draw.uniform(0, SPREAD_S) for _ in range(workers)]
    jitters = [random.Random(SEED + i) for i in range(workers)]  # noqa: S311

    def work(index: int) -> None:
        time.start(threading.get_ident(), start + offsets[index])
        while time.clock() < start + SPREAD_S + seconds:
            if pools[index].take(wanted_ahead=100):
                taken[index] += 1
            time.sleep(mail_s * jitters[index].uniform(0.8, 1.2))
        time.done()

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(workers)]
    for thread in threads:
        thread.start()
    time.go(workers)
    for thread in threads:
        thread.join()
    return sum(taken.values()), sum(p.limiter.requests for p in pools)


def at_account_rate(rate: float) -> Measurement:
    """The limiter's requests per mail with the deployed worker count at ``rate``."""
    workers = specs.broadcast_workers(rate)
    in_flight = Settings.model_fields["broadcast_worker_threads"].default
    mail_s = specs.WORKER_CPU_MS_PER_MAIL / 1000
    tokens, requests = simulate(rate, workers, in_flight, mail_s)
    return Measurement(
        label=(
            f"the limiter alone at {rate:,.0f}/s: {workers} workers x {in_flight} in flight, "
            f"{1 / mail_s:.0f} mails/s each (simulated: {tokens / (SIMULATED_S + SPREAD_S):.0f}/s)"
        ),
        units=tokens,
        unit_name="email",
        requests=Counter({("dynamodb", "UpdateItem"): requests}),
        wru=float(requests),
        rru=0.0,
        lambda_invocations=0,
        lambda_gb_s=0.0,
        sfn_transitions=0,
        ses_sends=0,
        http_requests=0,
        sqs_platform_requests=0,
    )
