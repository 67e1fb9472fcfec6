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
class WindowLimiter:
    """Tokens for ``rate`` mails per second, shared through the table by every process."""

    table: str
    scope: str
    rate: float
    client: DynamoDBClient | None = None
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    requests: int = 0  # UpdateItem calls made (bench, tests)
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
        cap = window_capacity(self.rate, self.window_s, index)
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
