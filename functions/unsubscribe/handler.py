"""Preference centre: GET /u/{token} shows the reader's topics and "unsubscribe from
everything", POST /u/{token}/preferences saves the topics, POST /u/{token} unsubscribes
(form and RFC 8058 one-click), POST /u/{token}/resubscribe opts back in. Thin: route ->
shared logic -> page."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from shared.core.observability import logger, metrics
from shared.core.secrets import get_secret
from shared.core.settings import Settings
from shared.core.topics import require_topics
from shared.sequences.engine import engine_from_settings
from shared.store.subscribers import SubscriberStore
from shared.web.http import register_page_handlers, request_body
from shared.web.pages import UnsubscribePages

settings = Settings.from_env()
store = SubscriberStore(settings.table_name, settings.events_table_name)
pages = UnsubscribePages.create(
    store=store,
    secret=lambda: get_secret(settings.unsubscribe_secret),
    default_from=settings.default_from,
    data_ttl_days=settings.data_ttl_days,
    sequences=engine_from_settings(settings, store),
    topics=require_topics(),
)
app = APIGatewayHttpResolver()


@app.get("/u/<token>")
def confirm(token: str) -> Response[str]:
    return pages.confirm(token, saved=app.current_event.get_query_string_value("saved") == "1")


@app.post("/u/<token>/preferences")
def preferences(token: str) -> Response[str]:
    response = pages.save_preferences(token, request_body(app.current_event))
    metrics.add_metric(name="PreferencesSaved", unit="Count", value=1)
    return response


@app.post("/u/<token>")
def unsubscribe(token: str) -> Response[str]:
    event = app.current_event
    response = pages.unsubscribe(token, request_body(event), event.headers.get("content-type"))
    metrics.add_metric(name="Unsubscribes", unit="Count", value=1)
    return response


@app.post("/u/<token>/resubscribe")
def resubscribe(token: str) -> Response[str]:
    return pages.resubscribe(token)


register_page_handlers(app, error=pages.error, not_found=pages.not_found)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
@metrics.log_metrics
def handler(event: dict[str, Any], lambda_context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, lambda_context)
