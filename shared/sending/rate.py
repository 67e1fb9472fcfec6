"""Send-rate limiting shared by every concurrent worker: one DynamoDB counter per time window.

Why a shared window counter and not per-worker pacing (``share / concurrency``): pacing
only reaches the rate when every one of the assumed workers is busy all the time; with
fewer messages in flight (a queue draining, a cold start, Lambda scaling the mapping up
and down) the achieved rate drops, and with more workers than assumed it overshoots. A
shared counter gives whatever capacity is free to whoever asks, so the sum over all
workers stays at the rate while it is achievable.

How: time is cut into windows of ``window_s`` (about 10 mails' worth, 0.1-1 s). Window
``w`` holds ``floor((w+1)·rate·window_s) - floor(w·rate·window_s)`` tokens, so the average
is exactly ``rate`` even when it is not a whole number per window. A worker asks for up to
that many tokens with ONE UpdateItem: ``ADD used :n`` on ``RATE#<scope>#<w>`` / ``<w>``
(a partition key per window, so no key takes more than one window's requests)
(ReturnValues UPDATED_NEW); it was granted ``min(n, cap - (used - n))`` (never negative).
Over-asking only raises the recorded count of a window that is already full. No
conditional write, no retry loop, no clock coordination beyond NTP-synchronised hosts.
Items expire through ``ttl`` after a minute.

Other mail first: a broadcast may use the account's whole rate, and the rest of mailstep's mail
(transactional, sequences, sign-up confirmations) takes its share first. Each such send adds 1
to its second's reservation counter before its SES call (:class:`Reservations`: one of
``RESERVE_SHARDS`` keys per second picked at random, so no key takes more than a quarter of it),
and sends whatever the count says; the broadcast limiter takes the last full second's count off
its rate (read once a second per process: one BatchGetItem). So broadcasts give way within about
a second to the other mail actually being sent, and use all of the rate when there is none.
While they give way, a transactional send that SES still throttles (the second before the
broadcast saw it) is retried in place after a short pause (``shared.sending.pipeline``).

Cost: one write (1 WRU) per grant. A worker asks once per window while it has mail, so
requests per mail are about ``workers / tokens per window`` (e.g. 3 workers at 50/s with
10-token windows: 0.3 WRU per mail, $0.19 per million mails). Bursts are at most one
window's tokens, well inside SES's one-second bucket.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from shared.core.aws import client as aws_client
from shared.store import keys
from shared.store.dynamo import key, values

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sesv2 import SESV2Client


RESERVED_SCOPE = "broadcast"  # the broadcast limiter's scope: the other mail reserves in it
RESERVE_SHARDS = 4  # keys of one second's reservation counter
RESERVE_TTL_S = 60
TOKENS_PER_WINDOW = 10
MIN_WINDOW_S = 0.1
MAX_WINDOW_S = 1.0
WINDOW_TTL_S = 60


def window_seconds(rate: float) -> float:
    return min(MAX_WINDOW_S, max(MIN_WINDOW_S, TOKENS_PER_WINDOW / rate))


def window_capacity(rate: float, window_s: float, index: int) -> int:
    per = rate * window_s
    return math.floor((index + 1) * per + 1e-9) - math.floor(index * per + 1e-9)


@dataclass
class Reservations:
    """The mail other than broadcasts, counted per second (see the module doc)."""

    table: str
    scope: str
    client: DynamoDBClient | None = None
    clock: Callable[[], float] = time.time
    requests: int = 0  # UpdateItem and BatchGetItem calls made (bench, tests)
    _seen: tuple[int, int] = (-1, 0)  # (second, its count) last read
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def _ddb(self) -> DynamoDBClient:
        return self.client or aws_client("dynamodb")

    def reserve(self, n: int = 1) -> None:
        """Count ``n`` sends of this second (one UpdateItem on a random shard)."""
        now = self.clock()
        shard = random.randrange(RESERVE_SHARDS)  # noqa: S311 - spreading writes, not crypto
        self._ddb.update_item(
            TableName=self.table,
            Key=key(*keys.rate_reserve_key(self.scope, int(now), shard)),
            UpdateExpression="ADD used :n SET #ttl = if_not_exists(#ttl, :ttl)",
            ExpressionAttributeNames={"#ttl": "ttl"},
            ExpressionAttributeValues=values(n=n, ttl=int(now) + RESERVE_TTL_S),
        )
        with self._lock:
            self.requests += 1

    def last_second(self) -> int:
        """The sends counted in the last full second: read once per second and process."""
        second = int(self.clock()) - 1
        with self._lock:
            if self._seen[0] == second:
                return self._seen[1]
        wanted = [key(*keys.rate_reserve_key(self.scope, second, n)) for n in range(RESERVE_SHARDS)]
        answer = self._ddb.batch_get_item(RequestItems={self.table: {"Keys": wanted}})
        used = sum(
            int(i["used"]["N"]) for i in answer.get("Responses", {}).get(self.table, []) if "used" in i
        )
        with self._lock:
            self.requests += 1
            self._seen = (second, used)
        return used


@dataclass
class WindowLimiter:
    """Tokens for ``rate`` mails per second, shared through the table by every process."""

    table: str
    scope: str
    rate: float
    client: DynamoDBClient | None = None
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    requests: int = 0  # UpdateItem calls made (bench, tests)
    # the other mail, served first: its last second's count is taken off ``rate`` (None: all of it)
    reservations: Reservations | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if self.rate <= 0:
            raise ValueError("the rate must be positive")
        self.window_s = window_seconds(self.rate)

    @property
    def _ddb(self) -> DynamoDBClient:
        return self.client or aws_client("dynamodb")

    def try_acquire(self, n: int) -> tuple[int, float]:
        """Ask for up to ``n`` tokens of the current window: (granted, seconds to its end)."""
        now = self.clock()
        index = int(now // self.window_s)
        rate = self.rate
        if self.reservations is not None:
            rate = max(0.0, rate - self.reservations.last_second())
        cap = window_capacity(rate, self.window_s, index)
        left = (index + 1) * self.window_s - now
        want = max(0, min(n, cap))
        if want == 0:
            return 0, left
        response = self._ddb.update_item(
            TableName=self.table,
            Key=key(*keys.rate_window_key(self.scope, index)),
            UpdateExpression="ADD used :n SET #ttl = if_not_exists(#ttl, :ttl)",
            ExpressionAttributeNames={"#ttl": "ttl"},
            ExpressionAttributeValues=values(n=want, ttl=int(now) + WINDOW_TTL_S),
            ReturnValues="UPDATED_NEW",
        )
        with self._lock:
            self.requests += 1
        used = int(response["Attributes"]["used"]["N"])
        return max(0, min(want, cap - (used - want))), left

    def acquire(self, n: int, deadline: float | None = None) -> int:
        """Block until at least one token is granted (or ``deadline``, wall time: 0)."""
        while True:
            granted, left = self.try_acquire(n)
            if granted:
                return granted
            wait = left + random.uniform(0, self.window_s * 0.1)  # noqa: S311 - jitter, not crypto
            if deadline is not None and self.clock() + wait > deadline:
                return 0
            self.sleep(wait)


@dataclass
class TokenPool:
    """Hands a worker's threads single tokens, fetching them from the shared limiter in bulk
    (one request per window per worker, not per mail)."""

    limiter: WindowLimiter
    _tokens: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def take(self, wanted_ahead: int, deadline: float | None = None) -> bool:
        """One token; ``wanted_ahead`` (mails still to send) sizes the bulk request."""
        with self._lock:
            if self._tokens == 0:
                self._tokens = self.limiter.acquire(max(1, wanted_ahead), deadline)
                if self._tokens == 0:
                    return False
            self._tokens -= 1
            return True


@dataclass(frozen=True)
class SendQuota:
    max_send_rate: float
    max_24_hour_send: float
    sent_last_24_hours: float


def read_quota(client: SESV2Client | None = None) -> SendQuota:
    """The account's SES sending quota (sesv2 GetAccount)."""
    quota = (client or aws_client("sesv2")).get_account()["SendQuota"]
    return SendQuota(
        max_send_rate=float(quota.get("MaxSendRate", 1.0)),
        max_24_hour_send=float(quota.get("Max24HourSend", 200.0)),
        sent_last_24_hours=float(quota.get("SentLast24Hours", 0.0)),
    )


def share_of(max_send_rate: float, *, cap: float, share: float) -> float:
    """The rate one class of mail may use: ``share`` of the account's rate (or of ``cap`` when
    it is lower). What is left is reserved for the others (sequences, transactional)."""
    base = min(max_send_rate, cap) if cap > 0 else max_send_rate
    return max(0.1, base * share)
