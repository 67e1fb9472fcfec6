"""Test support for the broadcast integration tests: a fake SES v2 client with a
MaxSendRate token bucket, seeded subscribers, and a driver that plays the Lambda pollers."""

from __future__ import annotations

import contextlib
import copy
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError
from moto.core import DEFAULT_ACCOUNT_ID
from moto.dynamodb.models import dynamodb_backends

from local_aws.provision import LocalResources, create_queue
from ops.broadcasts import Broadcasts
from shared.broadcasts.audience import AudienceResolver
from shared.broadcasts.fanout import BroadcastQueues, FanoutContext, resolve_step
from shared.broadcasts.model import parse_batch, parse_resolve
from shared.broadcasts.records import BroadcastStore
from shared.broadcasts.worker import BatchIncomplete, TokenPools, WorkerContext, process_batch
from shared.core.aws import client
from shared.core.specs import BROADCAST_CONTROL_QUEUE, BROADCAST_QUEUE
from shared.sending.pipeline import MailIdentity, SendContext
from shared.sending.sender import SesSender
from shared.store.send_log import SendLog
from shared.store.subscribers import SubscriberStore

SECRET = "broadcast-test-unsubscribe-secret-0123456789"
TAGS = ("a", "b", "c")
PLANS = ("free", "pro", "team")
COUNTRIES = ("de", "fr", "us", "es")


class Serialized:
    """A boto3 client whose calls run one at a time: in-process moto is not thread-safe
    (TransactWriteItems deep-copies the table while other threads write to it)."""

    _lock = threading.Lock()

    def __init__(self, wrapped: Any) -> None:
        self._wrapped = wrapped

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._wrapped, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            with Serialized._lock:
                return attribute(*args, **kwargs)

        return call


def ddb() -> Any:
    return Serialized(client("dynamodb"))


@dataclass
class FakeSes:
    """sesv2 ``send_email`` with SES's MaxSendRate behaviour (a bucket of one second)."""

    max_send_rate: float = 10_000.0
    sends: list[tuple[float, str]] = field(default_factory=list)  # (time, recipient)
    throttled: int = 0
    _tokens: float = 0.0
    _refilled: float = field(default_factory=time.monotonic)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._tokens = self.max_send_rate

    def send_email(self, **request: Any) -> dict[str, Any]:
        with self._lock:
            now = time.monotonic()
            rate = self.max_send_rate
            self._tokens = min(rate, self._tokens + (now - self._refilled) * rate)
            self._refilled = now
            if self._tokens < 1:
                self.throttled += 1
                raise ClientError(
                    {
                        "Error": {
                            "Code": "TooManyRequestsException",
                            "Message": "Maximum sending rate exceeded.",
                        },
                        "ResponseMetadata": {"HTTPStatusCode": 429},
                    },
                    "SendEmail",
                )
            self._tokens -= 1
            self.sends.append((time.time(), request["Destination"]["ToAddresses"][0]))
        return {"MessageId": uuid.uuid4().hex}

    def recipients(self) -> list[str]:
        return [r for _, r in self.sends]


def seed(store: SubscriberStore, count: int, *, seed_value: int = 7) -> list[dict[str, Any]]:
    """``count`` subscribers with mixed tags and attributes; some unsubscribed or suppressed."""
    rng = random.Random(seed_value)
    people = []
    for i in range(count):
        email = f"user{i:05d}@example.com"
        tags = sorted(t for t in TAGS if rng.random() < 0.45)
        attributes: dict[str, Any] = {"plan": rng.choice(PLANS), "seats": rng.randint(1, 8)}
        if rng.random() < 0.8:
            attributes["country"] = rng.choice(COUNTRIES)
        store.upsert(email, first_name=f"User{i}", attributes=attributes, add_tags=tags)
        status = "subscribed"
        suppressed = False
        if i % 17 == 3:
            store.unsubscribe(email)
            status = "unsubscribed"
        if i % 29 == 5:
            store.set_suppressed(email, True)
            suppressed = True
        people.append(
            {
                "email": email,
                "tags": set(tags),
                "attributes": attributes,
                "status": status,
                "suppressed": suppressed,
            }
        )
    return people


# (count, seed_value, table names) -> (people, each table's stored items right after seeding)
_SEEDED: dict[tuple[Any, ...], tuple[list[dict[str, Any]], dict[str, Any]]] = {}


