"""Recovery of a send whose worker died between SES and the send log, and dead-lettered
broadcast batches, on moto.

- The engagement consumer writes the missing ``SENT#`` of a claim left ``sending`` from an
  SES event that carries its send id; a takeover after the lease then answers
  ``already_sent`` and SES is not called again.
- A broadcast batch that fails on its final receive is marked dead-lettered on the record
  once; a duplicate delivery of that final receive does not count it twice; the batch
  counted after a redrive leaves the count.
"""

from __future__ import annotations

import copy
import json
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from local_aws.provision import LocalResources
from shared.broadcasts.model import parse_batch, parse_request
from shared.broadcasts.records import dead_letter_sk
from shared.broadcasts.worker import BatchIncomplete, process_batch
from shared.core import clock
from shared.core.aws import client
from shared.engagement.consumer import EngagementContext, process_body
from shared.engagement.suppression import Suppressions
from shared.sending.jobs import SendJob
from shared.sending.pipeline import SendContext, SendOutcome, send, send_id_for
from shared.sending.sender import SendResult, SesSender, encode_tag_value
from shared.store.send_log import RECOVERED_FROM_EVENT, SendLog, SentRecord
from shared.store.stats import StatsStore
from shared.store.subscribers import SubscriberStore, keys
from tests.integration.broadcast_support import Env, seed
from tests.integration.conftest import fold_stream, operations, scan_all

FIXTURES = Path(__file__).resolve().parents[1] / "unit" / "fixtures" / "ses"
EMAIL = "jane@example.com"
JOB = SendJob(email=EMAIL, template="welcome", source="onboarding", step="s1")


class WorkerDied(Exception):
    """The worker process ended between SES's answer and the send log."""


class DiesAfterSes(SendLog):
    def complete(self, record: SentRecord, *, count: bool = True) -> bool:
        raise WorkerDied(record.ses_message_id)


class EventArrivesFirst(SendLog):
    """The SES event reaches the consumer before the (slow, alive) worker writes its log."""

    def __init__(self, table: str, deliver: Any) -> None:
        super().__init__(table)
        self.deliver = deliver
        self.written: list[bool] = []

    def complete(self, record: SentRecord, *, count: bool = True) -> bool:
        self.deliver(record.ses_message_id)
        self.written.append(super().complete(record, count=count))
        return self.written[-1]


@pytest.fixture
def table(resources: LocalResources) -> str:
    return resources.tables["table_name"]


@pytest.fixture
def engagement(store: SubscriberStore) -> EngagementContext:
    return EngagementContext(store=store, suppressions=Suppressions(store), data_ttl_days=30)


def ses_event(kind: str, job: SendJob, message_id: str, **tags: str) -> str:
    """An SES event (SNS envelope) for ``job``'s mail, tagged as the send pipeline tags."""
    record = json.loads((FIXTURES / f"{kind}.json").read_text())
    record = copy.deepcopy(record)
    mail = record["mail"]
    mail["messageId"], mail["destination"] = message_id, [job.email]
    values = {
        "template": job.template,
        "source": job.source,
        "step": job.step,
        "send_id": send_id_for(job),
        "kind": "marketing",
        **tags,
    }
    mail["tags"].update({name: [encode_tag_value(value)] for name, value in values.items()})
    body = next(k for k in record if k not in ("eventType", "mail"))
    if "recipients" in record[body]:
        record[body]["recipients"] = [job.email]
    return json.dumps({"Type": "Notification", "MessageId": str(uuid.uuid4()), "Message": json.dumps(record)})


def sent_items(table: str) -> list[dict[str, Any]]:
    return [i for i in scan_all(table) if i["SK"].startswith(keys.SENT_PREFIX)]


