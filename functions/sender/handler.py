"""Send queue consumer: one ``send.job`` envelope per record -> the send pipeline.

Partial batch responses: a malformed record, an unknown contract/version or a retryable
outcome (throttled, in flight elsewhere, an account problem) fails only that record, which
SQS redelivers after the visibility timeout (then the dead-letter queue). A held one (SES
said "not yet": sending paused, the identity not verified yet, the daily quota spent) is put
back on the queue with a delay instead, for up to a week (``shared.sending.jobs.hold``), so a
confirmation or a transactional mail waits for the identity's verification or the quota
instead of ending in the dead-letter queue. Sent, skipped and permanently failed jobs are
acknowledged.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from shared.core import clock
from shared.core.observability import logger, metrics
from shared.core.settings import Settings
from shared.sending.jobs import from_message, hold
from shared.sending.pipeline import RetryableSend, SendContext, outcome_dict, send

settings = Settings.from_env()
context = SendContext.from_settings(settings)
processor = BatchProcessor(event_type=EventType.SQS)


def record_handler(record: SQSRecord) -> dict[str, Any]:
    job = from_message(record.body)
    outcome = send(job, context)
    metrics.add_metric(name=f"Send{outcome.status.capitalize()}", unit="Count", value=1)
    if outcome.held and hold(job, settings.send_queue_url, now=clock.utc_now()):
        return {**outcome_dict(outcome), "held": True}
    if outcome.retryable:
        raise RetryableSend(outcome)
    return outcome_dict(outcome)


@logger.inject_lambda_context
@metrics.log_metrics
def handler(event: dict[str, Any], lambda_context: LambdaContext) -> Any:
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=lambda_context
    )
