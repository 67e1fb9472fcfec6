"""Send-rate limiting shared by every concurrent worker: one DynamoDB counter per time window.

Why a shared window counter and not per-worker pacing (``share / concurrency``): pacing
only reaches the rate when every one of the assumed workers is busy all the time; with
fewer messages in flight (a queue draining, a cold start, Lambda scaling the mapping up
and down) the achieved rate drops, and with more workers than assumed it overshoots. A
shared counter gives whatever capacity is free to whoever asks, so the sum over all
workers stays at the rate while it is achievable.

How: a virtual clock, one DynamoDB item (``RATE#<scope>`` / ``clock``) holding ``tat``, the
instant (microseconds) at which the next token falls due. A worker takes a *lease* of ``k``
tokens with ONE UpdateItem that moves the clock on by ``k / rate``: ``ADD tat :d`` on the
condition ``tat >= :now`` (the clock is ahead: the lease starts where the last one ended), or,
when the clock is behind (nobody sent for a while), ``SET tat = :now + :d`` on the opposite
condition. The lease's tokens fall due ``1 / rate`` apart from its start, and the worker's threads
wait for their token's instant (:class:`TokenPool`): the sum over every worker is exactly the
rate, paced, with no burst. A worker guesses the branch: ahead when its last lease ended later
than now, or when that lease started more than its own length after the ask (the workers queue
for tokens: they want more than the rate), else behind; a wrong guess is told the current
``tat`` by the refusal itself (``ReturnValuesOnConditionCheckFailure`` ``ALL_OLD``) and takes
the other branch: at most 2 requests, 1 when the guess is right.

No worker is ever refused tokens, so none polls: a starved worker's lease simply starts later
and it sleeps until then, computed from the clock it was given. (The limiter before this one
cut time into 0.1-1 s windows of counted tokens; at 1,000/s every worker that found the current
window spent asked again each window: up to 10 refused UpdateItems a second per worker.) The
lease ``k`` (:func:`lease_size`) is twice the worker's sends in flight, at least ``rate / 100``
(so the clock item takes at most about 100 writes a second) and at most half a second of the
rate. The item expires through ``ttl`` a minute after its last write; an expired clock is a
clock behind.

Other mail first: a broadcast may use the account's whole rate, and the rest of mailstep's mail
(transactional, sequences, sign-up confirmations) takes its share first. Each such send adds 1
to its second's reservation counter before its SES call (:class:`Reservations`: one of
``RESERVE_SHARDS`` keys per second picked at random, so no key takes more than a quarter of it),
and sends whatever the count says; the broadcast limiter takes the last full second's count off
its rate (read once a second per process: one BatchGetItem). So broadcasts give way within about
a second to the other mail actually being sent, and use all of the rate when there is none.
While they give way, a transactional send that SES still throttles (the second before the
broadcast saw it) is retried in place after a short pause (``shared.sending.pipeline``).

The count is written only while a broadcast is sending: a process reads the limiter's clock
once a second (one GetItem, eventually consistent: GetItem's default, half a read unit up to
4 KB, DynamoDB Developer Guide "DynamoDB read and write operations") and reserves nothing
when no lease was taken within :data:`BROADCAST_IDLE_S` (a sequence mail's reservation was
1.0 WRU of its 15.6, docs/bench.md "What each mail writes"). A broadcast that starts sees the
other mail's count from the second after the senders saw its clock move (the read, at most a
second old, plus the last full second it reads): the other mail may find SES throttling for a
second or two longer than before, and is tried again in place as when a broadcast has not given
way yet.

Cost: one write (1 WRU) per lease, so ``1 / k`` per mail whatever the number of workers (8
sends in flight: 1/16 WRU per mail, $0.04 per million mails), plus a refused write each time
the clock had fallen behind and the worker did not know it (at the start of a broadcast). A
lease that is not used up (the batch cancelled, the invocation's deadline) leaves its tokens
unsent: the rate falls short by that much, never over.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from shared.core.aws import client as aws_client
from shared.core.errors import ConcurrentModification
from shared.store import keys
from shared.store.dynamo import key, values

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sesv2 import SESV2Client


RESERVED_SCOPE = "broadcast"  # the broadcast limiter's scope: the other mail reserves in it
RESERVE_SHARDS = 4  # keys of one second's reservation counter
RESERVE_TTL_S = 60
LEASE_MAX_S = 0.5  # a lease covers at most this much of the rate
LEASES_PER_IN_FLIGHT = 2  # a lease holds this many tokens per send the worker has in flight
CLOCK_WRITES_PER_S = 100  # leases at least rate / this: the clock item's writes a second at most
CLOCK_TTL_S = 60
# No lease taken for this long (the clock's ``tat`` this far behind): no broadcast is sending, and
# the other mail's sends are not counted (nobody would read the count).
BROADCAST_IDLE_S = 60
CLOCK_BRANCH_TRIES = 3  # the clock ahead or behind: a wrong guess is corrected by its refusal
US = 1_000_000  # the clock counts microseconds


def lease_size(rate: float, in_flight: int) -> int:
    """Tokens per lease at ``rate`` for a worker with ``in_flight`` sends at once (module doc)."""
    wanted = max(LEASES_PER_IN_FLIGHT * in_flight, math.ceil(rate / CLOCK_WRITES_PER_S))
    return max(1, min(wanted, math.floor(rate * LEASE_MAX_S)))


@dataclass(frozen=True)
class Lease:
    """``count`` tokens, the first due at ``start`` (epoch seconds), then one every ``spacing``."""

    start: float
    spacing: float
    count: int


@dataclass
class Reservations:
    """The mail other than broadcasts, counted per second (see the module doc)."""

    table: str
    scope: str
    client: DynamoDBClient | None = None
    clock: Callable[[], float] = time.time
    requests: int = 0  # UpdateItem, GetItem and BatchGetItem calls made (bench, tests)
    _seen: tuple[int, int] = (-1, 0)  # (second, its count) last read
    _broadcasting: tuple[int, bool] = (-1, False)  # (second, a broadcast is sending) last read
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def _ddb(self) -> DynamoDBClient:
        return self.client or aws_client("dynamodb")

    def broadcasting(self) -> bool:
        """Whether a broadcast took tokens within the last :data:`BROADCAST_IDLE_S`: the
        broadcast limiter's clock (``tat``) is later than that. Read once per second and
        process (one eventually consistent GetItem, half a read unit)."""
        now = self.clock()
        with self._lock:
            if self._broadcasting[0] == int(now):
                return self._broadcasting[1]
        found = self._ddb.get_item(
            TableName=self.table,
            Key=key(*keys.rate_clock_key(self.scope)),
            ProjectionExpression="tat",
        ).get("Item")
        tat = int(found["tat"]["N"]) if found and "tat" in found else 0
        sending = tat >= round((now - BROADCAST_IDLE_S) * US)
        with self._lock:
            self.requests += 1
            self._broadcasting = (int(now), sending)
        return sending

    def reserve(self, n: int = 1) -> None:
        """Count ``n`` sends of this second (one UpdateItem on a random shard), while a
        broadcast is sending (:meth:`broadcasting`); else nothing is written: no broadcast
        reads the count."""
        if not self.broadcasting():
            return
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
class RateLimiter:
    """Tokens for ``rate`` mails per second, shared through the table by every process: leases
    taken from one virtual clock (see the module doc)."""

    table: str
    scope: str
    rate: float
    client: DynamoDBClient | None = None
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    requests: int = 0  # UpdateItem calls made, refused ones included (bench, tests)
    # the other mail, served first: its last second's count is taken off ``rate`` (None: all of it)
    reservations: Reservations | None = None
    _seen_us: int = 0  # the clock's ``tat`` as this process last saw it
    _queued: bool = False  # this process's last lease started more than its span after the ask
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if self.rate <= 0:
            raise ValueError("the rate must be positive")

    @property
    def _ddb(self) -> DynamoDBClient:
        return self.client or aws_client("dynamodb")

    def rate_now(self) -> float:
        """The rate the broadcasts have this second: ``rate`` less the other mail's last second."""
        if self.reservations is None:
            return self.rate
        return max(0.0, self.rate - self.reservations.last_second())

    def lease(self, n: int, rate: float) -> Lease:
        """Take up to ``n`` tokens at ``rate`` (at least 1 a second) from the shared clock: one
        UpdateItem, two when the guess of the clock's side was wrong."""
        k = max(1, min(n, math.floor(rate * LEASE_MAX_S)))
        spacing_us = US / rate
        span = round(k * spacing_us)
        now = round(self.clock() * US)
        with self._lock:  # ahead of its last lease's end, or the workers queue for leases
            ahead = self._seen_us >= now or self._queued
        for _ in range(CLOCK_BRANCH_TRIES):
            try:
                end = self._advance(span, now) if ahead else self._restart(span, now)
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                    raise
                found: Any = exc.response.get("Item") or {}  # ALL_OLD
                seen = found.get("tat", {}).get("N")
                ahead = int(seen) >= now if seen is not None else not ahead
                continue
            with self._lock:
                self._seen_us, self._queued = max(self._seen_us, end), end - span - now > span
            return Lease(start=(end - span) / US, spacing=spacing_us / US, count=k)
        raise ConcurrentModification("the send-rate clock kept changing sides")

    def _advance(self, span: int, now: int) -> int:
        """The clock is ahead: the lease starts where it stands. Returns the lease's end."""
        response = self._update(
            "ADD tat :d SET #ttl = :ttl", "tat >= :now", d=span, now=now, ttl=now // US + CLOCK_TTL_S
        )
        return int(response["Attributes"]["tat"]["N"])

    def _restart(self, span: int, now: int) -> int:
        """The clock is behind (or gone): the lease starts now."""
        self._update(
            "SET tat = :end, #ttl = :ttl",
            "attribute_not_exists(tat) OR tat < :now",
            end=now + span,
            now=now,
            ttl=now // US + CLOCK_TTL_S,
        )
        return now + span

    def _update(self, expression: str, condition: str, **params: int) -> Any:
        with self._lock:
            self.requests += 1
        return self._ddb.update_item(
            TableName=self.table,
            Key=key(*keys.rate_clock_key(self.scope)),
            UpdateExpression=expression,
            ConditionExpression=condition,
            ExpressionAttributeNames={"#ttl": "ttl"},
            ExpressionAttributeValues=values(**params),
            ReturnValues="UPDATED_NEW",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )

    def acquire(self, n: int, deadline: float | None = None) -> Lease | None:
        """A lease of up to ``n`` tokens, its first due before ``deadline`` (wall time), else
        None. While the other mail leaves the broadcasts less than a token a second, waits for
        the next second's count without asking the clock."""
        while True:
            rate = self.rate_now()
            if rate >= 1:
                lease = self.lease(n, rate)
                return lease if deadline is None or lease.start <= deadline else None
            wait = 1.0 - self.clock() % 1.0
            if deadline is not None and self.clock() + wait > deadline:
                return None
            self.sleep(wait)


@dataclass
class TokenPool:
    """Hands a worker's threads single tokens from its lease, each at its due instant, and
    takes the next lease when this one is spent (one request per lease, not per mail)."""

    limiter: RateLimiter
    in_flight: int = 1  # the worker's sends at once: sizes its leases (:func:`lease_size`)
    _next: float = 0.0
    _spacing: float = 0.0
    _left: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def take(self, wanted_ahead: int, deadline: float | None = None) -> bool:
        """Wait for one token; ``wanted_ahead`` (mails still to send) caps the next lease.
        False when none falls due before ``deadline``."""
        with self._lock:
            if self._left == 0:
                size = lease_size(self.limiter.rate, self.in_flight)
                lease = self.limiter.acquire(max(1, min(wanted_ahead, size)), deadline)
                if lease is None:
                    return False
                self._next, self._spacing, self._left = lease.start, lease.spacing, lease.count
            due = self._next
            if deadline is not None and due > deadline:
                self._left = 0  # the rest of this lease falls due even later
                return False
            self._next += self._spacing
            self._left -= 1
        wait = due - self.limiter.clock()
        if wait > 0:
            self.limiter.sleep(wait)
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
