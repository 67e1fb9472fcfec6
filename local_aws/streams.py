"""DynamoDB stream event sources of the local runtime, like the Lambda service's.

moto records every change of a table with a stream (``StreamShard.items``) and, when a
Lambda event source mapping names the stream, invokes the function inline with the whole
shard from inside the writer's request. Lambda does neither: it polls the stream, applies the
mapping's filter criteria (records that match no filter are dropped, uninvoked), hands
batches of ``BatchSize`` in stream order, and retries a batch that fails (splitting it with
``BisectBatchOnFunctionError``, resuming after the records a partial batch response says
were done) up to ``MaximumRetryAttempts``, then skips the records and, with an on-failure
destination, sends it an invocation record that says which records were skipped (shard, first and
last sequence number, stream ARN: not the records themselves; Lambda Developer Guide, "Retaining
discarded batch records for a DynamoDB event source in Lambda"). :class:`StreamPoller` does that
here; the hook in ``local_aws.hooks`` detaches moto's inline invocation.
"""

from __future__ import annotations

import copy
import json
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from shared.core.observability import logger

STREAM_POLL_S = 0.2


def lambda_record(record: Mapping[str, Any], stream_arn: str) -> dict[str, Any]:
    """A moto stream record as Lambda hands it to a function: JSON values only
    (``ApproximateCreationDateTime`` in epoch seconds) and the ``eventSourceARN``."""
    found = copy.deepcopy(dict(record))
    body = dict(found.get("dynamodb", {}))
    moment = body.get("ApproximateCreationDateTime")
    if isinstance(moment, datetime):
        aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
        body["ApproximateCreationDateTime"] = int(aware.timestamp())
    found["dynamodb"] = body
    found["eventSourceARN"] = stream_arn
    return dict(json.loads(json.dumps(found, default=str)))


def _iso(epoch: Any) -> str | None:
    if not isinstance(epoch, int | float):
        return None
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def on_failure_record(
    records: Sequence[Mapping[str, Any]],
    *,
    shard_id: str,
    stream_arn: str,
    function_arn: str,
    invocations: int,
    errored: bool,
) -> dict[str, Any]:
    """The invocation record Lambda sends a stream source's on-failure destination for the skipped
    ``records`` (Lambda event format): which shard, the first and last sequence number and their
    arrival times, the batch size, the stream. The records are not in it: they stay in the stream
    (24 hours for DynamoDB) for an operator to read (docs/webhooks.md)."""
    first, last = dict(records[0].get("dynamodb", {})), dict(records[-1].get("dynamodb", {}))
    return {
        "requestContext": {
            "requestId": str(uuid.uuid4()),
            "functionArn": function_arn,
            "condition": "RetryAttemptsExhausted",
            "approximateInvokeCount": invocations,
        },
        "responseContext": {
            "statusCode": 200,
            "executedVersion": "$LATEST",
            **({"functionError": "Unhandled"} if errored else {}),
        },
        "version": "1.0",
        "timestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
        "DDBStreamBatchInfo": {
            "shardId": shard_id,
            "startSequenceNumber": str(first.get("SequenceNumber")),
            "endSequenceNumber": str(last.get("SequenceNumber")),
            "approximateArrivalOfFirstRecord": _iso(first.get("ApproximateCreationDateTime")),
            "approximateArrivalOfLastRecord": _iso(last.get("ApproximateCreationDateTime")),
            "batchSize": len(records),
            "streamArn": stream_arn,
        },
    }


def _value_matches(rule: Any, value: Any, present: bool) -> bool:
    if isinstance(rule, dict):
        if "exists" in rule:
            return bool(rule["exists"]) == present
        if "prefix" in rule:
            return present and isinstance(value, str) and value.startswith(str(rule["prefix"]))
        if "anything-but" in rule:
            excluded = rule["anything-but"]
            excluded = excluded if isinstance(excluded, list) else [excluded]
            return present and value not in excluded
        return False
    return present and value == rule


