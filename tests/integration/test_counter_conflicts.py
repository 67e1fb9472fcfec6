"""Counters are off the critical path of a send (moto, through the real handlers).

A ``TransactionConflict`` is injected on every transaction that ADDs to a counters item
(``STATS#...`` / ``COUNTERS`` or ``TEMPLATE_COUNTERS``) right after SES accepted the mail,
the way DynamoDB answers when a concurrent transaction (engagement writes, other sends)
holds that item: a ``TransactionCanceledException`` whose reason for the counters action is
``TransactionConflict``. The botocore client itself raises it (a ``before-call`` hook), so
the store's real transaction path handles it.

Then: exactly one mail, the sender Lambda acknowledges its record, the sequence execution
succeeds, the broadcast batch succeeds; the record of the send is written. A single send writes
no counter at all (the stats fold counts its ``SENT#`` entry from the stream, and a busy counter
only makes the fold's batch come again); a broadcast batch's count waits in its ledger until the
mails' SES events reach the engagement consumer. The counts equal the mails, however often a
job, a batch, a stream batch or an event is delivered.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse

from local_aws.apigw import LambdaContext
from local_aws.provision import LocalResources
from shared.broadcasts.model import STEP, parse_batch, parse_request
from shared.core.aws import client, register_hook, unregister_hook
from shared.core.retry import Backoff
from shared.core.specs import STATS_FOLD_FUNCTION
from shared.engagement.consumer import EngagementContext, process_body
from shared.engagement.suppression import Suppressions
from shared.sending.jobs import SendJob, to_message
from shared.sending.pipeline import send
from shared.store import keys, stats
from shared.store.dynamo import key
from shared.store.stats import COUNT_PENDING, StatsStore
from shared.store.stream_counts import FOLD_COUNT, StreamCountFold
from shared.store.subscribers import SubscriberStore
from tests.integration import test_sequence_execution
from tests.integration.broadcast_support import Env
from tests.integration.conftest import fold_batches, handler_module, scan_all, sqs_record
from tests.integration.test_claim_recovery import ses_event
from tests.integration.test_sequence_execution import Harness, sequence_from, start
from tests.integration.webhook_support import Streams

# a fixture of that module: Step Functions on moto
harness = test_sequence_execution.harness

COUNTER_SKS = frozenset({keys.COUNTERS, keys.TEMPLATE_COUNTERS})


class CounterConflicts:
    """Cancels the next ``remaining`` TransactWriteItems that ADD to a counters item, as
    DynamoDB does when another transaction holds it; other requests go to moto."""

    def __init__(self) -> None:
        self.remaining = 0
        self.injected = 0
        self.sks = COUNTER_SKS  # the counters items it holds

    def __call__(self, params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        items = json.loads(params["body"]).get("TransactItems", [])  # the serialized request
        hot = [a.get("Update", {}).get("Key", {}).get("SK", {}).get("S") in self.sks for a in items]
        if not self.remaining or not any(hot):
            return None
        self.remaining -= 1
        self.injected += 1
        reasons = [
            {"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"}
            if h
            else {"Code": "None"}
            for h in hot
        ]
        error = {
            "Error": {"Code": "TransactionCanceledException", "Message": "Transaction cancelled"},
            "CancellationReasons": reasons,
            "ResponseMetadata": {"HTTPStatusCode": 400},
        }
        return AWSResponse("https://dynamodb.us-east-1.amazonaws.com/", 400, {}, None), error


@pytest.fixture
def conflicts(aws: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[CounterConflicts]:
    monkeypatch.setattr(stats, "CONTENDED_RETRY", Backoff(attempts=8, base=0.0, cap=0.0))
    injector = CounterConflicts()
    register_hook("before-call.dynamodb.TransactWriteItems", injector)
    yield injector
    unregister_hook("before-call.dynamodb.TransactWriteItems", injector)


@pytest.fixture
def engagement(store: SubscriberStore) -> EngagementContext:
    return EngagementContext(store=store, suppressions=Suppressions(store), data_ttl_days=30)


def counts(resources: LocalResources, source: str, template: str) -> tuple[int, int]:
    stats_store = StatsStore(resources.tables["table_name"], resources.tables["events_table_name"])
    return stats_store.source(source).total("send"), stats_store.template(template).total("send")


def sent_items(table: str, source: str) -> list[dict[str, Any]]:
    return [i for i in scan_all(table) if i["SK"].startswith(keys.SENT_PREFIX) and i.get("source") == source]


def deliver_events(items: list[dict[str, Any]], template: str, engagement: EngagementContext) -> None:
    """SES's Delivery event of each logged mail reaches the engagement consumer."""
    for item in items:
        job = SendJob(email=item["email"], template=template, source=item["source"], step=item["step"])
        process_body(ses_event("delivery", job, item["ses_message_id"]), engagement)


