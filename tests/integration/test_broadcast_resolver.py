"""The broadcast resolver on moto through its real handler: one invocation resolves page after
page (each checkpointed), a tag page is one Query and one round of BatchGetItem, a page
delivered twice, crashed mid-way or resolved by two invocations at once gives each reader
once, a cancel stops the run, and the resolver waits while the batch queue is deep."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse

from bench.scenarios.broadcast import seed_tagged
from shared.broadcasts import fanout
from shared.broadcasts.fanout import invocation_deadline, queue_limit, resolve_step
from shared.broadcasts.model import CANCELLED, DONE, parse_request, parse_resolve
from shared.core.aws import ClientFactory, client, register_hook, unregister_hook
from shared.core.retry import Backoff
from shared.store.subscribers import SubscriberStore
from tests.eventually import eventually
from tests.integration.broadcast_support import Env, eligible, seeded
from tests.integration.resolver_support import (
    assert_each_reader_once,
    batch_emails,
    deliver,
    fail_once,
    invoke,
    resolver_handler,
)

TEMPLATE = "newsletter/monthly"
PAGE = 7  # recipients per page: the tag audiences below take several pages


@pytest.fixture
def people(store: SubscriberStore) -> list[dict[str, Any]]:
    return seeded(store, 120)  # tags a, b, c at random; some unsubscribed or suppressed


@pytest.fixture
def calls() -> Iterator[Counter[str]]:
    """Requests made meanwhile, by operation (``dynamodb.Query``, ``sqs.GetQueueAttributes``, ...)."""
    seen: Counter[str] = Counter()

    def hook(model: Any, **_: Any) -> None:
        seen[f"{model.service_model.endpoint_prefix}.{model.name}"] += 1

    for service in ("dynamodb", "sqs"):
        register_hook(f"before-call.{service}", hook)
    yield seen
    for service in ("dynamodb", "sqs"):
        unregister_hook(f"before-call.{service}", hook)


def hooked(*hooks: tuple[str, Callable[..., Any]]) -> Callable[[Callable[[], Any]], Any]:
    def run(step: Callable[[], Any]) -> Any:
        for event, hook in hooks:
            register_hook(event, hook)
        try:
            return step()
        finally:
            for event, hook in hooks:
                unregister_hook(event, hook)

    return run


def tag_audience(people: list[dict[str, Any]], tag: str) -> set[str]:
    return {p["email"] for p in eligible(people) if tag in p["tags"]}


# ----- pages per invocation, requests per page ----------------------------------------------------
def test_one_invocation_resolves_page_after_page_each_one_query_and_one_round_of_reads(
    env: Env, resources, monkeypatch, calls
) -> None:
    # Given 2,500 readers of a tag, and the resolver with its deployed page size (1,000)
    seed_tagged(ClientFactory(), env.table, "news", 2500)
    module = resolver_handler(env, resources, monkeypatch, page_size=1000)
    env.service.send(parse_request(id="pages", template=TEMPLATE, audience={"tags": ["news"]}))
    calls.clear()

    # When the control queue's one message is delivered
    steps = deliver(env, module)

    # Then one invocation resolved the three pages (1,000, 1,000, 500), each checkpointed
    record = env.service.get("pages")
    assert steps == 1 and record.page == 3 and record.resolved and record.audience_size == 2500
    messages, emails = batch_emails(env)
    assert len(emails) == len(set(emails)) == 2500 and len(messages) == 25
    # ... a page is one Query of up to 1,000 keys and one BatchGetItem per 100 of them (read at
    # once), its checkpoint, its batches (10 a request) and the queue's depth (back-pressure);
    # no page sent a message of its own to the next
    assert calls["dynamodb.Query"] == 3
    assert calls["dynamodb.BatchGetItem"] == 25
    assert calls["dynamodb.TransactWriteItems"] == 3
    assert calls["sqs.GetQueueAttributes"] == 3
    assert calls["sqs.SendMessageBatch"] == 3  # the batches; nothing on the control queue
    print(f"\nresolver requests for 3 pages of a tag audience: {dict(sorted(calls.items()))}")


LATENCY_S = 0.25  # added to every request: far above moto's own time per request


@pytest.mark.bench  # a timed measurement: run by `make bench`, not by `make test`
def test_a_page_waits_for_four_requests_one_after_another(env, resources, monkeypatch) -> None:
    """The requests a page waits for one after another: the run's wall time with LATENCY_S added
    to every request, less the same run without, in request latencies per page."""
    seed_tagged(ClientFactory(), env.table, "lat", 2000)
    module = resolver_handler(env, resources, monkeypatch, page_size=200)  # small: moto stays fast

    def run(broadcast_id: str) -> tuple[float, int]:
        env.service.send(parse_request(id=broadcast_id, template=TEMPLATE, audience={"tags": ["lat"]}))
        (message,) = env.receive(env.queues.control_url, 1)
        began = time.perf_counter()
        invoke(module, message["Body"])
        elapsed = time.perf_counter() - began
        env.delete(env.queues.control_url, message)
        env.batches()
        return elapsed, env.service.get(broadcast_id).page

    def wait(**_: Any) -> None:
        time.sleep(LATENCY_S)

    run("warm-up")
    plain, pages = run("plain")
    slow, _ = hooked(("before-call.dynamodb", wait), ("before-call.sqs", wait))(lambda: run("slow"))
    serial = (slow - plain) / LATENCY_S / pages
    print(f"\n{pages} pages in one invocation: {serial:.1f} request latencies one after another per page")
    # 4 a page (the record and the depth at once, the Query, the BatchGetItem at once, the
    # checkpoint) and the invocation's own once (its page item, marks, `resolved`); 12 before at
    # pages of 200 (26 at 1,000)
    assert pages == 10 and serial < 6.5


# ----- delivered twice, crashed mid-way, resolved twice at once -----------------------------------
CRASHES = [
    ("dynamodb", "Query", 3),  # reading a later page
    ("dynamodb", "BatchGetItem", 4),  # one of a page's profile reads (a thread of the page)
    ("dynamodb", "TransactWriteItems", 2),  # the second page's checkpoint
    ("dynamodb", "TransactWriteItems", 4),
    ("sqs", "SendMessageBatch", 3),  # a page's batches, in the background while the next is read
    ("dynamodb", "UpdateItem", 2),  # a page's handed_off mark
    ("dynamodb", "GetItem", 5),  # the record, read again before a page
    ("sqs", "GetQueueAttributes", 3),  # the depth, read with it
]


@pytest.mark.parametrize(("service", "operation", "call"), CRASHES, ids=[f"{o}#{c}" for _, o, c in CRASHES])
def test_a_crash_mid_way_and_a_second_delivery_give_each_reader_once(
    env, people, resources, monkeypatch, service, operation, call
) -> None:
    # Given a broadcast to a tag (several pages of 7) and a resolver whose run of pages loses
    # one request once (a crash or timeout mid-invocation: SQS delivers the message again)
    module = resolver_handler(env, resources, monkeypatch, page_size=PAGE, ahead_s=60)
    env.service.send(parse_request(id="crash", template=TEMPLATE, audience={"tags": ["a"]}))
    run = hooked((f"before-call.{service}.{operation}", fail_once(operation, call)))

    # When every resolve message is delivered twice, and again after the failure
    steps = run(lambda: deliver(env, module, times=2))

    # Then each reader is in the audience once and gets one mail
    assert steps >= 3
    assert_each_reader_once(env, "crash", tag_audience(people, "a"))


def test_an_everyone_page_run_crashed_mid_way_gives_each_reader_once(
    env, people, resources, monkeypatch
) -> None:
    module = resolver_handler(env, resources, monkeypatch, page_size=PAGE * 2, segments=4, ahead_s=60)
    env.service.send(parse_request(id="crash-all", template=TEMPLATE))
    run = hooked(
        ("before-call.dynamodb.TransactWriteItems", fail_once("TransactWriteItems", 3)),
        ("before-call.sqs.SendMessageBatch", fail_once("SendMessageBatch", 5)),
    )
    run(lambda: deliver(env, module, times=2))
    assert_each_reader_once(env, "crash-all", {p["email"] for p in eligible(people)})


@pytest.mark.parametrize("second_dies", [False, True], ids=["both-finish", "the-second-dies"])
def test_two_deliveries_of_one_message_at_once_give_each_reader_once(
    env, people, resources, monkeypatch, second_dies: bool
) -> None:
    # Given a broadcast to two tags, and its first resolve message
    module = resolver_handler(env, resources, monkeypatch, page_size=PAGE, ahead_s=60)
    env.service.send(parse_request(id="twice", template=TEMPLATE, audience={"any_tags": ["b", "c"]}))
    (message,) = env.receive(env.queues.control_url, 1)
    second: list[Any] = []
    checkpoints = [0]
    resolves: list[tuple[str, int]] = []  # what the resolver put on its own queue: (body, delay)

    def second_delivery(**_: Any) -> None:  # SQS hands the same message to a second invocation
        checkpoints[0] += 1
        if checkpoints[0] == 3:  # ... while the first is at its third page's checkpoint
            try:  # (its step: the handler's batch processor is one per environment)
                step = resolve_step(parse_resolve(message["Body"]), module.context, invocation_deadline(120))
                second.append(step.status)
            except ConnectionError:
                second.append("died")
        elif second_dies and checkpoints[0] == 5:  # the second's checkpoint after the one it took
            raise ConnectionError("injected: the second invocation dies")

    def sent(params: dict[str, Any], **_: Any) -> None:
        if params["QueueUrl"] == env.queues.control_url:
            resolves.extend((e["MessageBody"], e.get("DelaySeconds", 0)) for e in params["Entries"])

    # When both run: the second takes the chain over from the first's third page
    run = hooked(
        ("before-call.dynamodb.TransactWriteItems", second_delivery),
        ("provide-client-params.sqs.SendMessageBatch", sent),
    )
    first = run(lambda: invoke(module, message["Body"]))
    env.delete(env.queues.control_url, message)  # the first succeeded: the message is gone

    # Then the first stopped where the second had resolved the page first, without marking its
    # message's page, and left a copy of the message for 15 minutes later
    assert first["batchItemFailures"] == []
    assert second == (["died"] if second_dies else ["last_page"])
    assert resolves == [(message["Body"], 900)]
    record = env.service.get("twice")
    assert record.resolved is not second_dies

    # When the copy arrives: it does nothing after the second finished, and takes the chain up
    # again after the second died
    invoke(module, resolves[0][0])

    # Then each reader is in the audience once and gets one mail
    want = {p["email"] for p in eligible(people) if p["tags"] & {"b", "c"}}
    assert_each_reader_once(env, "twice", want)


def test_a_checkpoint_the_busy_record_cancels_is_tried_again_in_place(
    env, people, resources, monkeypatch
) -> None:
    # Given the broadcast record held by other transactions (the workers' batch counts) when the
    # resolver checkpoints its second page, twice: DynamoDB cancels it with TransactionConflict
    monkeypatch.setattr(fanout, "CHECKPOINT_RETRY", Backoff(attempts=10, base=0.0, cap=0.0))
    module = resolver_handler(env, resources, monkeypatch, page_size=PAGE, ahead_s=60)
    env.service.send(parse_request(id="busy", template=TEMPLATE, audience={"tags": ["a"]}))
    checkpoints, injected = [0], [0]

    def conflict(params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        actions = json.loads(params["body"])["TransactItems"]
        written = [a.get("Put", {}).get("Item", {}).get("SK", {}).get("S", "") for a in actions]
        if not any(sk.startswith("PAGE#") for sk in written):  # not a page's checkpoint
            return None
        checkpoints[0] += 1
        if checkpoints[0] not in (2, 3):
            return None
        injected[0] += 1
        reasons = [{"Code": "None"}, {"Code": "TransactionConflict", "Message": "Transaction is ongoing"}]
        error = {
            "Error": {"Code": "TransactionCanceledException", "Message": "Transaction cancelled"},
            "CancellationReasons": reasons,
            "ResponseMetadata": {"HTTPStatusCode": 400},
        }
        return AWSResponse("https://dynamodb.us-east-1.amazonaws.com/", 400, {}, None), error

    # When the resolve message is delivered
    conflicting = hooked(("before-call.dynamodb.TransactWriteItems", conflict))
    steps = conflicting(lambda: deliver(env, module))

    # Then the invocation tried that checkpoint again and went on: no failure, no redelivery
    assert injected[0] == 2 and steps == 1
    assert_each_reader_once(env, "busy", tag_audience(people, "a"))


# ----- cancel and resume during a run of pages ----------------------------------------------------
def test_a_cancel_stops_the_run_at_its_next_page_and_resume_sends_the_rest_once(
    env, people, resources, monkeypatch
) -> None:
    module = resolver_handler(env, resources, monkeypatch, page_size=PAGE, ahead_s=60)
    env.service.send(parse_request(id="stop", template=TEMPLATE, audience={"tags": ["a"]}))
    count = [0]

    def cancel_at_third_checkpoint(**_: Any) -> None:
        count[0] += 1
        if count[0] == 3:
            env.service.cancel("stop")

    # When the broadcast is cancelled while the resolver checkpoints its third page
    hooked(("before-call.dynamodb.TransactWriteItems", cancel_at_third_checkpoint))(
        lambda: deliver(env, module)
    )

    # Then that page was the last: resolution stopped, no message carries it on
    record = env.service.get("stop")
    assert record.status == CANCELLED and record.page == 3 and not record.resolved
    assert env.receive(env.queues.control_url, 1) == []
    env.work(env.batches())
    assert env.ses.sends == []  # the workers skip a cancelled broadcast's batches

    # When it is resumed, the new round resolves everything and each reader gets one mail
    resumed = env.service.resume("stop")
    deliver(env, module)
    env.work(env.batches())
    want = tag_audience(people, "a")
    assert resumed.round == 2
    assert Counter(env.ses.recipients()) == Counter(dict.fromkeys(want, 1))
    assert env.service.get("stop").status == DONE


# ----- back-pressure ----------------------------------------------------------------------------
def waiting(env: Env) -> int:
    answer = client("sqs").get_queue_attributes(
        QueueUrl=env.queues.batch_url, AttributeNames=["ApproximateNumberOfMessages"]
    )
    return int(answer["Attributes"]["ApproximateNumberOfMessages"])


def test_the_resolver_waits_while_the_batch_queue_is_deep_and_goes_on_when_it_drains(
    env, people, resources, monkeypatch, calls
) -> None:
    # Given a resolver that lets at most 3 batches wait (1 s of sending at 100/s, at least 3),
    # pages of 7 recipients (one batch each) and a broadcast to everyone sent at 100 mails/s
    monkeypatch.setattr(fanout, "MIN_QUEUED_BATCHES", 3)
    monkeypatch.setattr(fanout, "MIN_WAIT_S", 1)
    module = resolver_handler(env, resources, monkeypatch, page_size=PAGE, ahead_s=1)
    env.rate[0] = 100.0
    env.service.send(parse_request(id="deep", template=TEMPLATE))
    limit = queue_limit(1, 100.0)
    assert limit == 3
    depths: list[int] = []  # the batch queue's depth, as each page read it
    delays: list[int] = []  # the delay of each message the resolver put on its own queue

    def depth(parsed: dict[str, Any], **_: Any) -> None:
        depths.append(int(parsed["Attributes"]["ApproximateNumberOfMessages"]))

    def delay(params: dict[str, Any], **_: Any) -> None:
        if params["QueueUrl"] == env.queues.control_url:
            delays.extend(e.get("DelaySeconds", 0) for e in params["Entries"])

    register_hook("after-call.sqs.GetQueueAttributes", depth)
    register_hook("provide-client-params.sqs.SendMessageBatch", delay)
    try:
        (first,) = env.receive(env.queues.control_url, 1)
        env.delete(env.queues.control_url, first)
        calls.clear()

        # When the first message is delivered and nobody takes the batches
        invoke(module, first["Body"])
        seen = depths[-1]  # the depth the resolver waited on (before the test's own reads below)

        # Then the resolver resolved pages until more than 3 batches waited, and stopped there:
        # the next page's message waits (delayed), resolution is not over
        record = env.service.get("deep")
        assert calls["sqs.GetQueueAttributes"] == record.page + 1  # one per page, and the one that waited
        assert not record.resolved and waiting(env) == record.page > limit
        # the excess at 100/s, 1 s a batch (a page's batches go out in the background, so the
        # depth the resolver read may lag the queue by the last page's hand-off)
        assert seen > limit and delays == [max(1, seen - limit)]

        # When the delayed message arrives while the queue is still deep
        calls.clear()
        waited = eventually(
            lambda: env.receive(env.queues.control_url, 1), timeout_s=30, what="the delayed page"
        )
        env.delete(env.queues.control_url, waited[0])
        invoke(module, waited[0]["Body"])

        # Then it resolves nothing and waits again: one depth read, no read of the audience
        assert env.service.get("deep").page == record.page
        assert calls["sqs.GetQueueAttributes"] == 1 and calls["dynamodb.Scan"] == 0
        assert len(delays) == 2 and delays[-1] >= 1

        # When the workers drain the queue each time the resolver waits, until it resolved all
        rounds = 0
        while not env.service.get("deep").resolved:
            env.work(env.batches())
            message = eventually(
                lambda: env.receive(env.queues.control_url, 1), timeout_s=30, what="the next page"
            )
            env.delete(env.queues.control_url, message[0])
            invoke(module, message[0]["Body"])
            rounds += 1
        env.work(env.batches())
    finally:
        unregister_hook("after-call.sqs.GetQueueAttributes", depth)
        unregister_hook("provide-client-params.sqs.SendMessageBatch", delay)

    # Then it went on after each drain and never let more than a page's batch past the limit wait
    # (the depth a page reads may miss the previous page's batch, still being sent)
    want = {p["email"] for p in eligible(people)}
    assert rounds >= 2
    assert max(depths) <= limit + 2
    assert Counter(env.ses.recipients()) == Counter(dict.fromkeys(want, 1))
    assert env.service.get("deep").status == DONE
