"""Stats fold: the main table's change stream -> counters.

- profile records: the subscribers' totals by status and their changes per day
  (``shared.store.list_health``: a mark per item, set with the counts);
- the ``SENT#`` entries of single sends (``fold_count``): one ``send`` each on the source, template
  and day counters; the ``EXEC#`` items' inserts and deletes: each sequence's executions count
  (``shared.store.stream_counts``: a mark per run of entries, set with the counts).

Each record is counted exactly once. A batch that fails is retried by Lambda from its first record,
whole (the mapping does not bisect); the records counted already are skipped by their marks.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from aws_lambda_powertools.utilities.data_classes import DynamoDBStreamEvent, event_source
from aws_lambda_powertools.utilities.typing import LambdaContext

from shared.core.observability import logger, metrics
from shared.core.settings import Settings
from shared.store.list_health import ListHealthStore
from shared.store.stream_counts import StreamCountFold

settings = Settings.from_env()
store = ListHealthStore(settings.table_name)
counts = StreamCountFold(settings.table_name)


@logger.inject_lambda_context
@metrics.log_metrics
@event_source(data_class=DynamoDBStreamEvent)
def handler(event: DynamoDBStreamEvent, lambda_context: LambdaContext) -> dict[str, Any]:
    records = [record.raw_event for record in event.records]
    result = store.fold(records)
    if result.counted:
        metrics.add_metric(name="ListChangesCounted", unit="Count", value=result.counted)
    counted = counts.fold(records)
    if counted.sends:
        metrics.add_metric(name="SendsCounted", unit="Count", value=counted.sends)
    if counted.executions:
        metrics.add_metric(name="ExecutionChangesCounted", unit="Count", value=counted.executions)
    logger.info("folded", profiles=asdict(result), counts=asdict(counted))
    return {"batchItemFailures": []}