@pytest.mark.parametrize("tagged", [True, False], ids=["sent_at-tag", "mail-of-earlier-versions"])
def test_an_event_for_an_orphaned_claim_writes_its_log_and_the_takeover_does_not_send_again(
    store, table, outbox, send_ctx, engagement, resources, tagged
) -> None:
    # Given a worker that died after SES accepted the mail, before writing SENT#
    store.upsert(EMAIL)
    now = datetime.now(UTC)
    with pytest.raises(WorkerDied) as died:
        send(JOB, replace(send_ctx, log=DiesAfterSes(table)), now=now)
    assert len(outbox) == 1 and sent_items(table) == []
    # the pipeline's sent_at tag (mail sent before it had one carries none)
    tags = {"sent_at": clock.iso(now)} if tagged else {}

    # When SES's Delivery event for that mail reaches the engagement consumer
    outcome = process_body(ses_event("delivery", JOB, str(died.value), **tags), engagement)

    # Then the send log holds the send, written from the event, and counted once
    assert outcome.recovered_sends == 1
    (item,) = sent_items(table)
    assert item["recovered"] == RECOVERED_FROM_EVENT
    assert item["send_id"] == send_id_for(JOB) and item["ses_message_id"] == str(died.value)
    assert fold_stream(resources).sends == 1
    stats = StatsStore(table, resources.tables["events_table_name"])
    assert stats.source("onboarding").total("send") == 1

    # When the job comes back within the lease, and again after it (a takeover)
    within = send(JOB, send_ctx, now=now + timedelta(seconds=5))
    with operations() as calls:
        after = send(JOB, send_ctx, now=now + timedelta(seconds=send_ctx.lease_seconds + 1))

    # Then both answer already_sent and SES is not called: one mail, one log entry, one count
    assert (within.status, within.reason) == ("skipped", "already_sent")
    assert (after.status, after.reason) == ("skipped", "already_sent")
    assert "SendEmail" not in calls
    assert len(outbox) == 1 and len(sent_items(table)) == 1
    assert fold_stream(resources).sends == 0
    assert stats.source("onboarding").total("send") == 1
    # and a redelivered event writes nothing more
    assert process_body(ses_event("delivery", JOB, str(died.value), **tags), engagement).recovered_sends == 0


def test_without_an_event_the_takeover_after_the_lease_sends_again(store, table, outbox, send_ctx) -> None:
    store.upsert(EMAIL)
    now = datetime.now(UTC)
    with pytest.raises(WorkerDied):
        send(JOB, replace(send_ctx, log=DiesAfterSes(table)), now=now)
    again = send(JOB, send_ctx, now=now + timedelta(seconds=send_ctx.lease_seconds + 1))
    assert again.status == "sent" and len(outbox) == 2
    (item,) = sent_items(table)
    assert item["after_takeover"] is True


def test_an_event_that_beats_the_living_worker_leaves_one_log_entry_counted_once(
    store, table, send_ctx, engagement, resources
) -> None:
    store.upsert(EMAIL)
    log = EventArrivesFirst(
        table, lambda message_id: process_body(ses_event("delivery", JOB, message_id), engagement)
    )

    outcome = send(JOB, replace(send_ctx, log=log))

    assert outcome.status == "sent"
    assert log.written == [False]  # the consumer wrote it first; the worker's write found it
    assert len(sent_items(table)) == 1
    assert fold_stream(resources).sends == 1
    assert StatsStore(table, resources.tables["events_table_name"]).source("onboarding").total("send") == 1


def test_events_of_completed_or_unknown_sends_write_no_log(store, table, send_ctx, engagement) -> None:
    store.upsert(EMAIL)
    sent = send(JOB, send_ctx)
    assert sent.status == "sent"
    # a completed send: the claim is sending, but its entry exists
    assert process_body(ses_event("delivery", JOB, str(sent.message_id)), engagement).recovered_sends == 0
    # a mail mailstep has no claim for (another system on the configuration set)
    other = SendJob(email=EMAIL, template="welcome", source="elsewhere", step="x")
    assert process_body(ses_event("delivery", other, "m-other"), engagement).recovered_sends == 0
    # an event for the claim's key but another send id
    assert process_body(ses_event("delivery", JOB, "m-3", send_id="f" * 24), engagement).recovered_sends == 0
    # a Reject proves nothing was sent
    with pytest.raises(WorkerDied):
        send(
            SendJob(email=EMAIL, template="welcome", source="onboarding", step="s2"),
            replace(send_ctx, log=DiesAfterSes(table)),
        )
    s2 = SendJob(email=EMAIL, template="welcome", source="onboarding", step="s2")
    assert process_body(ses_event("reject", s2, "m-4"), engagement).recovered_sends == 0
    assert len(sent_items(table)) == 1


