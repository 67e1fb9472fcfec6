"""The single sends' and the executions' counts, folded by the stats-fold function from the main
table's real change stream (through the mapping's filter) on moto: each ``SENT#`` entry marked
``fold_count`` is one ``send`` on its source (and its step), its template and its day; each
subscriber's ``EXEC#`` item one start when written, one end (and a completion when it ran to its
last step) when deleted. Exactly once however Lambda hands the stream's records again: the same
batch, a batch with more records after it, a shorter one, a batch whose first runs were written
before a crash. A broadcast's entries are not counted here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from local_aws.apigw import LambdaContext
from local_aws.provision import LocalResources
from shared.core import clock
from shared.core.specs import STATS_FOLD_FUNCTION
from shared.store import keys, stream_counts
from shared.store.send_log import SendLog, SentRecord
from shared.store.stats import StatsStore
from shared.store.stream_counts import StreamCountFold, entry_of
from shared.store.subscribers import SubscriberStore
from tests.integration.conftest import handler_module
from tests.integration.webhook_support import Streams

DAY = "2026-11-27"


def record(
    n: int, *, source: str = "onboarding", template: str = "onboarding/welcome", step: str = ""
) -> SentRecord:
    return SentRecord(
        email=f"reader{n}@example.com",
        source=source,
        step=step or f"S1:arn:aws:states:us-east-1:123456789012:execution:m:e{n}",
        send_id=f"send{n:04d}",
        template=template,
        subject="Hi",
        ses_message_id=f"message-{n}",
        transactional=False,
        sent_at=f"{DAY}T10:00:{n % 60:02d}.000Z",
        ttl=clock.ttl_after(30),
    )


@dataclass
class Sends:
    """The send log, the counters and the stats fold's view of the main table's stream."""

    resources: LocalResources
    log: SendLog
    stats: StatsStore
    stream: Streams

    def fold(self, batch: list[dict[str, Any]]) -> int:
        return StreamCountFold(self.resources.tables["table_name"]).fold(batch).sends


@pytest.fixture
def sends(resources: LocalResources) -> Sends:
    stream = Streams(STATS_FOLD_FUNCTION)
    stream.skip()
    table = resources.tables["table_name"]
    return Sends(resources, SendLog(table), StatsStore(table, resources.tables["events_table_name"]), stream)


def test_each_single_send_is_counted_once_through_the_handler_however_its_batch_comes_again(
    sends: Sends, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given three mails of a sequence's first step, one of its third, a transactional mail, and
    # a broadcast's mail (counted by its batch, not here)
    for n in range(3):
        assert sends.log.complete(record(n))
    sends.log.complete(record(3, step="S3:arn:aws:states:us-east-1:123456789012:execution:m:e3"))
    sends.log.complete(record(4, source="api", template="receipts/order", step="api-4"))
    sends.log.complete(record(5, source="b-spring", template="news/spring", step="b-spring"), count=False)
    batch = sends.stream.take()
    assert len(batch) == 5  # the broadcast's entry does not pass the mapping's filter

    # When the stats-fold function gets the batch, then the same batch again (a retry)
    module = handler_module("stats_fold", sends.resources.env(), monkeypatch)
    for _ in range(2):
        assert module.handler({"Records": batch}, LambdaContext("stats-fold")) == {"batchItemFailures": []}

    # Then each mail is one send on its source, step, template and day
    assert sends.stats.source("onboarding").total("send") == 4
    assert sends.stats.steps("onboarding") == {"S1": {"sent": 3}, "S3": {"sent": 1}}
    assert sends.stats.template("onboarding/welcome").total("send") == 4
    assert (
        sends.stats.source("api").total("send"),
        sends.stats.template("receipts/order").total("send"),
    ) == (1, 1)
    assert sends.stats.source("b-spring").total("send") == 0
    assert sends.stats.daily(clock.parse_iso(f"{DAY}T00:00:00Z").date(), 1)[0].get("send") == 5

    # When the batch comes again shorter, and again with two more records after it
    assert sends.fold(batch[:2]) == 0
    sends.log.complete(record(6))
    sends.log.complete(record(7))
    assert sends.fold([*batch, *sends.stream.take()]) == 2

    # Then only the new records were added
    assert sends.stats.source("onboarding").total("send") == 6


def test_a_batch_cut_into_runs_and_retried_after_a_crash_counts_each_send_once(
    sends: Sends, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given 150 mails of 150 templates: more counters items than one transaction holds
    for n in range(150):
        sends.log.complete(record(n, template=f"t/n{n}"))
    batch = sends.stream.take()
    assert len(batch) == 150

    # When the fold dies after its first run was written
    real = stream_counts.try_transact
    written: list[int] = []

    def dies_after_one(client: Any, actions: Any) -> Any:
        if written:
            raise RuntimeError("the function timed out")
        written.append(len(actions))
        return real(client, actions)

    monkeypatch.setattr(stream_counts, "try_transact", dies_after_one)
    with pytest.raises(RuntimeError):
        sends.fold(batch)
    first_run = sends.stats.source("onboarding").total("send")
    assert 0 < first_run < 150 and written == [1 + first_run + 2]  # the mark, the templates, source, day

    # When Lambda retries the batch from its first record, whole, twice
    monkeypatch.setattr(stream_counts, "try_transact", real)
    assert sends.fold(batch) == 150 - first_run
    assert sends.fold(batch) == 0

    # Then every mail is counted once
    assert sends.stats.source("onboarding").total("send") == 150
    assert all(sends.stats.template(f"t/n{n}").total("send") == 1 for n in (0, first_run - 1, first_run, 149))


def test_only_inserted_entries_marked_for_the_fold_are_sends() -> None:
    image = {
        "source": {"S": "onboarding"},
        "template": {"S": "onboarding/welcome"},
        "sent_at": {"S": f"{DAY}T10:00:00.000Z"},
        "fold_count": {"BOOL": True},
    }

    def raw(event: str, sk: str, new: dict[str, Any]) -> dict[str, Any]:
        keys = {"PK": {"S": "SUB#a@example.com"}, "SK": {"S": sk}}
        return {
            "eventID": "e1",
            "eventName": event,
            "dynamodb": {"Keys": keys, "NewImage": new, "SequenceNumber": "12"},
        }

    entry = entry_of(raw("INSERT", "SENT#x", image))
    assert entry is not None and entry.sequence == "12".zfill(40)
    assert entry.adds[("STATS#onboarding", "COUNTERS")] == {"send": 1}
    assert entry_of(raw("MODIFY", "SENT#x", image)) is None
    assert entry_of(raw("INSERT", "SENT#x", {k: v for k, v in image.items() if k != "fold_count"})) is None
    assert entry_of(raw("INSERT", "PROFILE", image)) is None


def test_each_execution_is_counted_once_from_its_pair_however_its_batch_comes_again(
    sends: Sends, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given three executions of a sequence: one ran to its end, one was stopped, one is running
    table = sends.resources.tables["table_name"]
    store = SubscriberStore(table, sends.resources.tables["events_table_name"])
    for n in range(3):
        store.upsert(f"reader{n}@example.com")
        store.put_execution(f"reader{n}@example.com", "onboarding", f"arn:e{n}")
    store.mark_execution_ended("reader0@example.com", "onboarding", "arn:e0", keys.EXECUTION_COMPLETED)
    assert store.delete_execution("reader0@example.com", "onboarding", "arn:e0")
    assert store.delete_execution("reader1@example.com", "onboarding", "arn:e1")
    batch = sends.stream.take()
    # the profiles' records (list health) and each subscriber's EXEC# insert and delete; not the
    # inverse items, not the ENTERED# markers, not the ``ended`` mark's change
    exec_records = [r for r in batch if r["dynamodb"]["Keys"]["SK"]["S"].startswith("EXEC#")]
    assert [r["eventName"] for r in exec_records] == ["INSERT", "INSERT", "INSERT", "REMOVE", "REMOVE"]
    assert all(r["dynamodb"]["Keys"]["PK"]["S"].startswith("SUB#") for r in exec_records)

    # When the stats-fold function gets the batch twice, then a shorter one
    module = handler_module("stats_fold", sends.resources.env(), monkeypatch)
    for _ in range(2):
        assert module.handler({"Records": batch}, LambdaContext("stats-fold")) == {"batchItemFailures": []}
    assert StreamCountFold(table).fold(batch[:4]).executions == 0

    # Then each start, end and completion is counted once
    counts = sends.stats.executions_of(["onboarding"])["onboarding"]
    assert counts == {"active": 1, "started": 3, "completed": 1}
