"""Webhooks on the local runtime: `mailstep webhooks` against `mailstep dev`, the deployed
dispatch and delivery functions, and receivers in this process that verify every delivery with
``standardwebhooks`` (an implementation independent of mailstep's)."""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Iterator
from typing import Any

import pytest
from standardwebhooks import Webhook

from shared.core import specs
from shared.webhooks import transport
from shared.webhooks.delivery import CIRCUIT_THRESHOLD, SCHEDULE_S
from shared.webhooks.dispatch import ENDPOINTS_MAX_AGE_S
from tests.e2e.conftest import Local
from tests.e2e.helpers import (
    MAIN,
    Tools,
    add_contact,
    eventually,
    ok_json,
    ops,
    run_session,
    subscribe,
    unique,
    unique_email,
)
from tests.eventually import eventually_async
from tests.webhook_receiver import HangingReceiver, Receiver

FAMILIES = ("subscriber", "topic", "email", "sequence", "broadcast")
TEMPLATE = "newsletter/monthly"


@pytest.fixture
def endpoints(local: Local) -> Iterator[list[str]]:
    """Endpoint ids a test added: removed after it (the session's runtime goes on)."""
    added: list[str] = []
    yield added
    for endpoint_id in added:
        ops(local, "webhooks", "remove", endpoint_id)


def add(local: Local, endpoints: list[str], url: str, events: str) -> tuple[str, str]:
    """``mailstep webhooks add``: (endpoint id, the secret it printed once)."""
    answer = ops(local, "webhooks", "add", url, "--events", events)
    assert answer.returncode == 0, answer.stdout + answer.stderr
    endpoint_id = answer.stdout.split()[1]
    secret = answer.stdout.strip().splitlines()[-1].strip()
    assert endpoint_id.startswith("ep_") and secret.startswith("whsec_"), answer.stdout
    endpoints.append(endpoint_id)
    time.sleep(ENDPOINTS_MAX_AGE_S + 0.5)  # the dispatcher's endpoints cache: changes from then on reach it
    return endpoint_id, secret


def endpoint(local: Local, endpoint_id: str) -> dict[str, Any]:
    (found,) = [e for e in ok_json(ops(local, "webhooks", "list", "--json")) if e["id"] == endpoint_id]
    return dict(found)


def verified(receiver: Receiver, secret: str) -> list[dict[str, Any]]:
    """Every delivery so far, each verified (a forged or altered one raises)."""
    return [dict(Webhook(secret).verify(r.body, r.headers)) for r in list(receiver.received)]


def test_a_receiver_sees_every_event_family_verified(
    local: Local, receiver: Receiver, endpoints: list[str]
) -> None:
    # Given an endpoint for every event
    _, secret = add(local, endpoints, receiver.url, "*")
    run = unique("wh")
    email = unique_email("wh")
    # When a subscriber joins (onboarding starts, mails, ends on the virtual clock), changes a
    # topic and gets a broadcast
    subscribe(local, email, tags=[run])
    ok_json(ops(local, "subscribers", "topics", email, "--on", "newsletter", "--json"))
    answer = ops(
        local, "broadcast", "send", "--template", TEMPLATE, "--tag", run, "--id", run, "--yes", timeout=150
    )
    assert answer.returncode == 0, answer.stdout + answer.stderr

    # Then the receiver verifies deliveries of every family about them
    def families() -> set[str]:
        mine = [
            p
            for p in verified(receiver, secret)
            if p["data"].get("email") == email or p["data"].get("broadcast_id") == run
        ]
        return {p["type"].split(".")[0] for p in mine}

    eventually(lambda: families() >= set(FAMILIES), timeout_s=120, what="a delivery of each family")
    # (deliveries run in parallel and in no guaranteed order: wait for each type, not the first)
    expected = {
        "subscriber.created",
        "topic.opted_in",
        "email.sent",
        "email.delivered",
        "sequence.started",
        "broadcast.started",
        "broadcast.completed",
    }
    eventually(
        lambda: {p["type"] for p in verified(receiver, secret)} >= expected,
        timeout_s=60,
        what="a delivery of each expected type",
    )
    for received in receiver.received:
        payload = json.loads(received.body)
        assert payload["id"] == received.headers["webhook-id"] and payload["version"] == 1


