"""List hygiene, daily: EventBridge schedule -> the sunset run (shared.engagement.sunset.run).

Thin: the scheduled event's ``time`` is the run's moment (the day it runs for); the events it
applies (``subscriber.cold``, the sunset's ``subscriber.unsubscribed``) go through the events
API's own code, with its idempotency records.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from shared.core.observability import logger
from shared.core.settings import Settings
from shared.engagement.sunset import SunsetPolicy, ingest_emitter, run, scheduled_time
from shared.store.subscribers import SubscriberStore
from shared.web.ingest import ingest_context_from_settings

settings = Settings.from_env()
store = SubscriberStore(settings.table_name, settings.events_table_name)
context = ingest_context_from_settings(settings, store)
policy = SunsetPolicy.from_settings(settings)


@logger.inject_lambda_context
def handler(event: dict[str, Any], lambda_context: LambdaContext) -> dict[str, Any]:
    context.register_lambda_context(lambda_context)
    report = run(store, policy, scheduled_time(event), ingest_emitter(context))
    return report.summary()
