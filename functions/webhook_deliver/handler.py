"""Webhook delivery: one ``webhook.delivery`` envelope per record -> one signed POST (or one
hop of a long wait, or a parked delivery while the endpoint's circuit is open). The records of
a batch are delivered at the same time, each in its own thread: a slow receiver holds only its
own records (docs/webhooks.md, "Isolation"). Partial batch responses: a malformed record or an
AWS error fails only that record (SQS redelivers it, then the dead-letter queue); what the
receiver answers is an outcome, never a failure of the record (retries are new delayed messages).
"""

from __future__ import annotations

import asyncio
from typing import Any

from aws_lambda_powertools.utilities.batch import (
    AsyncBatchProcessor,
    EventType,
    async_process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from shared.core.observability import logger, metrics
from shared.core.settings import Settings
from shared.webhooks.delivery import DeliveryContext, parse_message, process

settings = Settings.from_env()
context = DeliveryContext.from_settings(settings)
processor = AsyncBatchProcessor(event_type=EventType.SQS)  # the records run concurrently


async def record_handler(record: SQSRecord) -> str:
    outcome = await asyncio.to_thread(process, parse_message(record.body), context)
    metrics.add_metric(name=f"Webhook_{outcome.status}", unit="Count", value=1)
    return outcome.status


@logger.inject_lambda_context
@metrics.log_metrics
def handler(event: dict[str, Any], lambda_context: LambdaContext) -> Any:
    return async_process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=lambda_context
    )
