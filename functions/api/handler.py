"""HTTP API: POST /v1/events (DESIGN.md section 4). Thin: parse -> ingest -> answer."""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from shared.core.models import parse_event_body
from shared.core.observability import logger, metrics
from shared.core.secrets import get_secret
from shared.core.settings import Settings
from shared.store.subscribers import SubscriberStore
from shared.web.http import decode_json_body, register_error_handlers, request_body, require_bearer
from shared.web.ingest import ingest, ingest_context_from_settings

settings = Settings.from_env()
store = SubscriberStore(settings.table_name, settings.events_table_name)
context = ingest_context_from_settings(settings, store)
app = APIGatewayHttpResolver()
register_error_handlers(app)


@app.post("/v1/events")
def post_events() -> Response[str]:
    require_bearer(app.current_event.headers.get("authorization"), get_secret(settings.api_key_secret))
    batch = parse_event_body(decode_json_body(request_body(app.current_event), settings.max_body_bytes))
    results = ingest(batch, context, assume_new=True)  # one event: written as new, no read first
    metrics.add_metric(name="EventsAccepted", unit="Count", value=len(results))
    # 409 when every event was refused (an id reused for a different event); else 200.
    status = 409 if all("error" in r for r in results) else 200
    return Response(status, content_types.APPLICATION_JSON, json.dumps({"results": results}))


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
@metrics.log_metrics
def handler(event: dict[str, Any], lambda_context: LambdaContext) -> dict[str, Any]:
    context.register_lambda_context(lambda_context)
    return app.resolve(event, lambda_context)
