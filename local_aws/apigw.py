"""Build API Gateway HTTP API (payload v2.0) events and read their responses.

The local runtime's HTTP front and the tests use this one builder, so the handlers see
exactly the event shape API Gateway sends in production.
"""

from __future__ import annotations

import base64
import uuid
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl

_TEXT_TYPES = ("text/", "application/json", "application/x-www-form-urlencoded", "application/xml")


def http_api_event(
    method: str,
    path: str,
    *,
    route_key: str | None = None,
    body: str | bytes | None = None,
    headers: dict[str, str] | None = None,
    query: str = "",
    path_parameters: dict[str, str] | None = None,
    source_ip: str = "127.0.0.1",
    api_id: str = "local",
    stage: str = "$default",
) -> dict[str, Any]:
    """The event API Gateway sends for one request. Bytes bodies of a non-text content type
    are base64-encoded (``isBase64Encoded``), as API Gateway does."""
    now = datetime.now(UTC)
    lowered = {k.lower(): v for k, v in (headers or {}).items()}
    cookies = [c.strip() for c in lowered.pop("cookie", "").split(";") if c.strip()]
    route = route_key or f"{method} {path}"
    content_type = lowered.get("content-type", "")
    is_text = not body or isinstance(body, str) or any(content_type.startswith(t) for t in _TEXT_TYPES)
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": route,
        "rawPath": path,
        "rawQueryString": query,
        "headers": lowered,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": api_id,
            "domainName": lowered.get("host", "localhost"),
            "domainPrefix": api_id,
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": source_ip,
                "userAgent": lowered.get("user-agent", ""),
            },
            "requestId": uuid.uuid4().hex[:16],
            "routeKey": route,
            "stage": stage,
            "time": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "timeEpoch": int(now.timestamp() * 1000),
        },
        "isBase64Encoded": not is_text,
    }
    if body:
        if isinstance(body, str):
            event["body"] = body
        else:
            event["body"] = (
                body.decode("utf-8", errors="replace") if is_text else base64.b64encode(body).decode()
            )
    elif body == "":
        event["body"] = ""
    values: dict[str, str] = {}
    for name, value in parse_qsl(query, keep_blank_values=True):
        values[name] = f"{values[name]},{value}" if name in values else value
    if values:
        event["queryStringParameters"] = values
    if cookies:
        event["cookies"] = cookies
    if path_parameters:
        event["pathParameters"] = path_parameters
    return event


class LambdaContext:
    """The attributes of a Lambda context object that Powertools and mailstep read."""

    def __init__(self, function_name: str, memory_mb: int = 512, timeout_s: int = 30) -> None:
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = memory_mb
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:123456789012:function:{function_name}"
        self.aws_request_id = uuid.uuid4().hex
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "local"
        self._deadline = datetime.now(UTC).timestamp() + timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - datetime.now(UTC).timestamp()) * 1000))
