"""Broadcast queue consumer: one ``broadcast.batch`` envelope per record -> rate-limited sends.

Partial batch responses: a malformed record, an unknown contract/version, or a batch with
recipients still retryable (throttled for long, claim in flight elsewhere, time running
out) fails only that record; SQS redelivers it after the visibility timeout (then the DLQ).
A record on its final receive (``ApproximateReceiveCount`` reached the queue's
``maxReceiveCount``) that fails marks its batch dead-lettered on the broadcast record first.
"""

from __future__ import annotations

import time
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from shared.broadcasts.model import parse_batch
from shared.broadcasts.worker import SAFETY_MARGIN_S, WorkerContext, process_batch
from shared.core.observability import logger, metrics
from shared.core.settings import Settings
from shared.core.specs import BROADCAST_QUEUE

settings = Settings.from_env()
context = WorkerContext.from_settings(settings)
processor = BatchProcessor(event_type=EventType.SQS)


def record_handler(record: SQSRecord, lambda_context: LambdaContext) -> dict[str, Any]:
    deadline = time.time() + lambda_context.get_remaining_time_in_millis() / 1000 - SAFETY_MARGIN_S
    receives = int(record.attributes.approximate_receive_count or 1)
    result = process_batch(
        parse_batch(record.body),
        context,
        deadline=deadline,
        final_receive=receives >= BROADCAST_QUEUE.max_receives,  # the redrive policy (specs)
    )
    metrics.add_metric(name="BroadcastMailsSent", unit="Count", value=result.counts.get("sent", 0))
    return {"status": result.status, "counts": result.counts}


@logger.inject_lambda_context
@metrics.log_metrics
def handler(event: dict[str, Any], lambda_context: LambdaContext) -> PartialItemFailureResponse:
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=lambda_context
    )