def pattern_matches(pattern: Mapping[str, Any], data: Any) -> bool:
    """One Lambda event filter pattern against an event (the subset mailstep's mappings use:
    nested objects, lists of exact values, ``prefix``, ``exists``, ``anything-but``)."""
    if not isinstance(data, dict):
        return False
    for key, rule in pattern.items():
        present = key in data
        value = data.get(key)
        if isinstance(rule, dict):
            if not present or not pattern_matches(rule, value):
                return False
        elif isinstance(rule, list):
            values = value if isinstance(value, list) else [value]
            if not any(_value_matches(r, v, present) for r in rule for v in values):
                return False
        else:
            return False
    return True


def record_passes(record: Mapping[str, Any], patterns: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a record reaches the function: no filters, or one of them matches."""
    return not patterns or any(pattern_matches(p, record) for p in patterns)


class ShardReaders:
    """Where each event source mapping of one stream shard is, as DynamoDB Streams keeps it: every
    mapping reads every record from its own position (a table's stream may have two readers at
    once: webhook-dispatch and stats-fold read the main table's), and a record is forgotten only
    once every reader has passed it (``forget``; else they are kept), sequence numbers going on
    from where they were. ``lock`` is the one the shard's writer holds (``local_aws.hooks``), so
    a record is appended, read and forgotten one at a time."""

    def __init__(self, shard: Any, *, lock: Any = None, forget: bool = False) -> None:
        self.shard = shard
        self.lock = lock if lock is not None else threading.Lock()
        self.forget = forget
        self.positions: dict[int, int] = {}  # reader -> sequence number of its next record
        self._ids = 0

    def add(self) -> int:
        """A new reader, from the oldest record kept (TRIM_HORIZON)."""
        with self.lock:
            self._ids += 1
            self.positions[self._ids] = int(self.shard.starting_sequence_number)
            return self._ids

    def _offset(self, reader: int) -> int:
        return self.positions[reader] - int(self.shard.starting_sequence_number)

    def peek(self, reader: int, count: int) -> list[Any]:
        """The next ``count`` records of ``reader`` (fewer when the shard has fewer)."""
        with self.lock:
            offset = self._offset(reader)
            return list(self.shard.items[offset : offset + count])

    def pending(self, reader: int) -> int:
        with self.lock:
            return max(0, len(self.shard.items) - self._offset(reader))

    def advance(self, reader: int, count: int) -> None:
        """``reader`` handed on its next ``count`` records; the records every reader passed go."""
        with self.lock:
            self.positions[reader] += count
            passed = min(self.positions.values()) - int(self.shard.starting_sequence_number)
            if self.forget and passed > 0:
                del self.shard.items[:passed]
                self.shard.starting_sequence_number += passed


class StreamPoller:
    """Polls one table's stream for one function, like a DynamoDB stream event source mapping:
    from the records still in the shard when it starts (TRIM_HORIZON), filtered, in batches of
    ``batch_size`` or what arrived within ``batching_window_s`` (``MaximumBatchingWindowInSeconds``:
    Lambda waits that long for a batch to fill), retried and bisected on failure, then past them.
    ``readers`` holds its position among the shard's other mappings (None: it reads alone and
    keeps the records)."""

    def __init__(
        self,
        *,
        shard: Any,
        stream_arn: str,
        function: Any,
        invoke: Any,
        batch_size: int,
        patterns: Sequence[Mapping[str, Any]],
        retry_attempts: int,
        bisect: bool,
        readers: ShardReaders | None = None,
        batching_window_s: float = 0.0,
        on_failure: Callable[[dict[str, Any]], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.shard = shard
        self.stream_arn = stream_arn
        self.function = function
        self.invoke = invoke
        self.batch_size = max(1, batch_size)
        self.patterns = list(patterns)
        self.retry_attempts = retry_attempts
        self.bisect = bisect
        self.readers = readers if readers is not None else ShardReaders(shard)
        self.reader = self.readers.add()
        self.batching_window_s = batching_window_s
        self.monotonic = monotonic
        self._filling_since: float | None = None  # when the batch being filled saw its first record
        # sends the on-failure record of skipped records to the mapping's destination (None: no destination)
        self.on_failure = on_failure
        self.skipped = 0
        self.invocations = 0
        self.stop_event = threading.Event()  # stop() sets it: the poller's waits end at once
        self.thread = threading.Thread(target=self._run, name=f"esm-stream-{stream_arn[-20:]}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=5)  # an invocation in progress may outlast it: the thread is a daemon

    def pending(self) -> int:
        return self.readers.pending(self.reader)

    # start/stop as the SQS poller's (local_aws.lambdas); the loop is the stream's own: its poll
    # interval, and a failed poll backs off a second.
    def _run(self) -> None:
        while not self.stop_event.is_set():
            try:
                if not self.poll_once():
                    self.stop_event.wait(STREAM_POLL_S)
            except Exception:  # the table went away (runtime stopping)
                logger.exception("stream poll failed", stream=self.stream_arn)
                self.stop_event.wait(1)

    def _filling(self, available: int) -> bool:
        """Whether to wait for more records: a batch not full yet within its batching window."""
        if available >= self.batch_size or self.batching_window_s <= 0:
            return False
        now = self.monotonic()
        if self._filling_since is None:
            self._filling_since = now
        return now - self._filling_since < self.batching_window_s

    def poll_once(self) -> bool:
        """Hand the next batch of matching records to the function; False when there was none
        (or the batch is still filling)."""
        items = self.readers.peek(self.reader, self.batch_size)
        if not items or self._filling(len(items)):
            return False
        self._filling_since = None
        # the filters read the keys, images and event name, which moto's records hold as Lambda's
        # do: only the records that pass are copied into the event format
        records = [
            lambda_record(raw, self.stream_arn)
            for raw in (i.to_json() for i in items)
            if record_passes(raw, self.patterns)
        ]
        if records:
            self._deliver(records, self.retry_attempts)
        self.readers.advance(self.reader, len(items))
        return True

    def _deliver(self, records: list[dict[str, Any]], retries: int) -> None:
        """Invoke with ``records``; a failed batch is retried (bisected), then skipped."""
        remaining = records
        attempts = 0
        while remaining and not self.stop_event.is_set():
            self.invocations += 1
            payload, errored = self.invoke(self.function, {"Records": remaining})
            if not errored:
                failed = _first_failure(payload, remaining)
                if failed is None:
                    return
                remaining = remaining[failed:]  # Lambda resumes from the reported record
            attempts += 1
            if attempts > retries:
                logger.warning(
                    "stream records skipped after retries", stream=self.stream_arn, count=len(remaining)
                )
                self.skipped += len(remaining)
                if self.on_failure is not None:
                    self.on_failure(
                        on_failure_record(
                            remaining,
                            shard_id=str(getattr(self.shard, "id", "")),
                            stream_arn=self.stream_arn,
                            function_arn=str(getattr(self.function, "function_arn", "")),
                            invocations=attempts,
                            errored=errored,
                        )
                    )
                return
            if self.bisect and len(remaining) > 1:
                half = len(remaining) // 2
                self._deliver(remaining[:half], retries - attempts)
                self._deliver(remaining[half:], retries - attempts)
                return


def _first_failure(payload: Any, records: list[dict[str, Any]]) -> int | None:
    """The index of the first record a partial batch response reports (None: all done)."""
    if not isinstance(payload, dict) or not isinstance(payload.get("batchItemFailures"), list):
        return None
    reported = {str(f.get("itemIdentifier")) for f in payload["batchItemFailures"] if isinstance(f, dict)}
    for index, record in enumerate(records):
        if str(record.get("dynamodb", {}).get("SequenceNumber")) in reported:
            return index
    return None