def test_a_failing_receiver_gets_the_retries_on_the_schedule_then_the_delivery_is_dead_lettered(
    local: Local, receiver: Receiver, endpoints: list[str]
) -> None:
    receiver.default = 500
    endpoint_id, secret = add(local, endpoints, receiver.url, "subscriber.created")
    delayed_before = local.status()["clock"]["queue_delay_s"]
    email = unique_email("wh-retry")
    subscribe(local, email)

    def attempts() -> list[Any]:
        return [r for r in receiver.received if json.loads(r.body)["data"].get("email") == email]

    eventually(
        lambda: len(attempts()) >= len(SCHEDULE_S), timeout_s=240, what="every attempt of the schedule"
    )
    mine = attempts()
    assert len(mine) == len(SCHEDULE_S) == 10
    assert len({r.headers["webhook-id"] for r in mine}) == 1  # the same webhook-id on every retry
    for received in mine:
        Webhook(secret).verify(received.body, received.headers)
    # the waits between them were the schedule's, on the virtual clock (SQS delays of <= 900 s)
    webhook_id = mine[0].headers["webhook-id"]

    def dead_lettered() -> list[dict[str, Any]]:
        found = ok_json(ops(local, "webhooks", "deliveries", endpoint_id, "--failed", "--json"))
        return [d for d in found if d["message_id"] == webhook_id]

    (delivery,) = eventually(dead_lettered, what="the dead-lettered delivery")
    assert delivery["attempts"] == 10
    assert [h.get("next_in_s") for h in delivery["history"]] == [*SCHEDULE_S[1:], None]
    assert local.status()["clock"]["queue_delay_s"] - delayed_before >= sum(SCHEDULE_S)
    assert endpoint(local, endpoint_id)["failing_since"]


def test_410_disables_the_endpoint_and_doctor_says_so(
    local: Local, receiver: Receiver, endpoints: list[str]
) -> None:
    receiver.default = 410
    endpoint_id, _ = add(local, endpoints, receiver.url, "subscriber.created")
    subscribe(local, unique_email("wh-gone"))
    eventually(
        lambda: endpoint(local, endpoint_id)["status"] == "disabled",
        timeout_s=60,
        what="the disabled endpoint",
    )
    assert endpoint(local, endpoint_id)["disabled_reason"] == "410 Gone"
    assert len(receiver.received) == 1
    doctor = ops(local, "doctor", "--json")
    (check,) = [c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "webhooks"]
    assert check["status"] == "fail" and endpoint_id in check["detail"] and "410" in check["detail"]


@pytest.mark.parametrize(
    "url",
    [
        "http://10.1.2.3/hook",
        "https://192.168.0.10/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://[fd00:ec2::254]/",
        "http://[::ffff:169.254.169.254]/",
        "http://[64:ff9b::a9fe:a9fe]/",
        "ftp://127.0.0.1/",
    ],
)
def test_private_and_metadata_urls_are_refused_at_add(local: Local, url: str) -> None:
    before = [e["id"] for e in ok_json(ops(local, "webhooks", "list", "--json"))]
    answer = ops(local, "webhooks", "add", url, "--events", "subscriber.*")
    assert answer.returncode == 2 and "url" in answer.stderr, answer.stdout + answer.stderr
    assert [e["id"] for e in ok_json(ops(local, "webhooks", "list", "--json"))] == before


def test_a_url_that_reaches_a_metadata_address_is_refused_at_delivery(
    local: Local, receiver: Receiver, endpoints: list[str]
) -> None:
    # Given an endpoint accepted at add whose URL now leads to the metadata address (its stored
    # URL changed underneath, as a DNS answer can change between add and delivery)
    endpoint_id, _ = add(local, endpoints, receiver.url, "subscriber.created")
    local.client("dynamodb").update_item(
        TableName=MAIN,
        Key={"PK": {"S": "WEBHOOK"}, "SK": {"S": f"EP#{endpoint_id}"}},
        UpdateExpression="SET #url = :url",
        ExpressionAttributeNames={"#url": "url"},
        ExpressionAttributeValues={":url": {"S": "http://[::ffff:169.254.169.254]/latest/meta-data/"}},
    )
    # When a test event is delivered
    assert ops(local, "webhooks", "test", endpoint_id).returncode == 0

    # Then the delivery function refuses to connect, and says why
    def refused() -> Any:
        found = ok_json(ops(local, "webhooks", "deliveries", endpoint_id, "--json"))
        return found and found[0]["history"] and "metadata" in (found[0]["last_error"] or "")

    eventually(refused, timeout_s=60, what="the refused attempt")
    assert receiver.received == []


