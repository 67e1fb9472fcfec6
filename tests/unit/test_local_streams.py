"""The local runtime's DynamoDB stream event sources: Lambda event filtering of the webhook
mappings' patterns, and the poller's batches, partial responses, bisection and retries."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from local_aws.streams import ShardReaders, StreamPoller, lambda_record, pattern_matches, record_passes
from shared.core.specs import WEBHOOK_EVENTS_FILTERS, WEBHOOK_MAIN_FILTERS


def rec(name: str, pk: str, sk: str, seq: int = 1, **new: str) -> dict[str, Any]:
    image = {"PK": {"S": pk}, "SK": {"S": sk}, **{k: {"S": v} for k, v in new.items()}}
    return {
        "eventID": f"e{seq}",
        "eventName": name,
        "dynamodb": {
            "Keys": {"PK": {"S": pk}, "SK": {"S": sk}},
            "NewImage": image,
            "SequenceNumber": str(seq),
        },
    }


def test_the_main_table_filters_pass_webhook_sources_only() -> None:
    passes = [
        rec("INSERT", "SUB#a@b.c", "PROFILE"),
        rec("REMOVE", "SUB#a@b.c", "PROFILE"),
        rec("MODIFY", "SUB#a@b.c", "PROFILE"),
        rec("INSERT", "SUB#a@b.c", "SUPPRESSION"),
        rec("INSERT", "SUB#a@b.c", "SENT#2026#src#id"),
        rec("INSERT", "SUB#a@b.c", "EXEC#onboarding"),
        rec("REMOVE", "SUB#a@b.c", "EXEC#onboarding"),
        rec("MODIFY", "BROADCAST", "2026#b1"),
    ]
    dropped = [
        rec("MODIFY", "SUB#a@b.c", "SENT#2026#src#id"),  # a counted send log entry
        rec("MODIFY", "SUB#a@b.c", "EXEC#onboarding"),  # the ended mark
        rec("INSERT", "EXEC#onboarding", "SUB#a@b.c"),  # the inverse partner
        rec("INSERT", "SUB#a@b.c", "SEND#src#step"),  # a claim
        rec("INSERT", "TAG#pro", "SUB#a@b.c"),
        rec("MODIFY", "STATS#onboarding", "COUNTERS"),
        rec("INSERT", "RATE#broadcast#r1#0", "r1"),
        rec("MODIFY", "BROADCAST#b1", "POINTER"),
    ]
    assert all(record_passes(r, WEBHOOK_MAIN_FILTERS) for r in passes)
    assert not any(record_passes(r, WEBHOOK_MAIN_FILTERS) for r in dropped)


def test_the_events_table_filter_passes_engagement_and_confirmations() -> None:
    for kind in ("delivery", "bounce", "complaint", "open", "click", "subscriber.confirmed"):
        assert record_passes(rec("INSERT", "SUB#a@b.c", f"EVT#t#{kind}#x", type=kind), WEBHOOK_EVENTS_FILTERS)
    for kind in ("purchase.completed", "send_skipped", "reply"):
        assert not record_passes(
            rec("INSERT", "SUB#a@b.c", f"EVT#t#{kind}#x", type=kind), WEBHOOK_EVENTS_FILTERS
        )


def test_pattern_rules() -> None:
    assert pattern_matches({"a": [{"exists": False}]}, {"b": 1})
    assert not pattern_matches({"a": [{"exists": True}]}, {"b": 1})
    assert pattern_matches({"a": [{"anything-but": ["x"]}]}, {"a": "y"})
    assert not pattern_matches({"a": {"b": ["x"]}}, {"a": "x"})
    assert record_passes({"anything": 1}, [])


def test_lambda_record_has_json_values_and_the_source_arn() -> None:
    moment = datetime(2026, 11, 27, 1, 2, 3, tzinfo=UTC)
    found = lambda_record({"eventID": "e", "dynamodb": {"ApproximateCreationDateTime": moment}}, "arn:s")
    assert found == {
        "eventID": "e",
        "dynamodb": {"ApproximateCreationDateTime": 1795741323},
        "eventSourceARN": "arn:s",
    }


@dataclass
class Item:
    record: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return self.record


@dataclass
class Shard:
    items: list[Item] = field(default_factory=list)
    starting_sequence_number: int = 1


def poller(shard: Shard, invoke: Any, **kwargs: Any) -> StreamPoller:
    options = {"batch_size": 4, "patterns": [], "retry_attempts": 2, "bisect": True} | kwargs
    return StreamPoller(shard=shard, stream_arn="arn:s", function="fn", invoke=invoke, **options)


def seqs(event: dict[str, Any]) -> list[int]:
    return [int(r["dynamodb"]["SequenceNumber"]) for r in event["Records"]]


def test_batches_in_order_and_a_partial_response_resumes_from_the_reported_record() -> None:
    shard = Shard([Item(rec("INSERT", "SUB#a@b.c", "PROFILE", seq=i)) for i in range(1, 7)])
    calls: list[list[int]] = []

    def invoke(function: Any, event: dict[str, Any]) -> tuple[Any, bool]:
        calls.append(seqs(event))
        if len(calls) == 1:  # the first batch: records 3 and 4 failed
            return {"batchItemFailures": [{"itemIdentifier": "3"}]}, False
        return {"batchItemFailures": []}, False

    p = poller(shard, invoke)
    while p.poll_once():
        pass
    # the retry starts at the reported record, split in two (BisectBatchOnFunctionError)
    assert calls == [[1, 2, 3, 4], [3], [4], [5, 6]]
    assert p.pending() == 0


def test_a_failing_batch_is_bisected_then_skipped_after_its_retries() -> None:
    shard = Shard([Item(rec("INSERT", "SUB#a@b.c", "PROFILE", seq=i)) for i in range(1, 5)])
    calls: list[list[int]] = []

    def invoke(function: Any, event: dict[str, Any]) -> tuple[Any, bool]:
        calls.append(seqs(event))
        return None, 2 in seqs(event)  # record 2 always fails its batch

    p = poller(shard, invoke, retry_attempts=2)
    p.poll_once()
    assert calls[0] == [1, 2, 3, 4]
    assert [3, 4] in calls and [1] in calls  # split, and the good halves went through
    assert calls.count([2]) >= 1 and len(calls) < 12  # the bad one retried a bounded number of times


def test_trimming_forgets_handed_on_records() -> None:
    shard = Shard([Item(rec("INSERT", "SUB#a@b.c", "PROFILE", seq=i)) for i in range(1, 4)])
    p = poller(
        shard, lambda f, e: ({"batchItemFailures": []}, False), readers=ShardReaders(shard, forget=True)
    )
    assert p.poll_once() and shard.items == [] and shard.starting_sequence_number == 4
    assert not p.poll_once()


def test_two_mappings_of_one_stream_each_get_every_record() -> None:
    # Given the two readers of the main table's stream (webhook-dispatch and stats-fold)
    shard = Shard([Item(rec("INSERT", "SUB#a@b.c", "PROFILE", seq=i)) for i in range(1, 4)])
    readers = ShardReaders(shard, forget=True)
    got: dict[str, list[int]] = {"webhooks": [], "fold": []}

    def invoke_for(name: str) -> Any:
        return lambda f, e: (got[name].extend(seqs(e)), ({"batchItemFailures": []}, False))[1]

    webhooks = poller(shard, invoke_for("webhooks"), readers=readers)
    fold = poller(shard, invoke_for("fold"), readers=readers)
    # When one reader is ahead of the other
    assert webhooks.poll_once()
    # Then the records it passed are kept for the other, and forgotten once both have them
    assert [i.record["dynamodb"]["SequenceNumber"] for i in shard.items] == ["1", "2", "3"]
    shard.items.append(Item(rec("MODIFY", "SUB#a@b.c", "PROFILE", seq=4)))
    assert fold.poll_once() and webhooks.poll_once()
    assert got == {"webhooks": [1, 2, 3, 4], "fold": [1, 2, 3, 4]}
    assert shard.items == [] and fold.pending() == webhooks.pending() == 0


def test_readers_advancing_at_once_forget_each_record_once() -> None:
    shard = Shard([Item(rec("INSERT", "SUB#a@b.c", "PROFILE", seq=i)) for i in range(1, 2001)])
    readers = ShardReaders(shard, forget=True)
    ids = [readers.add(), readers.add()]
    threads = [threading.Thread(target=lambda r=r: [readers.advance(r, 1) for _ in range(2000)]) for r in ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert shard.items == [] and shard.starting_sequence_number == 2001


def test_a_batch_waits_for_its_batching_window_unless_it_is_full() -> None:
    shard = Shard([Item(rec("INSERT", "SUB#a@b.c", "PROFILE", seq=1))])
    now = [100.0]
    calls: list[list[int]] = []

    def invoke(function: Any, event: dict[str, Any]) -> tuple[Any, bool]:
        calls.append(seqs(event))
        return {"batchItemFailures": []}, False

    p = poller(shard, invoke, batching_window_s=1.0, monotonic=lambda: now[0])
    assert not p.poll_once()  # one record of four: the window opens
    shard.items.append(Item(rec("MODIFY", "SUB#a@b.c", "PROFILE", seq=2)))
    now[0] += 0.5
    assert not p.poll_once()
    now[0] += 0.5
    assert p.poll_once() and calls == [[1, 2]]  # the window closed: what arrived goes
    shard.items += [Item(rec("MODIFY", "SUB#a@b.c", "PROFILE", seq=i)) for i in range(3, 7)]
    assert p.poll_once() and calls[-1] == [3, 4, 5, 6]  # a full batch goes at once


def test_skipped_records_send_an_on_failure_record_that_points_at_them() -> None:
    # Given a mapping with an on-failure destination and a record that always fails its batch
    shard = Shard([Item(rec("INSERT", "SUB#a@b.c", "PROFILE", seq=i)) for i in range(1, 3)])
    sent: list[dict[str, Any]] = []

    def invoke(function: Any, event: dict[str, Any]) -> tuple[Any, bool]:
        return None, 2 in seqs(event)

    p = poller(shard, invoke, retry_attempts=1, bisect=False, on_failure=sent.append)
    # When the retries are spent
    p.poll_once()
    # Then one record goes to the destination: the shard and sequence numbers, not the records
    (record,) = sent
    info = record["DDBStreamBatchInfo"]
    assert (info["startSequenceNumber"], info["endSequenceNumber"], info["batchSize"]) == ("1", "2", 2)
    assert info["streamArn"] == "arn:s"
    assert record["requestContext"]["condition"] == "RetryAttemptsExhausted"
    assert record["requestContext"]["approximateInvokeCount"] == 2
    assert record["responseContext"]["functionError"] == "Unhandled"
    assert "Records" not in record and "NewImage" not in str(record)
    assert p.skipped == 2


def test_without_a_destination_skipped_records_leave_no_trace_but_the_count() -> None:
    shard = Shard([Item(rec("INSERT", "SUB#a@b.c", "PROFILE", seq=1))])
    p = poller(shard, lambda function, event: (None, True), retry_attempts=0)
    p.poll_once()
    assert p.skipped == 1
