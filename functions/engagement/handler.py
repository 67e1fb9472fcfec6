"""Engagement consumer: SES event records (SNS -> SQS) -> events table, counters, suppression.

Partial batch responses: a record that is not an SES event fails only itself (SQS retries
it, then moves it to the dead-letter queue); valid records in the same batch succeed.
Redelivered records change nothing (``shared.engagement``).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from shared.engagement import EngagementContext, process_body
from shared.observability import logger, metrics
from shared.settings import Settings

settings = Settings.from_env()
context = EngagementContext.from_settings(settings)
processor = BatchProcessor(event_type=EventType.SQS)


def record_handler(record: SQSRecord) -> dict[str, Any]:
    outcome = process_body(record.body, context)
    metrics.add_metric(name=f"SesEvent_{outcome.status}", unit="Count", value=1)
    return {"event_type": outcome.event_type, "status": outcome.status}


@logger.inject_lambda_context
@metrics.log_metrics
def handler(event: dict[str, Any], lambda_context: LambdaContext) -> PartialItemFailureResponse:
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=lambda_context
    )
