"""Reputation alarm consumer: CloudWatch alarm (SNS -> SQS) -> pause marketing sending.

Powertools batch processing: a record that is not an alarm notification fails only itself
(and ends in the dead-letter queue); a repeated notification changes nothing
(``shared.reputation.guard``).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from shared.core.observability import logger, metrics
from shared.core.settings import Settings
from shared.reputation.guard import GuardContext, guard, parse_alarm

settings = Settings.from_env()
context = GuardContext.from_settings(settings)
processor = BatchProcessor(event_type=EventType.SQS)


def record_handler(record: SQSRecord) -> dict[str, Any]:
    result = guard(parse_alarm(record.body), context)
    if result.newly_paused:
        metrics.add_metric(name="ReputationPaused", unit="Count", value=1)  # once: a repeated alarm adds none
    return {"status": result.status, "broadcasts": result.broadcasts}


@logger.inject_lambda_context
@metrics.log_metrics
def handler(event: dict[str, Any], lambda_context: LambdaContext) -> PartialItemFailureResponse:
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=lambda_context
    )
