"""Engagement consumer: SES event records (SNS -> SQS) -> events table, counters, suppression.

Powertools batch processing, in two steps: each record is parsed, correlated and its side
effects run (a record that is not an SES event fails only itself), then the batch's events
are written together (``shared.engagement.consumer.EngagementBatch``: one transaction per batch).
Records whose write failed join ``batchItemFailures``; SQS delivers them again, and
redelivered records change nothing.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from shared.core.observability import logger, metrics
from shared.core.settings import Settings
from shared.engagement.consumer import EngagementBatch, EngagementContext

settings = Settings.from_env()
context = EngagementContext.from_settings(settings)
processor = BatchProcessor(event_type=EventType.SQS)


@logger.inject_lambda_context
@metrics.log_metrics
def handler(event: dict[str, Any], lambda_context: LambdaContext) -> PartialItemFailureResponse:
    batch = EngagementBatch(context)
    batch.preload(record["body"] for record in event["Records"])

    def record_handler(record: SQSRecord) -> str:
        return batch.add(record.message_id, record.body).status

    with processor(records=event["Records"], handler=record_handler, lambda_context=lambda_context):
        processor.process()
    written = batch.flush()
    for record in written:
        if record.error is None:
            metrics.add_metric(name=f"SesEvent_{record.outcome.status}", unit="Count", value=1)
    failures = [*processor.response()["batchItemFailures"]]
    failures += [{"itemIdentifier": r.record_id} for r in written if r.error is not None]
    return {"batchItemFailures": failures}
