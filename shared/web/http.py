"""HTTP concerns shared by the API handlers: auth, body decoding, and the ONE mapping
from domain errors to HTTP statuses."""

from __future__ import annotations

import base64
import binascii
import hmac
import json
from collections.abc import Callable
from email import policy
from email.message import Message
from email.parser import BytesParser
from typing import Any, TypeVar
from urllib.parse import parse_qs

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

from shared.core.errors import (
    ConcurrentModification,
    Conflict,
    FieldProblem,
    InvalidInput,
    MailstepError,
    NotFound,
    PayloadTooLarge,
    QuotaExceeded,
    Unauthorized,
)
from shared.core.json_input import loads_strict
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
    # An AWS quota (StartExecution's rate, the open executions) outlasted the retries; the
    # start was undone, so the same request (same event ``id``) succeeds when retried.
    QuotaExceeded: (503, "throttled"),
}
RETRY_AFTER_S = 1  # the Retry-After of a 503 "busy" or "throttled"
RETRY_MESSAGES = {
    "busy": "the subscriber is busy with concurrent changes: retry",
    "throttled": "a service quota is reached for the moment: retry",
}

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
            logger.warning("request gave up: retryable", error=type(exc).__name__, code=code)
            return error_response(503, code, RETRY_MESSAGES[code])
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


def request_body(event: BaseProxyEvent) -> str | None:
    """The request body as text: THE one place a request body is decoded (instead of
    Powertools' ``decoded_body``, which raises on a non-UTF-8 body and so answered 500).
    API Gateway base64-encodes the body of a binary content type; whatever the encoding,
    a body that is not UTF-8 text is a 400 naming ``body``."""
    raw = event.body
    if raw is None or not event.is_base64_encoded:
        return raw
    try:
        data = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput("body is not valid base64", [FieldProblem("body", "not valid base64")]) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput("body is not valid UTF-8", [FieldProblem("body", "not valid UTF-8")]) from None


def decode_json_body(body: str | None, max_bytes: int) -> Any:
    """A JSON body (``loads_strict``: a duplicate key or NaN/Infinity is a 400, like a
    repeated form field)."""
    if body is None or not body.strip():
        raise InvalidInput("request body is empty", [FieldProblem("body", "must be a JSON object")])
    if len(body.encode()) > max_bytes:
        raise PayloadTooLarge(f"request body exceeds {max_bytes} bytes")
    return loads_strict(body)


URLENCODED, MULTIPART = "application/x-www-form-urlencoded", "multipart/form-data"
MAX_FORM_FIELDS = 50
MAX_FORM_BYTES = 8 * 1024  # the pages' forms send a few hundred bytes


def media_type(content_type: str | None) -> str:
    """``multipart/form-data; boundary=x`` -> ``multipart/form-data``."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def form_fields(
    body: str | None,
    content_type: str | None,
    *,
    max_fields: int = MAX_FORM_FIELDS,
    max_bytes: int = MAX_FORM_BYTES,
) -> dict[str, list[str]]:
    """The fields of a form post, in either encoding an HTML form (and RFC 8058's one-click)
    uses: ``application/x-www-form-urlencoded`` (also assumed without a content type) or
    ``multipart/form-data``. Each name maps to its values in order; blank values are kept.
    Any other content type, a malformed multipart body or too many fields is a 400; a body
    over ``max_bytes`` a 413."""
    media = media_type(content_type)
    text = body or ""
    if len(text.encode()) > max_bytes:
        raise PayloadTooLarge(f"request body exceeds {max_bytes} bytes")
    if media in ("", URLENCODED):
        try:
            return parse_qs(text, keep_blank_values=True, max_num_fields=max_fields)
        except ValueError:
            raise InvalidInput(
                "the form has too many fields", [FieldProblem("body", f"at most {max_fields} fields")]
            ) from None
    if media == MULTIPART:
        return _multipart_fields(text, content_type or "", max_fields)
    message = f"must be {URLENCODED} or {MULTIPART}"
    raise InvalidInput(f"content-type {message}", [FieldProblem("content-type", message)])


def _multipart_fields(text: str, content_type: str, max_fields: int) -> dict[str, list[str]]:
    if not text.strip():
        return {}
    head = f"Content-Type: {content_type}\r\n\r\n".encode()
    message: Message = BytesParser(policy=policy.HTTP).parsebytes(head + text.encode())
    payload = message.get_payload() if message.is_multipart() else None
    parts = [part for part in payload if isinstance(part, Message)] if isinstance(payload, list) else []
    if not parts or message.defects:
        problem = "not a valid multipart/form-data body"
        raise InvalidInput(f"body is {problem}", [FieldProblem("body", problem)])
    if len(parts) > max_fields:
        raise InvalidInput(
            "the form has too many fields", [FieldProblem("body", f"at most {max_fields} fields")]
        )
    fields: dict[str, list[str]] = {}
    for part in parts:
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str) or part.is_multipart():
            problem = "a multipart/form-data part without a field name"
            raise InvalidInput(f"body has {problem}", [FieldProblem("body", problem)])
        content = part.get_payload(decode=True)
        try:
            value = content.decode("utf-8") if isinstance(content, bytes) else ""
        except UnicodeDecodeError:
            raise InvalidInput(f"{name}: not valid UTF-8", [FieldProblem(name, "not valid UTF-8")]) from None
        fields.setdefault(name, []).append(value)
    return fields