# ----- the sender Lambda (send queue) ----------------------------------------------------------
def run_sender(module: Any, job: SendJob) -> list[Any]:
    result = module.handler(
        {"Records": [sqs_record(to_message(job), "mailstep-send")]}, LambdaContext("sender", timeout_s=60)
    )
    return list(result["batchItemFailures"])


def fold_busy(resources: LocalResources, conflicts: CounterConflicts) -> int | None:
    """The stats fold of the single sends' entries while ``conflicts`` holds the counters: the
    number it counted, or None when the counters stayed busy (the fold raised: Lambda retries the
    batch)."""
    fold = StreamCountFold(resources.tables["table_name"])
    fold.pause = lambda _seconds: None
    try:
        return fold_batches(fold, Streams(STATS_FOLD_FUNCTION)).sends
    except RuntimeError:
        return None


@pytest.mark.parametrize("injected", [1, 1000], ids=["passing", "lasting"])
def test_a_counter_conflict_neither_touches_the_send_job_nor_loses_a_count(
    sender, conflicts, store, resources, outbox, injected
) -> None:
    # Given a subscriber, and counters items that another transaction holds
    table = resources.tables["table_name"]
    store.upsert("jane@example.com", first_name="Jane")
    job = SendJob(email="jane@example.com", template="onboarding/welcome", source="onboarding", step="w")
    conflicts.remaining = injected

    # When the send job is delivered, and delivered again (at least once)
    failures = [run_sender(sender, job), run_sender(sender, job)]

    # Then one mail went out, both deliveries are acknowledged, its send is logged once for the
    # stats fold to count, and the send path met no counter
    assert failures == [[], []]
    assert len(outbox) == 1 and conflicts.injected == 0
    (item,) = sent_items(table, "onboarding")
    assert item[FOLD_COUNT] is True and COUNT_PENDING not in item

    # When the fold runs while the counters are busy: a passing conflict is retried at once, a
    # lasting one fails the batch (Lambda delivers it again) and counts nothing
    counted = fold_busy(resources, conflicts)
    assert conflicts.injected >= 1
    if injected == 1:
        assert counted == 1 and counts(resources, "onboarding", "onboarding/welcome") == (1, 1)
        return
    assert counted is None and counts(resources, "onboarding", "onboarding/welcome") == (0, 0)

    # When the conflict is over and the batch comes again, twice
    conflicts.remaining = 0
    assert [fold_busy(resources, conflicts), fold_busy(resources, conflicts)] == [1, 0]

    # Then the count converged, exactly once
    assert counts(resources, "onboarding", "onboarding/welcome") == (1, 1)
    assert len(outbox) == 1


# ----- a sequence step (Step Functions on moto) --------------------------------------------------
def test_a_counter_conflict_does_not_touch_the_sequence_execution(
    harness: Harness, conflicts, resources, outbox
) -> None:
    sequence = sequence_from(
        "trigger: go\nsteps:\n  - send: onboarding/tips\n    subject: Hi\n  - tag: {add: [tipped]}\n", "tips"
    )
    harness.deploy(sequence)
    conflicts.remaining = 1000  # every counters transaction is refused

    result = start(harness, sequence, "ada@example.com")

    # the execution went on past the send (the tag step ran) and succeeded; one mail; the step
    # wrote no counter
    assert result["status"] == "SUCCEEDED"
    assert harness.sent("ada@example.com") == ["onboarding/tips"]
    profile = harness.store.get_profile("ada@example.com")
    assert profile is not None and "tipped" in profile.tags
    assert len(outbox) == 1 and conflicts.injected == 0
    assert harness.exec_items() == []
    table = resources.tables["table_name"]
    (item,) = sent_items(table, "tips")
    assert item[FOLD_COUNT] is True and counts(resources, "tips", "onboarding/tips") == (0, 0)

    # the fold counts it once the counters are free, once however often the batch comes
    assert fold_busy(resources, conflicts) is None
    conflicts.remaining = 0
    assert [fold_busy(resources, conflicts), fold_busy(resources, conflicts)] == [1, 0]
    assert counts(resources, "tips", "onboarding/tips") == (1, 1)


# ----- a broadcast worker batch -----------------------------------------------------------------
@pytest.fixture
def worker(resources: LocalResources, monkeypatch: pytest.MonkeyPatch, outbox: Any) -> Any:
    env = {
        **resources.env(),
        "DEFAULT_FROM": "Acme <news@acme.test>",
        "PUBLIC_BASE_URL": "https://api.acme.test",
        "BROADCAST_WORKER_THREADS": "1",  # in-process moto: one request at a time
    }
    return handler_module("broadcast_worker", env, monkeypatch)


