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
from shared.sequences.engine import engine_from_settings
from shared.store.subscribers import SubscriberStore
from shared.web.ingest import IngestContext, make_idempotency

settings = Settings.from_env()
store = SubscriberStore(settings.table_name, settings.events_table_name)
idempotency, persistence = make_idempotency(settings.table_name, settings.idempotency_ttl_seconds)
context = IngestContext(
    store=store,
    data_ttl_days=settings.data_ttl_days,
    idempotency=idempotency,
    persistence=persistence,
    sequences=engine_from_settings(settings, store),
)
policy = SunsetPolicy.from_settings(settings)


@logger.inject_lambda_context
def handler(event: dict[str, Any], lambda_context: LambdaContext) -> dict[str, Any]:
    idempotency.register_lambda_context(lambda_context)
    report = run(store, policy, scheduled_time(event), ingest_emitter(context))
    return report.summary()