def test_the_mcp_tools_manage_endpoints_like_the_cli(local: Local, receiver: Receiver) -> None:
    async def body(tools: Tools) -> None:
        # add: the secret once; a private URL is a tool error naming the field
        added = await tools.call("webhooks_add", url=receiver.url, events=["email.*"], description="mcp")
        endpoint_id, secret = added["endpoint"]["id"], added["secret"]
        assert secret.startswith("whsec_") and "secret" not in json.dumps(await tools.call("webhooks_list"))
        assert "url" in await tools.error("webhooks_add", url="http://169.254.169.254/", events=["email.*"])
        # test: delivered and verified; deliveries lists it
        message_id = (await tools.call("webhooks_test", endpoint_id=endpoint_id))["message_id"]
        eventually(lambda: receiver.received, timeout_s=60, what="the test delivery")
        assert (
            Webhook(secret).verify(receiver.received[0].body, receiver.received[0].headers)["type"]
            == "webhook.test"
        )
        assert receiver.received[0].headers["webhook-id"] == message_id
        # rotate: the next delivery verifies with both secrets
        rotated = (await tools.call("webhooks_rotate", endpoint_id=endpoint_id))["secret"]
        await tools.call("webhooks_test", endpoint_id=endpoint_id)

        # (a delivery's record turns `delivered` after its POST is answered: wait for the records)
        async def both_delivered() -> list[dict[str, Any]]:
            deliveries = await tools.call("webhooks_deliveries", endpoint_id=endpoint_id)
            return deliveries if [d["status"] for d in deliveries] == ["delivered"] * 2 else []

        await eventually_async(both_delivered, timeout_s=60, what="both test deliveries recorded delivered")
        assert len(receiver.received) == 2
        for key in (secret, rotated):
            Webhook(key).verify(receiver.received[1].body, receiver.received[1].headers)
        # remove needs confirm
        assert "confirm" in await tools.error("webhooks_remove", endpoint_id=endpoint_id)
        await tools.call("webhooks_remove", endpoint_id=endpoint_id, confirm=True)
        assert endpoint_id not in [e["id"] for e in await tools.call("webhooks_list")]

    run_session(local, body)


# The worst-case delay of a healthy endpoint's delivery while another endpoint hangs
# (docs/webhooks.md, "Isolation"): L + ceil(N / C) * (T + o) + (T_h + o), with T the attempt's
# bound, N the circuit's threshold, C the queue's concurrency; on the local runtime L (the
# change stream to the queue) and o (one batch's DynamoDB and SQS calls, a busy machine) are
# taken generously, T_h is the healthy receiver's answer (immediate).
STREAM_TO_QUEUE_S = 5.0
BATCH_OVERHEAD_S = 2.0
(DELIVERY_SOURCE,) = specs.WEBHOOK_DELIVER_FUNCTION.event_sources
HEALTHY_BOUND_S = (
    STREAM_TO_QUEUE_S
    + math.ceil(CIRCUIT_THRESHOLD / (DELIVERY_SOURCE.max_concurrency or 1))
    * (transport.TIMEOUT_S + BATCH_OVERHEAD_S)
    + BATCH_OVERHEAD_S
)


@pytest.fixture
def hanging() -> Iterator[HangingReceiver]:
    server = HangingReceiver().start()
    yield server
    server.stop()


def deliveries_of(local: Local, endpoint_id: str) -> list[dict[str, Any]]:
    """The endpoint's delivery records, read from the table (no CLI process per look)."""
    found = local.client("dynamodb").query(
        TableName=MAIN,
        KeyConditionExpression="PK = :pk",
        ExpressionAttributeValues={":pk": {"S": f"WHD#{endpoint_id}"}},
        ConsistentRead=True,
    )
    return [
        {
            "email": json.loads(i["body"]["S"])["data"].get("email"),
            "status": i["status"]["S"],
            "attempts": int(i["attempts"]["N"]),
        }
        for i in found["Items"]
    ]


def circuit_of(local: Local, endpoint_id: str) -> str:
    item = local.client("dynamodb").get_item(
        TableName=MAIN, Key={"PK": {"S": "WEBHOOK"}, "SK": {"S": f"EP#{endpoint_id}"}}, ConsistentRead=True
    )["Item"]
    return str(item.get("circuit", {}).get("S", "closed"))