def run_worker(module: Any, body: str) -> dict[str, Any]:
    result = module.handler(
        {"Records": [sqs_record(body, "mailstep-broadcast")]},
        LambdaContext("broadcast-worker", timeout_s=120),
    )
    return dict(result)


def resolved_batch(env: Env, store: SubscriberStore, broadcast_id: str, readers: int) -> dict[str, Any]:
    """A newsletter to ``readers`` subscribers tagged news, resolved into one batch: its SQS message."""
    for i in range(readers):
        store.upsert(f"reader{i}@example.com", add_tags=["news"])
    env.service.send(
        parse_request(id=broadcast_id, template="newsletter/monthly", audience={"tags": ["news"]})
    )
    env.resolve_all()
    (message,) = env.batches()
    return message


def test_a_counter_conflict_after_ses_does_not_hold_the_broadcast_batch(
    worker, env: Env, store, conflicts, resources, outbox, engagement
) -> None:
    # Given a broadcast to 6 subscribers, resolved into one batch
    message = resolved_batch(env, store, "nl", readers=6)
    batch = parse_batch(message["Body"])
    assert len(batch.emails) == 6
    conflicts.remaining = 1000  # the counters stay held by other transactions

    # When the worker Lambda gets the batch, and SQS delivers it again
    first = run_worker(worker, message["Body"])
    again = run_worker(worker, message["Body"])

    # Then no record failed (nothing waits for a visibility timeout), each reader got one mail,
    # and the broadcast is counted and done
    assert first == {"batchItemFailures": []} and again == {"batchItemFailures": []}
    assert len(outbox) == 6
    assert all(sum(any(e in d for d in m.destinations) for m in outbox) == 1 for e in batch.emails)
    assert conflicts.injected >= 1
    record = env.service.get("nl")
    assert record is not None and (record.status, record.sent, record.processed) == ("done", 6, 6)
    assert counts(resources, "nl", "newsletter/monthly") == (0, 0)
    table = resources.tables["table_name"]
    ledger_key = keys.uncounted_key("nl", "newsletter/monthly")
    (ledger,) = [i for i in scan_all(table) if (i["PK"], i["SK"]) == ledger_key]
    assert ledger["send"] == 6

    # When the conflict is over and the mails' SES events arrive (each twice)
    conflicts.remaining = 0
    items = sent_items(table, "nl")
    assert len(items) == 6 and {i["step"] for i in items} == {STEP}
    deliver_events(items, "newsletter/monthly", engagement)
    deliver_events(items, "newsletter/monthly", engagement)

    # Then the counts equal the mails, exactly once
    assert counts(resources, "nl", "newsletter/monthly") == (6, 6)
    (ledger,) = [i for i in scan_all(table) if (i["PK"], i["SK"]) == ledger_key]
    assert ledger["send"] == 0
    assert len(outbox) == 6


def test_a_passing_counter_conflict_counts_the_batch_at_once(
    worker, env: Env, store, conflicts, resources, outbox
) -> None:
    message = resolved_batch(env, store, "nl2", readers=3)
    conflicts.remaining = 1  # the batch's own transaction is refused once

    assert run_worker(worker, message["Body"]) == {"batchItemFailures": []}

    assert len(outbox) == 3 and conflicts.injected == 1
    assert counts(resources, "nl2", "newsletter/monthly") == (3, 3)
    record = env.service.get("nl2")
    assert record is not None and (record.status, record.sent) == ("done", 3)


# ----- settling a pending count is exactly once, whoever settles it and however often ----------
def test_two_callers_that_read_the_same_pending_count_add_it_once(send_ctx, store, resources) -> None:
    # Given a send whose count an older version left pending (its entry marked count_pending,
    # not for the stats fold), as two consumers both read it
    table = resources.tables["table_name"]
    store.upsert("eve@example.com")
    job = SendJob(email="eve@example.com", template="welcome", source="onboarding", step="e")
    assert send(job, send_ctx).status == "sent"
    (item,) = sent_items(table, "onboarding")
    sent_key = key(item["PK"], item["SK"])
    client("dynamodb").update_item(
        TableName=table,
        Key=sent_key,
        UpdateExpression="SET #pending = :yes REMOVE #fold",
        ExpressionAttributeNames={"#pending": COUNT_PENDING, "#fold": FOLD_COUNT},
        ExpressionAttributeValues={":yes": {"BOOL": True}},
    )

    # When both settle it: the first adds it, the second finds it added
    settled = [
        stats.settle_send(
            client("dynamodb"), table, sent_key, "onboarding", "welcome", at="2026-11-26T10:00:00.000Z"
        )
        for _ in "ab"
    ]
    assert settled == [True, False]
    assert counts(resources, "onboarding", "welcome") == (1, 1)


