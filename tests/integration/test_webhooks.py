"""Webhooks on moto: the real dispatch and delivery handlers, the tables' real change streams,
a receiver on loopback, every delivery verified with ``standardwebhooks`` (an implementation
independent of ours)."""

from __future__ import annotations

import importlib
import json
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from standardwebhooks import Webhook

from local_aws.apigw import LambdaContext
from local_aws.provision import LocalResources, create_queue
from ops.webhooks import Webhooks
from shared.core import clock, specs
from shared.core.errors import InvalidInput
from shared.core.secrets import reset_cache
from shared.store.subscribers import SubscriberStore
from shared.webhooks import transport
from shared.webhooks.delivery import (
    CIRCUIT_THRESHOLD,
    SCHEDULE_S,
    DeliveryContext,
    DeliveryQueue,
    parse_message,
    probe_delay,
    process,
)
from shared.webhooks.store import DELIVERED, DISABLED, FAILED, PENDING, WebhookStore
from tests.integration.conftest import scan_all
from tests.integration.webhook_support import Streams, sqs_records, take_queued

QUEUE = specs.WEBHOOK_QUEUE.local_name
ALL = "subscriber.*,topic.*,email.*,sequence.*,broadcast.*"


@pytest.fixture
def env(resources: LocalResources, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    values = {
        **resources.env(),
        "WEBHOOK_QUEUE_URL": create_queue(specs.WEBHOOK_QUEUE).url,
        "WEBHOOK_ALLOW_LOOPBACK_HTTP": "true",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    reset_cache()
    take_queued(QUEUE)
    return values


@pytest.fixture
def dispatcher(env: dict[str, str]) -> Any:
    return importlib.reload(importlib.import_module("functions.webhook_dispatch.handler"))


@pytest.fixture
def deliverer(env: dict[str, str]) -> Any:
    return importlib.reload(importlib.import_module("functions.webhook_deliver.handler"))


@pytest.fixture
def ops(env: dict[str, str]) -> Webhooks:
    return Webhooks(
        store=WebhookStore(env["TABLE_NAME"]),
        queue=DeliveryQueue(env["WEBHOOK_QUEUE_URL"]),
        table_name=env["TABLE_NAME"],
        data_ttl_days=30,
        allow_loopback_http=True,
    )


@pytest.fixture
def streams(resources: LocalResources) -> Streams:
    found = Streams()
    found.skip()
    return found


@pytest.fixture
def subscribe(streams: Streams, store: SubscriberStore, dispatcher: Any) -> Callable[[str], None]:
    """Subscribes an address; its change, and no earlier one, reaches the dispatch Lambda."""

    def run(email: str) -> None:
        streams.skip()
        store.upsert(email)
        dispatch(dispatcher, streams.take())

    return run


def dispatch(module: Any, records: list[dict[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = module.handler(
        {"Records": records}, LambdaContext("webhook-dispatch", timeout_s=60)
    )
    return result


def deliver(module: Any, bodies: list[str]) -> dict[str, Any]:
    event = {"Records": list(sqs_records(bodies, QUEUE))}
    result: dict[str, Any] = module.handler(event, LambdaContext("webhook-deliver", timeout_s=90))
    return result


def run_queue(module: Any, *, max_rounds: int = 400) -> list[int]:
    """Deliver what is queued, as often as it is queued again; the delays each message asked for."""
    delays: list[int] = []
    for _ in range(max_rounds):
        queued = take_queued(QUEUE)
        if not queued:
            return delays
        delays += [d for _, d in queued]
        assert deliver(module, [b for b, _ in queued]) == {"batchItemFailures": []}
    raise AssertionError("the queue never drained")


def verify(secret: str, received: Any) -> dict[str, Any]:
    return dict(Webhook(secret).verify(received.body, received.headers))


def test_events_of_each_family_reach_the_endpoint_signed(
    ops, dispatcher, deliverer, streams, store: SubscriberStore, receiver
) -> None:
    # Given an endpoint for every family
    added = ops.add(receiver.url, ALL, "all events")
    streams.skip()
    # When a subscriber is created, tagged, opted into a topic, enters and finishes a sequence,
    # gets a mail logged, is unsubscribed and erased
    store.upsert("ann@example.com", first_name="Ann")
    store.upsert("ann@example.com", add_tags=["pro"])
    store.put_execution("ann@example.com", "onboarding", "arn:exec:1")
    store.mark_execution_ended("ann@example.com", "onboarding", "arn:exec:1", "completed")
    store.delete_execution("ann@example.com", "onboarding", "arn:exec:1")
    store.unsubscribe("ann@example.com")
    store.add_event("ann@example.com", "delivery", at=clock.utc_now(), ttl_days=30, ses_message_id="m-1")
    store.erase("ann@example.com")
    assert dispatch(dispatcher, streams.take()) == {"batchItemFailures": []}
    run_queue(deliverer)
    # Then every delivery verifies with the endpoint's secret, and the events came in order of change
    payloads = [verify(added.secret, r) for r in receiver.received]
    types = [p["type"] for p in payloads]
    for expected in (
        "subscriber.created",
        "subscriber.updated",
        "sequence.started",
        "sequence.completed",
        "subscriber.unsubscribed",
        "email.delivered",
        "subscriber.deleted",
    ):
        assert expected in types, types
    assert "sequence.exited" not in types
    for payload, received in zip(payloads, receiver.received, strict=True):
        assert payload["id"] == received.headers["webhook-id"] and payload["version"] == 1
        assert "Ann" not in received.body  # the first name is no webhook's business
    assert [d.status for d in ops.deliveries(added.endpoint.id, limit=100)] == [DELIVERED] * len(payloads)


def test_a_record_and_a_message_delivered_twice_have_one_effect(
    ops, dispatcher, deliverer, streams, store, receiver
) -> None:
    added = ops.add(receiver.url, "subscriber.created")
    streams.skip()
    store.upsert("bob@example.com")
    records = streams.take()
    # the stream hands the same records twice (a retried batch)
    dispatch(dispatcher, records)
    dispatch(dispatcher, records)
    # one delivery; its first attempt may be queued again (the dispatcher cannot tell a first
    # run that stopped before queueing it), never a second delivery
    deliveries = [i for i in scan_all(store.table) if i["PK"] == f"WHD#{added.endpoint.id}"]
    assert len(deliveries) == 1
    queued = [body for body, _ in take_queued(QUEUE)]
    assert 1 <= len(queued) <= 2 and len(set(queued)) == 1
    # and SQS hands the message twice in one batch, and again later
    body = queued[0]
    deliver(deliverer, [*queued, body])
    deliver(deliverer, [body])
    assert len(receiver.received) == 1
    assert verify(added.secret, receiver.received[0])["data"] == {
        "email": "bob@example.com",
        "status": "subscribed",
        "version": 1,
    }


def test_failures_are_retried_on_the_schedule_under_one_webhook_id_then_dead_lettered(
    ops, deliverer, subscribe, receiver
) -> None:
    # Given a receiver that answers 500 every time
    receiver.default = 500
    added = ops.add(receiver.url, "subscriber.*")
    subscribe("cy@example.com")
    # When every queued message is delivered after its delay
    delays = run_queue(deliverer)
    # Then the ten attempts came under one webhook-id, each verified
    assert len(receiver.received) == len(SCHEDULE_S) == 10
    assert len({r.headers["webhook-id"] for r in receiver.received}) == 1
    for received in receiver.received:
        verify(added.secret, received)
    # on the schedule: each wait is the sum of its hops of at most 900 s
    assert max(delays) <= 900
    (delivery,) = ops.deliveries(added.endpoint.id)
    waits = [entry.get("next_in_s") for entry in delivery.history]
    assert waits == [*SCHEDULE_S[1:], None]
    assert sum(delays) == sum(SCHEDULE_S)
    # and the delivery is dead-lettered, listed by --failed, the endpoint failing but enabled
    assert delivery.status == FAILED and delivery.attempts == 10
    assert [d.message_id for d in ops.deliveries(added.endpoint.id, failed=True)] == [delivery.message_id]
    endpoint = ops.get(added.endpoint.id)
    assert endpoint.status != DISABLED and endpoint.failing_since
    # When the receiver is fixed and the failures are replayed
    receiver.default = 200
    replayed = ops.replay(added.endpoint.id, since="2000-01-01T00:00:00Z")
    run_queue(deliverer)
    assert replayed == [delivery.message_id]
    assert receiver.received[-1].headers["webhook-id"] == delivery.message_id
    assert ops.deliveries(added.endpoint.id)[0].status == DELIVERED
    assert ops.get(added.endpoint.id).failing_since is None


def test_410_disables_the_endpoint_and_nothing_more_is_dispatched_to_it(
    ops, dispatcher, deliverer, streams, store, receiver, subscribe
) -> None:
    receiver.default = 410
    added = ops.add(receiver.url, "subscriber.created")
    subscribe("dee@example.com")
    run_queue(deliverer)
    assert len(receiver.received) == 1
    endpoint = ops.get(added.endpoint.id)
    assert endpoint.status == DISABLED and endpoint.disabled_reason == "410 Gone"
    store.upsert("eve@example.com")
    dispatcher.context._endpoints = None  # past the dispatcher's endpoint cache (2 s)
    dispatch(dispatcher, streams.take())
    assert take_queued(QUEUE) == []
    # enabled again, it receives the next event
    ops.enable(added.endpoint.id)
    receiver.default = 200
    store.upsert("fay@example.com")
    dispatcher.context._endpoints = None
    dispatch(dispatcher, streams.take())
    run_queue(deliverer)
    assert len(receiver.received) == 2


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_is_honoured_for_429_and_503(ops, deliverer, subscribe, receiver, status) -> None:
    receiver.answers = [(status, {"Retry-After": "120"})]
    added = ops.add(receiver.url, "subscriber.created")
    subscribe("gus@example.com")
    deliver(deliverer, [b for b, _ in take_queued(QUEUE)])
    ((body, delay),) = take_queued(QUEUE)
    assert delay == 120 and parse_message(body).attempt == 2
    deliver(deliverer, [body])
    assert [d.status for d in ops.deliveries(added.endpoint.id)] == [DELIVERED]


def test_rotation_signs_with_both_secrets_for_a_day(ops, deliverer, subscribe, receiver) -> None:
    added = ops.add(receiver.url, "subscriber.created")
    rotated = ops.rotate(added.endpoint.id)
    assert rotated.secret != added.secret and rotated.secret.startswith("whsec_")
    subscribe("hal@example.com")
    run_queue(deliverer)
    (received,) = receiver.received
    assert len(received.headers["webhook-signature"].split(" ")) == 2
    verify(added.secret, received)
    verify(rotated.secret, received)


def test_an_endpoint_failing_for_five_days_is_disabled(ops, env, receiver) -> None:
    receiver.default = 500
    added = ops.add(receiver.url, "subscriber.created")
    store = WebhookStore(env["TABLE_NAME"])
    store.mark_failing(added.endpoint.id, clock.iso(clock.utc_now() - timedelta(days=5, minutes=1)))
    ops.test(added.endpoint.id)
    ctx = DeliveryContext(store=store, queue=ops.queue, allow_loopback_http=True)
    ((body, _),) = take_queued(QUEUE)
    assert process(parse_message(body), ctx).status == "disabled"
    endpoint = ops.get(added.endpoint.id)
    assert endpoint.status == DISABLED and endpoint.disabled_reason.startswith("failing since")


def test_add_refuses_private_and_metadata_urls_and_writes_nothing(ops, env) -> None:
    before = scan_all(env["TABLE_NAME"])
    for url, resolved in (
        ("https://intranet.example/hook", "10.0.0.5"),
        ("https://meta.example/hook", "169.254.169.254"),
        ("https://v6meta.example/hook", "fd00:ec2::254"),
        ("https://mapped.example/hook", "::ffff:169.254.169.254"),
    ):
        ops.resolver = lambda host, port, resolved=resolved: [resolved]
        with pytest.raises(InvalidInput) as raised:
            ops.add(url, "subscriber.*")
        assert raised.value.problems[0].field == "url"
    for bad_events in ("subscriber", "nope.*", ""):
        with pytest.raises(InvalidInput) as raised:
            ops.add("http://127.0.0.1:9/x", bad_events)
        assert raised.value.problems[0].field == "events"
    with pytest.raises(InvalidInput):
        ops.remove("ep_#injected")
    assert scan_all(env["TABLE_NAME"]) == before


def test_a_url_resolving_to_a_metadata_address_at_delivery_is_refused(ops, env, receiver) -> None:
    # Given an endpoint whose name resolved to a public address when it was added
    ops.resolver = lambda host, port: ["93.184.215.14"]
    added = ops.add("https://rebind.example/hook", "subscriber.created")
    ops.test(added.endpoint.id)
    posted: list[Any] = []
    # When its name now resolves to the metadata address
    ctx = DeliveryContext(
        store=WebhookStore(env["TABLE_NAME"]),
        queue=ops.queue,
        resolver=lambda host, port: ["169.254.169.254"],
        post=lambda *args, **kwargs: posted.append(args),
    )
    ((body, _),) = take_queued(QUEUE)
    outcome = process(parse_message(body), ctx)
    # Then nothing is posted and the attempt says why
    assert outcome.status == "retrying" and posted == []
    (delivery,) = ops.deliveries(added.endpoint.id)
    assert "metadata" in (delivery.last_error or "")


def test_test_event_and_remove(ops, deliverer, receiver) -> None:
    added = ops.add(receiver.url, "email.bounced", "bounces only")
    message_id = ops.test(added.endpoint.id)
    run_queue(deliverer)
    (received,) = receiver.received
    assert verify(added.secret, received)["type"] == "webhook.test"
    assert received.headers["webhook-id"] == message_id
    assert [e.id for e in ops.endpoints()] == [added.endpoint.id]
    ops.remove(added.endpoint.id)
    assert ops.endpoints() == []


def test_a_remove_that_failed_after_the_secret_is_finished_by_running_it_again(
    ops, receiver, monkeypatch
) -> None:
    added = ops.add(receiver.url, "email.bounced")
    secrets = ops.store.secrets_client

    def down(endpoint_id: str) -> None:
        raise RuntimeError("the table is unreachable")

    monkeypatch.setattr(ops.store, "delete_endpoint", down)
    with pytest.raises(RuntimeError):
        ops.remove(added.endpoint.id)
    assert [e.id for e in ops.endpoints()] == [added.endpoint.id]  # still listed: not forgotten
    assert "DeletedDate" in secrets.describe_secret(SecretId=added.endpoint.secret_name)

    monkeypatch.undo()
    ops.remove(added.endpoint.id)  # the secret is already scheduled for deletion: fine
    assert ops.endpoints() == []


def test_malformed_delivery_records_fail_alone(deliverer, ops, receiver) -> None:
    added = ops.add(receiver.url, "email.bounced")
    ops.test(added.endpoint.id)
    ((good, _),) = take_queued(QUEUE)
    bad = [
        json.dumps({**json.loads(good), "version": 2}),
        "{",
        json.dumps({**json.loads(good), "endpoint_id": "x#y"}),
    ]
    event = {"Records": list(sqs_records([good, *bad], QUEUE))}
    result = deliverer.handler(event, LambdaContext("webhook-deliver", timeout_s=90))
    assert [f["itemIdentifier"] for f in result["batchItemFailures"]] == [
        r["messageId"] for r in event["Records"][1:]
    ]
    assert len(receiver.received) == 1


def test_an_attempt_taken_by_a_run_that_died_is_taken_again_only_once_stale(ops, env, receiver) -> None:
    # Given an attempt taken (its claim written) by a delivery function that died before the POST
    added = ops.add(receiver.url, "email.bounced")
    ops.test(added.endpoint.id)
    ((body, _),) = take_queued(QUEUE)
    message = parse_message(body)
    store = WebhookStore(env["TABLE_NAME"])
    taken_at = clock.utc_now()
    assert store.claim_attempt(
        message.endpoint_id, message.delivery_sk, 1, clock.iso(taken_at), stale_before=clock.iso(taken_at)
    )

    def at(moment: Any) -> DeliveryContext:
        return DeliveryContext(store=store, queue=ops.queue, allow_loopback_http=True, now=lambda: moment)

    # When SQS hands the message again within the stale time: nothing happens
    assert process(message, at(taken_at + timedelta(seconds=30))).status == "duplicate"
    assert receiver.received == []
    # After it: the attempt is made once, and never again
    assert process(message, at(taken_at + timedelta(seconds=200))).status == "delivered"
    assert process(message, at(taken_at + timedelta(seconds=400))).status == "duplicate"
    assert len(receiver.received) == 1


class Poster:
    """Stands for the receiver's network: every POST counted (a connection), answered with
    ``status`` (None: no answer, as a receiver that hangs until the timeout) after ``delay_s``."""

    def __init__(
        self, status: int | None = None, delay_s: float = 0.0, together: threading.Barrier | None = None
    ) -> None:
        self.status, self.delay_s, self.calls = status, delay_s, 0
        self.together = together  # every POST waits here until that many are in flight at once
        self._lock = threading.Lock()

    def __call__(self, *args: Any, **kwargs: Any) -> transport.Answer:
        with self._lock:
            self.calls += 1
        if self.together is not None:
            self.together.wait()  # BrokenBarrierError after its timeout: the POSTs came one by one
        time.sleep(self.delay_s)
        return transport.Answer(status=self.status, error=None if self.status else "timeout")


def queued_messages() -> list[tuple[str, int]]:
    return take_queued(QUEUE)


def test_a_batch_is_delivered_concurrently_so_a_slow_receiver_holds_only_its_own_records(
    ops, deliverer, subscribe
) -> None:
    # Given five deliveries to an endpoint whose answers come only once all five POSTs are in
    # flight at once (one after the other, the first would wait alone and fail)
    ops.add("http://127.0.0.1:9/hooks", "subscriber.created")
    for n in range(5):
        subscribe(f"par{n}@example.com")
    together = threading.Barrier(5, timeout=8)
    deliverer.context.post = Poster(status=200, together=together)
    bodies = [b for b, _ in queued_messages()]
    # When they come in one batch, then every record is delivered: the five POSTs were concurrent
    assert deliver(deliverer, bodies) == {"batchItemFailures": []}
    assert deliverer.context.post.calls == 5 and not together.broken


def test_the_circuit_opens_parks_deliveries_without_a_connection_and_a_probe_closes_it(
    ops, deliverer, subscribe, env
) -> None:
    # Given an endpoint whose receiver never answers, and 7 events for it
    added = ops.add("http://127.0.0.1:9/hooks", "subscriber.created")
    endpoint_id = added.endpoint.id
    for n in range(7):
        subscribe(f"cb{n}@example.com")
    hanging = deliverer.context.post = Poster(status=None)
    bodies = [b for b, _ in queued_messages()]
    # When the first CIRCUIT_THRESHOLD attempts fail
    deliver(deliverer, bodies[:CIRCUIT_THRESHOLD])
    assert hanging.calls == CIRCUIT_THRESHOLD
    endpoint = ops.get(endpoint_id)
    assert (endpoint.circuit, endpoint.circuit_failures, endpoint.circuit_opens) == ("open", 3, 1)
    # Then one retry carries the probe, after the first back-off; the others keep the schedule
    retries = [(parse_message(b), d) for b, d in queued_messages()]
    probes = [(m, d) for m, d in retries if m.probe]
    assert len(probes) == 1 and probes[0][1] == probe_delay(1) == 30
    assert sorted(d for m, d in retries if not m.probe) == [SCHEDULE_S[1]] * (CIRCUIT_THRESHOLD - 1)
    # and the other deliveries and those retries are parked: no connection, no attempt used
    deliver(deliverer, bodies[CIRCUIT_THRESHOLD:])
    deliver(deliverer, [_body(m) for m, _ in retries if not m.probe])
    assert hanging.calls == CIRCUIT_THRESHOLD
    assert queued_messages() == []
    parked = WebhookStore(env["TABLE_NAME"]).parked(endpoint_id, 100)
    assert len(parked) == 6
    states = {d.sk: d for d in ops.deliveries(endpoint_id, limit=100)}
    assert all(states[sk].status == PENDING for sk in parked)
    assert sum(states[sk].attempts for sk in parked) == CIRCUIT_THRESHOLD - 1  # the 2 parked retries
    # When the probe fails: one connection, the circuit stays open, the next probe waits longer
    deliver(deliverer, [_body(probes[0][0])])
    assert hanging.calls == CIRCUIT_THRESHOLD + 1
    ((probe_body, probe_wait),) = queued_messages()
    assert parse_message(probe_body).probe and probe_wait == max(SCHEDULE_S[2], probe_delay(2))
    assert ops.get(endpoint_id).circuit_opens == 2
    # When the receiver answers again: the probe closes the circuit, the parked ones go again
    healthy = deliverer.context.post = Poster(status=200)
    deliver(deliverer, [probe_body])
    assert healthy.calls == 1
    endpoint = ops.get(endpoint_id)
    assert (endpoint.circuit, endpoint.circuit_failures, endpoint.failing_since) == (None, 0, None)
    assert endpoint.public()["circuit"] == "closed"
    run_queue(deliverer)
    assert healthy.calls == 7
    assert [d.status for d in ops.deliveries(endpoint_id, limit=100)] == [DELIVERED] * 7
    assert WebhookStore(env["TABLE_NAME"]).parked(endpoint_id, 100) == []


def _body(message: Any) -> str:
    from shared.core.envelopes import encode
    from shared.webhooks.delivery import CONTRACT

    return encode(CONTRACT, message)


def test_a_failed_attempt_delivered_twice_counts_once_toward_the_circuit(ops, deliverer, subscribe) -> None:
    added = ops.add("http://127.0.0.1:9/hooks", "subscriber.created")
    subscribe("twice@example.com")
    hanging = deliverer.context.post = Poster(status=None)
    ((body, _),) = queued_messages()
    # SQS hands the same message twice in one batch, and again later
    deliver(deliverer, [body, body])
    deliver(deliverer, [body])
    assert hanging.calls == 1
    endpoint = ops.get(added.endpoint.id)
    assert endpoint.circuit_failures == 1 and endpoint.circuit is None


def test_parked_deliveries_fail_when_the_endpoint_is_disabled_and_the_circuit_ends(
    ops, deliverer, subscribe, env
) -> None:
    # Given an open circuit with parked deliveries
    added = ops.add("http://127.0.0.1:9/hooks", "subscriber.created")
    for n in range(5):
        subscribe(f"gone{n}@example.com")
    deliverer.context.post = Poster(status=None)
    bodies = [b for b, _ in queued_messages()]
    deliver(deliverer, bodies[:CIRCUIT_THRESHOLD])
    deliver(deliverer, bodies[CIRCUIT_THRESHOLD:])
    retries = [b for b, _ in queued_messages()]
    deliver(deliverer, [b for b in retries if not parse_message(b).probe])
    probe = [b for b in retries if parse_message(b).probe]
    assert len(WebhookStore(env["TABLE_NAME"]).parked(added.endpoint.id, 100)) == 4
    # When the probe's answer is 410 Gone
    deliverer.context.post = Poster(status=410)
    deliver(deliverer, probe)
    run_queue(deliverer)
    # Then the endpoint is disabled, nothing stays parked, and the parked deliveries failed unsent
    endpoint = ops.get(added.endpoint.id)
    assert endpoint.status == DISABLED and endpoint.circuit is None
    assert WebhookStore(env["TABLE_NAME"]).parked(added.endpoint.id, 100) == []
    deliveries = ops.deliveries(added.endpoint.id, limit=100)
    assert all(d.status == FAILED for d in deliveries)
    assert [d.last_error for d in deliveries].count("endpoint disabled") == 4


def test_a_failed_attempt_s_answer_written_after_its_retry_delivered_leaves_it_delivered(
    ops, env, subscribe
) -> None:
    # Given a delivery whose first attempt fails, and a neighbour so quick that the retry it queued
    # is taken and delivered before the failed attempt's answer is written (a loaded machine)
    added = ops.add("http://127.0.0.1:9/hooks", "subscriber.created")
    subscribe("late@example.com")
    ((body, _),) = queued_messages()
    store = WebhookStore(env["TABLE_NAME"])
    healthy = Poster(status=200)
    retried: list[str] = []

    class QuickNeighbour(DeliveryQueue):
        def send(self, message: Any, delay_s: int) -> None:
            neighbour = DeliveryContext(store=store, queue=ops.queue, allow_loopback_http=True, post=healthy)
            retried.append(process(message, neighbour).status)

    failing = DeliveryContext(
        store=store, queue=QuickNeighbour(env["WEBHOOK_QUEUE_URL"]), allow_loopback_http=True, post=Poster()
    )
    # When the first attempt's answer (a timeout) is written last
    assert process(parse_message(body), failing).status == "retrying"
    # Then the delivery stays delivered, and its history holds both attempts in order
    assert retried == ["delivered"] and healthy.calls == 1
    (delivery,) = ops.deliveries(added.endpoint.id, limit=10)
    assert (delivery.status, delivery.attempts, delivery.last_status) == (DELIVERED, 2, 200)
    assert [(h["attempt"], h["status_code"]) for h in delivery.history] == [(1, None), (2, 200)]
