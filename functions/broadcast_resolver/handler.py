"""Broadcast control queue consumer: one ``broadcast.resolve`` envelope -> its audience page
and, while the invocation's time allows, the pages after it, each resolved, checkpointed and
handed to the broadcast queue; then the next page is enqueued (delayed while the broadcast
queue is deep: back-pressure).

Partial batch responses: a malformed record or an unknown contract/version fails only
that record (then the DLQ); a failed step is retried by redelivery and is idempotent.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from shared.broadcasts.fanout import FanoutContext, invocation_deadline, resolve_step
from shared.broadcasts.model import parse_resolve
from shared.core.observability import logger, metrics
from shared.core.settings import Settings

settings = Settings.from_env()
context = FanoutContext.from_settings(settings)
processor = BatchProcessor(event_type=EventType.SQS)


def record_handler(record: SQSRecord, lambda_context: LambdaContext) -> dict[str, Any]:
    deadline = invocation_deadline(lambda_context.get_remaining_time_in_millis() / 1000)
    result = resolve_step(parse_resolve(record.body), context, deadline)
    metrics.add_metric(name="BroadcastRecipientsResolved", unit="Count", value=result.recipients)
    return {
        "status": result.status,
        "page": result.page,
        "pages": result.pages,
        "recipients": result.recipients,
    }


@logger.inject_lambda_context
@metrics.log_metrics
def handler(event: dict[str, Any], lambda_context: LambdaContext) -> PartialItemFailureResponse:
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=lambda_context
    )
