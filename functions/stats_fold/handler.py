"""List-health fold: the main table's change stream (profile records only) -> the subscribers'
totals by status and their changes per day (``shared.store.list_health``).

The batch is folded as a whole, in one transaction per 90 items: each record exactly once (a
mark per item, set with the counts). A batch that fails is retried by Lambda (bisected); its
records counted already are skipped by their marks.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.data_classes import DynamoDBStreamEvent, event_source
from aws_lambda_powertools.utilities.typing import LambdaContext

from shared.core.observability import logger, metrics
from shared.core.settings import Settings
from shared.store.list_health import ListHealthStore

settings = Settings.from_env()
store = ListHealthStore(settings.table_name)


@logger.inject_lambda_context
@metrics.log_metrics
@event_source(data_class=DynamoDBStreamEvent)
def handler(event: DynamoDBStreamEvent, lambda_context: LambdaContext) -> dict[str, Any]:
    result = store.fold(record.raw_event for record in event.records)
    if result.counted:
        metrics.add_metric(name="ListChangesCounted", unit="Count", value=result.counted)
    logger.info(
        "folded",
        counted=result.counted,
        skipped=result.skipped,
        unchanged=result.unchanged,
        transactions=result.transactions,
    )
    return {"batchItemFailures": []}