def test_a_ledger_moves_no_more_than_it_holds(resources) -> None:
    # Given 5 broadcast sends in a ledger, read by two callers
    table = resources.tables["table_name"]
    ddb = client("dynamodb")
    ddb.transact_write_items(
        TransactItems=[stats.uncounted_add(table, "bc", "news/june", 5, at="2026-11-26T10:00:00.000Z")]
    )

    # When both move the 5 they read, and one moves more than is left
    moved = [
        stats.settle_uncounted(ddb, table, "bc", "news/june", n, at="2026-11-26T10:00:00.000Z")
        for n in (5, 5, 1)
    ]

    # Then the sends are counted once: the ledger plus the counters always equal the sends
    assert moved == [True, False, False]
    assert counts(resources, "bc", "news/june") == (5, 5)
    (ledger,) = [i for i in scan_all(table) if (i["PK"], i["SK"]) == keys.uncounted_key("bc", "news/june")]
    assert ledger["send"] == 0


# ----- sharded counters ------------------------------------------------------------------------
def test_concurrent_counting_spreads_over_the_shards_and_reads_sum_them(resources) -> None:
    # Given 200 sends counted from 8 threads, each its own transaction (as workers and the
    # engagement consumer do), and a count written before the counters were sharded
    from concurrent.futures import ThreadPoolExecutor

    table = resources.tables["table_name"]
    ddb = client("dynamodb")
    ddb.put_item(
        TableName=table,
        Item={"PK": {"S": keys.stats_pk("bc")}, "SK": {"S": keys.COUNTERS}, "send": {"N": "7"}},
    )

    def count(_: int) -> None:
        actions = stats.send_counters(table, {("bc", "news/june"): 1}, at="2026-11-26T10:00:00.000Z")
        ddb.transact_write_items(TransactItems=actions)

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(count, range(200)))

    # Then the counts went to many items under many partition keys, and a read sums them all
    shards = {i["PK"] for i in scan_all(table) if i["SK"] == keys.COUNTERS and i["PK"].startswith("STATS#bc")}
    assert len(shards) > keys.COUNTER_SHARDS // 2 and shards <= set(
        keys.counter_shard_pks(keys.stats_pk("bc"))
    )
    assert counts(resources, "bc", "news/june") == (207, 200)
    store = StatsStore(table, resources.tables["events_table_name"])
    listed = store.sources()
    assert set(listed) == {"bc"} and listed["bc"].total("send") == 207
    # and the read of several sources at once (the overview's) sums the same, a source without
    # counters reading as zero
    many = store.sources_of(["bc", "nothing-here", "bc"])
    assert many["bc"] == store.source("bc") and many["bc"].total("send") == 207
    assert many["nothing-here"].total("send") == 0 and set(many) == {"bc", "nothing-here"}


def test_a_conflict_on_the_active_count_delays_its_fold_never_the_execution_pair(
    resources, store: SubscriberStore, conflicts: CounterConflicts
) -> None:
    # Given a subscriber, and each sequence's active-executions count held by concurrent
    # transactions for the next two tries of every transaction on it
    store.upsert("ada@example.com")
    conflicts.sks = frozenset({keys.ACTIVE})
    arn = "arn:aws:states:us-east-1:123456789012:execution:onboarding:one"
    stats_store = StatsStore(resources.tables["table_name"], resources.tables["events_table_name"])

    # When the pair is written, then deleted (the execution ended) and deleted again (delivered
    # twice): the pair's transactions never meet the count
    conflicts.remaining = 2
    store.put_execution("ada@example.com", "onboarding", arn)
    assert [e.execution_arn for e in store.list_executions("ada@example.com")] == [arn]
    assert store.sequence_members("onboarding") == ["ada@example.com"]
    assert store.delete_execution("ada@example.com", "onboarding", arn) is True
    assert store.delete_execution("ada@example.com", "onboarding", arn) is False
    assert conflicts.injected == 0 and store.list_executions("ada@example.com") == []

    # When the stats fold counts the pair's records: retried past the conflicts, counted once
    fold = StreamCountFold(resources.tables["table_name"])
    fold.pause = lambda _seconds: None
    assert fold_batches(fold, Streams(STATS_FOLD_FUNCTION)).executions == 2
    assert conflicts.injected == 2
    counted = stats_store.executions_of(["onboarding"])["onboarding"]
    assert counted == {"active": 0, "started": 1, "completed": 0}