def seeded(store: SubscriberStore, count: int, *, seed_value: int = 7) -> list[dict[str, Any]]:
    """:func:`seed`'s subscribers, written through the store once per test process: later tests
    get a copy of the tables' items as that first seeding left them (moto keeps them in
    ``Table.items``; its own table backups copy them the same way). A fixture for tests that read
    a seeded list, not for those that assert what seeding writes."""
    tables = (store.table, store.events_table)
    cache_key = (count, seed_value, tables)
    backend = dynamodb_backends[DEFAULT_ACCOUNT_ID][client("dynamodb").meta.region_name]
    if cache_key not in _SEEDED:
        people = seed(store, count, seed_value=seed_value)
        _SEEDED[cache_key] = (people, {t: copy.deepcopy(backend.tables[t].items) for t in tables})
    people, items = _SEEDED[cache_key]
    for table in tables:
        backend.tables[table].items = copy.deepcopy(items[table])
    return copy.deepcopy(people)


def eligible(people: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in people if p["status"] == "subscribed" and not p["suppressed"]]


@dataclass
class Env:
    table: str
    events_table: str
    queues: BroadcastQueues
    ses: FakeSes
    service: Broadcasts
    rate: list[float]

    def send_context(self) -> SendContext:
        return SendContext(
            store=SubscriberStore(self.table, self.events_table, client=ddb()),
            log=SendLog(self.table, client=ddb()),
            ses=SesSender("mailstep", client=self.ses),
            identity=MailIdentity(from_="Acme <news@acme.test>", postal_address="Acme, 1 Main St"),
            token_secret=lambda: SECRET,
            data_ttl_days=30,
        )

    def fanout(self, page_size: int = 1000) -> FanoutContext:
        return FanoutContext(
            records=BroadcastStore(self.table),
            resolver=AudienceResolver(self.table, page_size=page_size),
            queues=self.queues,
        )

    def worker(self, threads: int = 4, send_fn: Callable[..., Any] | None = None) -> WorkerContext:
        ctx = WorkerContext(
            records=BroadcastStore(self.table, client=ddb()),
            send=self.send_context(),
            pools=TokenPools(self.table, client=ddb()),
            threads=threads,
        )
        if send_fn is not None:
            ctx.send_fn = send_fn
        return ctx

    # ----- the pollers ----------------------------------------------------------------------
    def receive(self, url: str, n: int = 10) -> list[dict[str, Any]]:
        answer = client("sqs").receive_message(QueueUrl=url, MaxNumberOfMessages=n, VisibilityTimeout=30)
        return list(answer.get("Messages", []))

    def delete(self, url: str, message: dict[str, Any]) -> None:
        client("sqs").delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])

    def resolve_all(self, page_size: int = 1000) -> int:
        ctx = self.fanout(page_size)
        steps = 0
        while messages := self.receive(self.queues.control_url, 1):
            for message in messages:
                resolve_step(parse_resolve(message["Body"]), ctx)
                self.delete(self.queues.control_url, message)
                steps += 1
        return steps

    def batches(self) -> list[dict[str, Any]]:
        found = []
        while messages := self.receive(self.queues.batch_url):
            found += messages
        return found

    def work(self, messages: list[dict[str, Any]], ctx: WorkerContext | None = None) -> list[Any]:
        ctx = ctx or self.worker()
        results = []
        for message in messages:
            try:
                results.append(process_batch(parse_batch(message["Body"]), ctx))
            except BatchIncomplete as exc:
                results.append(exc)
                continue
            self.delete(self.queues.batch_url, message)
        return results


@contextlib.contextmanager
def broadcast_env(resources: LocalResources) -> Iterator[Env]:
    """The broadcast queues (deleted afterwards), the tables and the broadcast service, sending
    at ``Env.rate[0]`` mails a second (1,000 until a test changes it)."""
    created = [create_queue(BROADCAST_QUEUE), create_queue(BROADCAST_CONTROL_QUEUE)]
    table = resources.tables["table_name"]
    queues = BroadcastQueues(created[0].url, created[1].url)
    rate = [1000.0]
    service = Broadcasts(
        records=BroadcastStore(table),
        resolver=AudienceResolver(table),
        queues=queues,
        send_rate=lambda: rate[0],
    )
    try:
        yield Env(table, resources.tables["events_table_name"], queues, FakeSes(), service, rate)
    finally:
        sqs = client("sqs")
        for queue in created:
            sqs.delete_queue(QueueUrl=queue.url)
            sqs.delete_queue(QueueUrl=queue.dlq_url)
