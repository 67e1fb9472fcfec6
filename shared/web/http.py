"""HTTP concerns shared by the API handlers: auth, body decoding, and the ONE mapping
from domain errors to HTTP statuses."""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable
from typing import Any, TypeVar

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types

from shared.core.errors import (
    ConcurrentModification,
    Conflict,
    FieldProblem,
    InvalidInput,
    MailstepError,
    NotFound,
    PayloadTooLarge,
    Unauthorized,
)
from shared.core.observability import logger

STATUS: dict[type[MailstepError], tuple[int, str]] = {
    InvalidInput: (400, "invalid_request"),
    Unauthorized: (401, "unauthorized"),
    NotFound: (404, "not_found"),
    Conflict: (409, "conflict"),
    PayloadTooLarge: (413, "payload_too_large"),
    # Contention on one subscriber outlasted the store's retries: not the client's fault and
    # not a server fault either; the same request (same event ``id``) succeeds when retried.
    ConcurrentModification: (503, "busy"),
}
RETRY_AFTER_S = 1  # the Retry-After of a 503 "busy"

E = TypeVar("E", bound=Exception)


def status_for(exc: MailstepError) -> tuple[int, str]:
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500, "internal_error"


def error_response(
    status: int, code: str, message: str, problems: list[FieldProblem] | None = None
) -> Response[str]:
    body: dict[str, Any] = {"error": {"code": code, "message": message}}
    if problems:
        body["error"]["field"] = problems[0].field
        body["error"]["problems"] = [{"field": p.field, "message": p.message} for p in problems]
    headers = {"WWW-Authenticate": 'Bearer realm="mailstep"'} if status == 401 else None
    if status == 503:
        headers = {"Retry-After": str(RETRY_AFTER_S)}
    return Response(
        status_code=status,
        content_type=content_types.APPLICATION_JSON,
        body=json.dumps(body),
        headers=headers,
    )


def on_error(app: APIGatewayHttpResolver, exc_class: type[E], handler: Callable[[E], Response[str]]) -> None:
    """``@app.exception_handler(exc_class)`` with types: Powertools leaves the return of
    ``exception_handler`` unannotated, which would make every decorated handler untyped."""
    app.exception_handler(exc_class)(handler)


def register_page_handlers(
    app: APIGatewayHttpResolver,
    error: Callable[[Exception], Response[str]],
    not_found: Callable[[], Response[str]],
) -> None:
    """The answers of a function of link pages: ``error`` to whatever a route raises,
    ``not_found`` to a path no route takes."""
    on_error(app, Exception, error)
    app.not_found(lambda exc: not_found())


def register_error_handlers(app: APIGatewayHttpResolver) -> None:
    def _domain(exc: MailstepError) -> Response[str]:
        status, code = status_for(exc)
        if status == 503:
            logger.warning("request gave up under contention", error=type(exc).__name__)
            return error_response(503, code, "the subscriber is busy with concurrent changes: retry")
        if status >= 500:
            logger.exception("unexpected domain error")
            return error_response(500, code, "internal error")
        problems = exc.problems if isinstance(exc, InvalidInput) else None
        return error_response(status, code, str(exc), problems)

    def _unexpected(exc: Exception) -> Response[str]:
        logger.exception("unhandled error")
        return error_response(500, "internal_error", "internal error")

    on_error(app, MailstepError, _domain)
    on_error(app, Exception, _unexpected)

    @app.not_found
    def _not_found(exc: Exception) -> Response[str]:
        return error_response(404, "not_found", "no such route")


def require_bearer(header: str | None, expected: str) -> None:
    """Constant-time check of ``Authorization: Bearer <key>``."""
    if not header:
        raise Unauthorized("missing Authorization header (expected 'Bearer <api key>')")
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("Authorization must be 'Bearer <api key>'")
    if not expected or not hmac.compare_digest(token.strip().encode(), expected.encode()):
        raise Unauthorized("invalid API key")


def _reject_constant(name: str) -> Any:
    raise InvalidInput(
        f"body contains {name}, which is not valid JSON", [FieldProblem("body", "invalid JSON")]
    )


def decode_json_body(body: str | None, max_bytes: int) -> Any:
    if body is None or not body.strip():
        raise InvalidInput("request body is empty", [FieldProblem("body", "must be a JSON object")])
    if len(body.encode()) > max_bytes:
        raise PayloadTooLarge(f"request body exceeds {max_bytes} bytes")
    try:
        return json.loads(body, parse_constant=_reject_constant)
    except RecursionError:
        raise InvalidInput(
            "body nests objects or arrays too deeply", [FieldProblem("body", "nested too deeply")]
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput(
            f"body is not valid JSON (line {exc.lineno}, column {exc.colno})"
            if isinstance(exc, json.JSONDecodeError)
            else "body is not valid UTF-8",
            [FieldProblem("body", "invalid JSON")],
        ) from None
