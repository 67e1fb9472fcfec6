"""Lambda invocations of the local runtime.

moto registers the functions and decides when to invoke them (API ``Invoke``, API Gateway
routes through :func:`invoke`, Step Functions tasks); ``local_aws.hooks`` replaces moto's
Docker path with the execution environments of ``local_aws.environments`` (the deployed
artifact, one process per concurrent invocation).
SQS event sources are polled here by :class:`SqsPoller`, which behaves like the Lambda
service: batches, ``ReportBatchItemFailures``, failed messages left for the visibility
timeout (and then the queue's redrive policy).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from local_aws.bootstrap import LambdaContext
from shared.core.observability import logger


@dataclass
class InvocationStats:
    invocations: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    gb_seconds: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, function: str, errored: bool, seconds: float, memory_mb: int) -> None:
        with self._lock:
            self.invocations[function] += 1
            if errored:
                self.errors[function] += 1
            self.gb_seconds += seconds * memory_mb / 1024

    def reset(self) -> None:
        with self._lock:
            self.invocations.clear()
            self.errors.clear()
            self.gb_seconds = 0.0


STATS = InvocationStats()


def context_of(function: Any) -> LambdaContext:
    """A fresh invocation context for a moto ``LambdaFunction``."""
    return LambdaContext(
        function_name=function.function_name,
        function_version=str(function.version),
        invoked_function_arn=function.function_arn,
        memory_limit_in_mb=int(function.memory_size),
        timeout_s=int(function.timeout),
    )


def report(function: Any, context: LambdaContext, errored: bool, elapsed: float) -> str:
    """Count the invocation (:data:`STATS`) and return its START/END/REPORT log lines."""
    STATS.add(function.function_name, errored, elapsed, int(function.memory_size))
    return (
        f"START RequestId: {context.aws_request_id}\n"
        f"END RequestId: {context.aws_request_id}\n"
        f"REPORT RequestId: {context.aws_request_id} Duration: {elapsed * 1000:.2f} ms "
        f"Memory Size: {function.memory_size} MB"
    )


def invoke(function: Any, event: dict[str, Any]) -> tuple[Any, bool]:
    """Invoke through moto's ``LambdaFunction.invoke`` (the same path as the Invoke API)."""
    response_headers: dict[str, str] = {}
    raw = function.invoke(json.dumps(event), {}, response_headers)
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    try:
        payload = json.loads(text) if text else None
    except json.JSONDecodeError:
        payload = text
    return payload, "x-amz-function-error" in response_headers


@dataclass
class PollerCounts:
    receives: int = 0
    deletes: int = 0


class SqsPoller:
    """Polls one SQS queue for one function, like a Lambda SQS event source mapping."""

    def __init__(
        self,
        *,
        sqs_backend: Any,
        queue_name: str,
        queue_arn: str,
        region: str,
        function: Any,
        batch_size: int,
        counts: PollerCounts,
        receive_lock: threading.Lock | None = None,
        batching_window_s: float = 0.0,
    ) -> None:
        self.sqs = sqs_backend
        # Pollers of one mapping share a lock: moto's in-process ReceiveMessage is not atomic,
        # and SQS never hands the same message to two concurrent receivers.
        self.receive_lock = receive_lock or threading.Lock()
        self.queue_name = queue_name
        self.queue_arn = queue_arn
        self.region = region
        self.function = function
        self.batch_size = batch_size
        self.batching_window_s = batching_window_s
        self.counts = counts
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"esm-{queue_name}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=5)

    def _run(self) -> None:
        while not self.stop_event.is_set():
            try:
                messages = self._receive()
                if not messages:
                    self.stop_event.wait(0.2)  # long polling, without holding the lock
                    continue
                messages += self._fill(messages)
                # What the function did not process stays hidden for the rest of the queue's
                # visibility timeout, then comes back (and after maxReceiveCount, the DLQ).
                self._deliver(messages)
            except Exception:  # the queue went away (runtime stopping)
                logger.exception("event source poll failed", queue=self.queue_name)
                self.stop_event.wait(1)
                continue

    def _receive(self, limit: int | None = None) -> list[Any]:
        """One ReceiveMessage (at most 10 messages, as SQS allows)."""
        wanted = min(10, limit if limit is not None else self.batch_size)
        # Received messages stay hidden for the queue's visibility timeout, like SQS: from the
        # other pollers, and, if the function does not process them, until it ends.
        hidden = self.sqs.get_queue(self.queue_name).visibility_timeout
        with self.receive_lock:
            messages = list(self.sqs.receive_message(self.queue_name, wanted, 0, hidden))
        if messages:
            self.counts.receives += 1
        return messages

    def _fill(self, first: list[Any]) -> list[Any]:
        """More messages until the batch is full or the batching window closes (as Lambda's
        MaximumBatchingWindowInSeconds does for batches larger than one receive)."""
        more: list[Any] = []
        deadline = time.monotonic() + self.batching_window_s
        while len(first) + len(more) < self.batch_size and time.monotonic() < deadline:
            received = self._receive(self.batch_size - len(first) - len(more))
            if not received:
                self.stop_event.wait(0.1)
            more += received
        return more

    def _record(self, message: Any) -> dict[str, Any]:
        attributes = {
            "ApproximateReceiveCount": str(message.approximate_receive_count),
            "SentTimestamp": str(message.sent_timestamp),
            "SenderId": str(message.sender_id),
            "ApproximateFirstReceiveTimestamp": str(message.approximate_first_receive_timestamp),
        }
        if message.group_id:
            attributes["MessageGroupId"] = message.group_id
        if message.deduplication_id:
            attributes["MessageDeduplicationId"] = message.deduplication_id
        return {
            "messageId": message.id,
            "receiptHandle": message.receipt_handle,
            "body": message.body,
            "attributes": attributes,
            "messageAttributes": {
                name: {
                    "stringValue": value.get("StringValue"),
                    "binaryValue": value.get("BinaryValue"),
                    "dataType": value.get("DataType"),
                    "stringListValues": [],
                    "binaryListValues": [],
                }
                for name, value in (message.message_attributes or {}).items()
            },
            "md5OfBody": message.body_md5,
            "eventSource": "aws:sqs",
            "eventSourceARN": self.queue_arn,
            "awsRegion": self.region,
        }

    def _deliver(self, messages: list[Any]) -> None:
        """Invoke the function and delete what it processed; the rest stays hidden until the
        visibility timeout ends (then SQS hands it out again, or moves it to the DLQ)."""
        event = {"Records": [self._record(m) for m in messages]}
        payload, errored = invoke(self.function, event)
        if errored:
            return  # every message comes back
        failed: set[str] = set()
        if isinstance(payload, dict) and isinstance(payload.get("batchItemFailures"), list):
            failed = {
                str(f.get("itemIdentifier")) for f in payload["batchItemFailures"] if isinstance(f, dict)
            }
        done = [m for m in messages if m.id not in failed]
        for message in done:
            self.sqs.delete_message(self.queue_name, message.receipt_handle)
        self.counts.deletes += -(-len(done) // 10)  # DeleteMessageBatch takes 10 at most
