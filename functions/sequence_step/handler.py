"""Sequence step function: the Lambda every generated state machine calls.

Thin: parse the ``sequence.step`` envelope -> run the step -> return. Errors keep their
class name as the Step Functions error name (``SendRetryable`` is retried with backoff,
``SequenceHalted`` ends the execution quietly, anything else goes to the fail Task).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from shared.core.observability import logger, metrics
from shared.core.settings import Settings
from shared.sending.pipeline import SendContext, send
from shared.sequences.schedules import Resumer
from shared.sequences.steps import StepDeps, parse_request, run_step
from shared.store.subscribers import SubscriberStore

settings = Settings.from_env()
store = SubscriberStore(settings.table_name, settings.events_table_name)
send_context = SendContext.from_settings(settings, store)
deps = StepDeps(
    store=store,
    send=lambda job: send(job, send_context),
    data_ttl_days=settings.data_ttl_days,
    resumer=Resumer(settings.sequence_schedule_group, settings.sequence_scheduler_role_arn),
)


@logger.inject_lambda_context
@metrics.log_metrics
def handler(event: dict[str, Any], lambda_context: LambdaContext) -> dict[str, Any]:
    request = parse_request(event)
    result = run_step(request, deps)
    metrics.add_metric(name=f"SequenceStep_{request.action}", unit="Count", value=1)
    return result