class StaleReads:
    """The table's client, with DynamoDB's eventually consistent reads as they may answer: a
    BatchGetItem without ``ConsistentRead`` returns ``stale`` (an older version of an item) in
    place of the item it names; a strongly consistent one reads the table as it is. Each
    request's keys and consistency are kept."""

    def __init__(self, real: Any, stale: dict[str, Any]) -> None:
        self.real, self.stale = real, stale
        self.reads: list[tuple[bool, list[str]]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def batch_get_item(self, RequestItems: dict[str, Any], **kwargs: Any) -> Any:  # noqa: N803
        answer = self.real.batch_get_item(RequestItems=RequestItems, **kwargs)
        for table, request in RequestItems.items():
            consistent = bool(request.get("ConsistentRead"))
            self.reads.append((consistent, [k["SK"]["S"] for k in request["Keys"]]))
            if consistent:
                continue
            stale_key = (self.stale["PK"]["S"], self.stale["SK"]["S"])
            items = answer.get("Responses", {}).get(table, [])
            answer["Responses"][table] = [
                self.stale if (i["PK"]["S"], i["SK"]["S"]) == stale_key else i for i in items
            ]
        return answer


def consumer_reading(
    stale: dict[str, Any], engagement: EngagementContext
) -> tuple[EngagementContext, StaleReads]:
    """``engagement`` on a client whose eventually consistent reads answer ``stale``."""
    reads = StaleReads(engagement.store.client, stale)
    store = SubscriberStore(engagement.store.table, engagement.store.events_table, client=reads)
    return replace(engagement, store=store, suppressions=Suppressions(store)), reads


def claim_item(table: str, job: SendJob) -> dict[str, Any]:
    """The claim item of ``job``'s send as DynamoDB holds it."""
    sk = keys.send_claim_sk(job.source, job.step)
    return client("dynamodb").get_item(
        TableName=table, Key={"PK": {"S": keys.sub_pk(job.email)}, "SK": {"S": sk}}
    )["Item"]


def test_a_completed_send_s_event_reads_its_claim_and_entry_eventually_consistent_only(
    store, table, send_ctx, engagement
) -> None:
    store.upsert(EMAIL)
    sent = send(JOB, send_ctx)
    consumer, reads = consumer_reading(claim_item(table, JOB), engagement)

    assert process_body(ses_event("delivery", JOB, str(sent.message_id)), consumer).recovered_sends == 0

    recovery = [(c, sks) for c, sks in reads.reads if any(sk.startswith(("SEND#", "SENT#")) for sk in sks)]
    assert [c for c, _ in recovery] == [False, False]  # the claim, then its entry: half a unit each


class TagsKept(SesSender):
    """The real SES adapter, keeping the tags of each mail it sends."""

    def __init__(self) -> None:
        super().__init__("mailstep")
        self.tags: list[dict[str, str]] = []

    def send_raw(self, raw: bytes, **kwargs: Any) -> SendResult:
        self.tags.append(dict(kwargs["tags"]))
        return super().send_raw(raw, **kwargs)


def test_a_send_tagged_with_its_sent_at_has_its_event_read_the_entry_alone_eventually_consistent(
    store, table, send_ctx, engagement, resources
) -> None:
    # Given a completed send, its mail tagged by the pipeline
    store.upsert(EMAIL)
    ses = TagsKept()
    sent = send(JOB, replace(send_ctx, ses=ses))
    (entry,) = sent_items(table)
    (tags,) = ses.tags
    assert tags["sent_at"] == entry["sent_at"]  # the tag names the entry's key
    consumer, reads = consumer_reading(claim_item(table, JOB), engagement)

    # When its Delivery event arrives (twice: SQS delivers at least once)
    event = ses_event("delivery", JOB, str(sent.message_id), sent_at=tags["sent_at"])
    assert process_body(event, consumer).recovered_sends == 0
    assert process_body(event, consumer).recovered_sends == 0

    # Then each look is one eventually consistent read of the entry (half a unit), no claim
    recovery = [(c, [sk for sk in sks if sk.startswith(("SEND#", "SENT#"))]) for c, sks in reads.reads]
    assert [r for r in recovery if r[1]] == [(False, [entry["SK"]])] * 2
    assert len(sent_items(table)) == 1 and fold_stream(resources).sends == 1


def test_a_claim_read_stale_after_a_release_and_a_new_claim_writes_no_second_entry(
    store, table, send_ctx, engagement, resources
) -> None:
    # Given a send logged under its second claim; the first (a minute earlier) was released
    store.upsert(EMAIL)
    sent = send(JOB, send_ctx)
    (entry,) = sent_items(table)
    older = claim_item(table, JOB)
    earlier = datetime.fromisoformat(entry["sent_at"]) - timedelta(minutes=1)
    older["sent_at"], older["claim_id"] = {"S": earlier.isoformat()}, {"S": uuid.uuid4().hex}
    # When the mail's event is read by a consumer whose eventually consistent read still
    # returns that first claim (it names another sent_at: no entry under its key)
    consumer, reads = consumer_reading(older, engagement)
    outcome = process_body(ses_event("delivery", JOB, str(sent.message_id)), consumer)

    # Then it looks again, strongly consistent, finds the entry, and writes nothing
    assert outcome.recovered_sends == 0
    assert len(sent_items(table)) == 1
    assert any(c and any(sk.startswith("SEND#") for sk in sks) for c, sks in reads.reads)
    assert fold_stream(resources).sends == 1


# ----- dead-lettered broadcast batches ---------------------------------------------------------
def in_flight(job: SendJob, ctx: SendContext) -> SendOutcome:
    return SendOutcome(status="retryable", send_id=send_id_for(job), reason="in_flight")


def test_a_batch_failing_its_final_receive_is_marked_dead_lettered_once_and_cleared_when_counted(
    env: Env, store
) -> None:
    seed(store, 30)
    env.service.send(parse_request(id="dl", template="newsletter/monthly", audience={"tags": ["a"]}))
    env.resolve_all()
    (message,) = env.batches()
    batch = parse_batch(message["Body"])
    stuck = env.worker(send_fn=in_flight)
    stuck.sleep = lambda _s: None  # the in-batch waits for the claim (no wall time here)

    # An earlier receive that fails marks nothing
    with pytest.raises(BatchIncomplete):
        process_batch(batch, stuck)
    assert env.service.get("dl").dead_lettered_batches == 0

    # The final receive fails: marked once, even when SQS delivers that receive twice
    for _ in range(2):
        with pytest.raises(BatchIncomplete):
            process_batch(batch, stuck, final_receive=True)
    record = env.service.get("dl")
    assert (record.dead_lettered_batches, record.dead_lettered_recipients) == (1, len(batch.emails))
    assert record.stalled and record.status == "sending"
    details = env.service.details("dl")
    assert details["dead_letters"]["batches"] == 1
    assert details["dead_letters"]["redrive"].startswith("aws sqs start-message-move-task --source-arn arn:")
    marker = [
        i for i in scan_all(env.table) if i["SK"] == dead_letter_sk(record.round, batch.page, batch.index)
    ]
    assert len(marker) == 1

    # When it is redriven and works, it is counted and leaves the dead-letter count
    result = process_batch(batch, env.worker())
    record = env.service.get("dl")
    assert result.status == "counted" and record.status == "done"
    assert (record.dead_lettered_batches, record.dead_lettered_recipients) == (0, 0)
    assert not record.stalled
