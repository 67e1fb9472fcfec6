"""Public sign-up: POST /v1/signup (JSON or an HTML form, double opt-in), GET /c/{token} (the
confirm page, changes nothing), POST /c/{token} (confirms). Thin: route -> shared logic -> answer."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from shared.consent.context import ConsentContext
from shared.consent.record import Requester
from shared.consent.signup import SIGNUP_METRICS
from shared.core.observability import logger, metrics
from shared.core.settings import Settings
from shared.web.http import register_page_handlers, request_body
from shared.web.signup import SignupPages

settings = Settings.from_env()
pages = SignupPages.create(ConsentContext.from_settings(settings), settings.default_from)
app = APIGatewayHttpResolver()


def _requester() -> Requester:
    event = app.current_event
    return Requester(event.request_context.http.source_ip, event.headers.get("user-agent"))


@app.post("/v1/signup")
def post_signup() -> Response[str]:
    content_type = app.current_event.headers.get("content-type")
    try:
        response, outcome = pages.signup(
            request_body(app.current_event), content_type, requester=_requester()
        )
    except Exception as exc:  # noqa: BLE001 - the answer's shape follows the request's (JSON or form)
        return pages.signup_error(exc, content_type)
    metrics.add_metric(name=SIGNUP_METRICS.get(outcome.action, "SignupsAccepted"), unit="Count", value=1)
    if outcome.action in ("pending", "held"):
        metrics.add_metric(name="ConfirmationMailsQueued", unit="Count", value=1)
    return response


@app.get("/c/<token>")
def confirm_page(token: str) -> Response[str]:
    return pages.confirm_page(token)


@app.post("/c/<token>")
def confirm(token: str) -> Response[str]:
    response = pages.confirm(token, requester=_requester())
    metrics.add_metric(name="SignupsConfirmed", unit="Count", value=1)
    return response


register_page_handlers(app, error=pages.link_error, not_found=pages.not_found)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
@metrics.log_metrics
def handler(event: dict[str, Any], lambda_context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, lambda_context)