def healthy_delays(local: Local, endpoint_id: str, run: str, count: int) -> list[float]:
    """``count`` new contacts, one every 0.5 s; each one's delay from its change until its
    delivery to ``endpoint_id`` is recorded ``delivered`` (seen by polling the records)."""
    changed: dict[str, float] = {}
    seen: dict[str, float] = {}

    def look() -> bool:
        now = time.monotonic()
        for d in deliveries_of(local, endpoint_id):
            if d["status"] == "delivered" and d["email"] in changed:
                seen.setdefault(d["email"], now)
        return len(seen) == count

    for n in range(count):
        email = f"{run}-{n}@example.com"
        changed[email] = time.monotonic()
        add_contact(local, email)
        look()
        time.sleep(0.5)  # events spread over time, arriving while the hanging attempts hold slots
    eventually(look, timeout_s=120, interval_s=0.05, what="every healthy delivery recorded delivered")
    return sorted(seen[e] - changed[e] for e in changed)


@pytest.mark.parametrize("with_hanging", [True, False], ids=["hanging-neighbour", "alone"])
def test_a_hanging_receiver_does_not_delay_a_healthy_endpoint_beyond_the_bound(
    local: Local, receiver: Receiver, hanging: HangingReceiver, endpoints: list[str], with_hanging: bool
) -> None:
    # Given a healthy endpoint and (or not) one whose receiver accepts connections and never answers
    if with_hanging:
        add(local, endpoints, hanging.url, "subscriber.created")
    healthy_id, _ = add(local, endpoints, receiver.url, "subscriber.created")
    # When events for both come, one every half second
    delays = healthy_delays(local, healthy_id, unique("iso"), 8)
    # Then every healthy delivery is recorded delivered within the stated bound
    print(  # noqa: T201 - the measured numbers (pytest -s)
        f"healthy delivery delay ({'with' if with_hanging else 'without'} a hanging receiver): "
        f"min {delays[0]:.2f} s, median {statistics.median(delays):.2f} s, max {delays[-1]:.2f} s, "
        f"bound {HEALTHY_BOUND_S:.1f} s"
    )
    assert delays[-1] <= HEALTHY_BOUND_S, delays
    if with_hanging:
        assert hanging.connections >= 1  # the hanging endpoint's deliveries were attempted


@pytest.mark.timeout(600)  # its waits, generous for a loaded machine
def test_a_hanging_endpoint_s_circuit_opens_parks_without_connections_and_closes_when_it_answers(
    local: Local, hanging: HangingReceiver, endpoints: list[str]
) -> None:
    # Given an endpoint whose receiver hangs, and events for it until its circuit opens
    endpoint_id, _ = add(local, endpoints, hanging.url, "subscriber.created")
    run = unique("cb")
    for n in range(CIRCUIT_THRESHOLD):
        add_contact(local, f"{run}-{n}@example.com")
    # (generous waits: each hanging attempt holds a worker 10 s, longer on a loaded machine)
    eventually(lambda: circuit_of(local, endpoint_id) == "open", timeout_s=180, what="the open circuit")
    # When more events come for it
    later = [f"{run}-later{n}@example.com" for n in range(5)]
    for email in later:
        add_contact(local, email)

    # Then they are parked: recorded pending with no attempt made, no connection for them
    def parked() -> list[dict[str, Any]]:
        mine = [d for d in deliveries_of(local, endpoint_id) if d["email"] in later]
        return mine if len(mine) == len(later) and all(d["attempts"] == 0 for d in mine) else []

    eventually(parked, timeout_s=120, what="the later deliveries parked")
    # every connection the receiver saw is an attempt of the first deliveries (their retries until
    # the circuit opened, then the probe, one at a time: locally its back-off runs on the virtual
    # clock, so a new probe starts as each one times out)
    first_attempts = sum(d["attempts"] for d in deliveries_of(local, endpoint_id) if d["email"] not in later)
    assert hanging.connections <= first_attempts
    # When the receiver answers again
    hanging.hang = False
    # Then a probe closes the circuit and every delivery, parked ones included, is delivered
    expected = ["delivered"] * (CIRCUIT_THRESHOLD + len(later))
    eventually(
        lambda: [d["status"] for d in deliveries_of(local, endpoint_id)] == expected,
        timeout_s=240,
        what="every delivery recorded delivered",
    )
    assert circuit_of(local, endpoint_id) == "closed"
