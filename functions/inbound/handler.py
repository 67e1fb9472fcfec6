"""Replies: SES inbound notifications (SNS -> SQS) -> ``reply`` events (``shared.engagement.replies``).

Partial batch responses: a notification that is not SES inbound JSON fails only itself
(retried, then the dead-letter queue). A redelivered notification changes nothing: the
reply event is idempotent on the inbound message id.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from shared.core.observability import logger, metrics
from shared.core.settings import Settings
from shared.engagement.replies import context_from_settings, process_notification

settings = Settings.from_env()
context = context_from_settings(settings)
processor = BatchProcessor(event_type=EventType.SQS)


def record_handler(record: SQSRecord) -> dict[str, Any]:
    outcome = process_notification(record.body, context)
    metrics.add_metric(name=f"Reply_{outcome.status}", unit="Count", value=1)
    return {"status": outcome.status, "matched": outcome.matched}


@logger.inject_lambda_context
@metrics.log_metrics
def handler(event: dict[str, Any], lambda_context: LambdaContext) -> PartialItemFailureResponse:
    context.ingest.register_lambda_context(lambda_context)
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=lambda_context
    )
