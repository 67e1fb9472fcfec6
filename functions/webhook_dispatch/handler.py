"""Webhook dispatch: DynamoDB stream records (main and events tables) -> webhook deliveries.

Powertools batch processing for DynamoDB streams: a record whose dispatch failed (an AWS
error) is reported by its sequence number; Lambda retries the stream from it, and the records
before it, done already, create nothing twice (``shared.webhooks.dispatch``).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from shared.core.observability import logger, metrics
from shared.core.settings import Settings
from shared.webhooks.dispatch import DispatchContext, dispatch_record

settings = Settings.from_env()
context = DispatchContext.from_settings(settings)
processor = BatchProcessor(event_type=EventType.DynamoDBStreams)


def record_handler(record: DynamoDBRecord) -> int:
    created = dispatch_record(record.raw_event, context)
    if created:
        metrics.add_metric(name="WebhookDeliveriesCreated", unit="Count", value=created)
    return created


@logger.inject_lambda_context
@metrics.log_metrics
def handler(event: dict[str, Any], lambda_context: LambdaContext) -> Any:
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=lambda_context
    )
