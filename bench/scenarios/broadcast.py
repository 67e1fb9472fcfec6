"""Broadcasts: one newsletter to a tag audience, through the resolver and worker Lambdas.

Three steps on separately tagged audiences: at an SES rate that does not limit (10,000/s:
what a recipient costs), at MaxSendRate 1,000/s (a production account's rate: the shared
limiter hands out tokens at that rate, and its requests, refused ones included, are counted
like every other request), and at MaxSendRate 50/s (the achieved rate against the configured
max, measured from the outbox timestamps: first to last accepted message). Subscribers are
seeded with BatchWriteItem before measuring (profile + TAG# items, as the store writes them).
A fourth column is the limiter alone at 1,000/s with the worker count deployed for that rate,
in simulated time (:mod:`bench.scenarios.limiter_scale`): the local runtime's 8 environments
never make the limiter wait, 60 workers in AWS do.
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from bench.harness import Bench
from bench.meter import Measurement
from bench.scenarios import limiter_scale
from ops.broadcasts import Broadcasts
from ops.outbox import read_outbox
from shared.broadcasts.model import parse_request
from shared.core import specs
from shared.core.aws import ClientFactory
from shared.core.settings import Settings
from shared.sending.sender import decode_tag_value
from shared.store.dynamo import serialize
from shared.store.subscribers import Profile, profile_items

NAME = "broadcast"
DESCRIPTION = "a broadcast to a tag audience: requests per recipient, overhead vs SES, rate vs MaxSendRate"
RECIPIENTS = 300
RATE = 50.0
ACCOUNT_RATE = 1000.0  # a production account's MaxSendRate: the cost line of docs/bench.md
UNLIMITED_RATE = 10_000.0  # the local SES's default: the limiter never waits
# as many batches of 100 as the measured step (300 recipients): one warm worker environment per
# batch the step runs at once
WARM_RECIPIENTS = 300
TEMPLATE = "newsletter/monthly"


def seed_tagged(aws: ClientFactory, table: str, tag: str, count: int) -> None:
    now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    items = []
    for i in range(count):
        email = f"{tag}{i:05d}@example.com"
        profile = Profile(email=email, first_name=f"R{i}", attributes={"plan": "pro"}, tags=frozenset({tag}),
                          created_at=now, updated_at=now, version=1)  # fmt: skip
        items += profile_items(profile, now)
    write_items(aws, table, items)


def write_items(aws: ClientFactory, table: str, items: list[dict[str, Any]]) -> None:
    """``items`` written with BatchWriteItem, 25 a request, the unprocessed ones again."""
    ddb = aws.client("dynamodb")
    for start in range(0, len(items), 25):
        request = {table: [{"PutRequest": {"Item": serialize(i)}} for i in items[start : start + 25]]}
        while request:
            request = ddb.batch_write_item(RequestItems=request).get("UnprocessedItems") or {}


def broadcasts_service(bench: Bench) -> Broadcasts:
    resources = bench.runtime.resources
    settings = Settings(
        table_name=resources.tables["table_name"],
        events_table_name=resources.tables["events_table_name"],
        broadcast_queue_url=resources.queues[specs.BROADCAST_QUEUE.id].url,
        broadcast_control_queue_url=resources.queues[specs.BROADCAST_CONTROL_QUEUE.id].url,
    )
    return Broadcasts.from_settings(settings, aws=bench.aws)


def _drained(aws: ClientFactory, url: str) -> bool:
    attributes = aws.client("sqs").get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return (
        int(attributes["ApproximateNumberOfMessages"])
        + int(attributes["ApproximateNumberOfMessagesNotVisible"])
        == 0
    )


def _run(bench: Bench, service: Broadcasts, broadcast_id: str, tag: str) -> None:
    service.send(parse_request(id=broadcast_id, template=TEMPLATE, audience={"tags": [tag]}))
    deadline = time.monotonic() + 600
    while service.get(broadcast_id).status != "done":
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"broadcast {broadcast_id} did not finish: {service.get(broadcast_id).public()}"
            )
        time.sleep(0.2)
    engagement = bench.runtime.resources.queues[specs.ENGAGEMENT_QUEUE.id].url
    while not _drained(bench.aws, engagement) and time.monotonic() < deadline:  # its SES events, too
        time.sleep(0.2)


def _achieved_rate(bench: Bench, broadcast_id: str) -> float:
    stamps = sorted(
        datetime.fromisoformat(m["timestamp"].replace("Z", "+00:00")).timestamp()
        for m in read_outbox(bench.runtime.outbox)
        if decode_tag_value(m.get("email_tags", {}).get("source", "")) == broadcast_id
    )
    return (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 else 0.0


def run(bench: Bench) -> list[Measurement]:
    table = bench.runtime.resources.tables["table_name"]
    seed_tagged(bench.aws, table, "bench-warm", WARM_RECIPIENTS)
    seed_tagged(bench.aws, table, "bench-news", RECIPIENTS)
    seed_tagged(bench.aws, table, "bench-rate", RECIPIENTS)
    seed_tagged(bench.aws, table, "bench-account", RECIPIENTS)
    service = broadcasts_service(bench)
    _run(bench, service, "bench-warmup", "bench-warm")  # imports, secret, first claims

    unlimited = bench.measure(
        f"{RECIPIENTS} recipients, SES rate not limiting", RECIPIENTS, "email",
        lambda: _run(bench, service, "bench-news", "bench-news"),
    )  # fmt: skip
    bench.runtime.ses.configure(max_send_rate=ACCOUNT_RATE)
    try:
        account = bench.measure(
            f"{RECIPIENTS} recipients at MaxSendRate {ACCOUNT_RATE:,.0f}/s", RECIPIENTS, "email",
            lambda: _run(bench, service, "bench-account", "bench-account"),
        )  # fmt: skip
        bench.runtime.ses.configure(max_send_rate=RATE)
        limited = bench.measure(
            f"{RECIPIENTS} recipients at MaxSendRate {RATE:g}/s", RECIPIENTS, "email",
            lambda: _run(bench, service, "bench-rate", "bench-rate"),
        )  # fmt: skip
        throttled = bench.runtime.ses.throttled
    finally:
        bench.runtime.ses.configure(max_send_rate=UNLIMITED_RATE)
    # Achieved on the deployed shape: every function from the artifact in its own environments.
    achieved = _achieved_rate(bench, "bench-rate")
    record = service.get("bench-rate")
    label = (
        f"{limited.label}; achieved {achieved:.1f}/s "
        f"({achieved / RATE:.0%} of max; share {record.send_rate:g}/s): sent {record.sent}, "
        f"failed {record.failed}, SES throttled {throttled}"
    )
    # the limiter with the deployed worker count at the account's rate, which the local runtime
    # cannot reach (bench.scenarios.limiter_scale)
    return [unlimited, account, limiter_scale.at_account_rate(ACCOUNT_RATE), replace(limited, label=label)]
