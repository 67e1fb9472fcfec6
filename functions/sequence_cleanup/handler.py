"""Sequence cleanup: EventBridge "Step Functions Execution Status Change" (FAILED,
TIMED_OUT, ABORTED) -> remove the execution's EXEC pair if it still names it.

Thin: the event's ``detail`` carries the execution ARN and its input (email, sequence).
"""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from shared.core.observability import logger
from shared.core.settings import Settings
from shared.sequences.engine import cleanup_execution
from shared.store.subscribers import SubscriberStore

settings = Settings.from_env()
store = SubscriberStore(settings.table_name, settings.events_table_name)


@logger.inject_lambda_context
def handler(event: dict[str, Any], lambda_context: LambdaContext) -> dict[str, Any]:
    detail = event.get("detail") or {}
    try:
        payload = json.loads(detail.get("input") or "{}")
    except (TypeError, ValueError):
        payload = {}
    removed = cleanup_execution(store, str(detail.get("executionArn", "")), payload)
    logger.info("sequence execution ended", status=detail.get("status"), pair_removed=removed)
    return {"pair_removed": removed}
