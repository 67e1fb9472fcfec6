"""Build API Gateway HTTP API (payload v2.0) events and read their responses.

The local runtime's HTTP front and the tests use this one builder, so the handlers see
exactly the event shape API Gateway sends in production.
"""

from __future__ import annotations

import base64
import uuid
from datetime import UTC, datetime
from typing import Any


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
) -> dict[str, Any]:
    now = datetime.now(UTC)
    lowered = {k.lower(): v for k, v in (headers or {}).items()}
    is_b64 = isinstance(body, bytes)
    encoded = base64.b64encode(body).decode() if isinstance(body, bytes) else body
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": route_key or f"{method} {path}",
        "rawPath": path,
        "rawQueryString": query,
        "headers": lowered,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "local",
            "domainName": lowered.get("host", "localhost"),
            "domainPrefix": "local",
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": source_ip,
                "userAgent": lowered.get("user-agent", ""),
            },
            "requestId": uuid.uuid4().hex,
            "routeKey": route_key or f"{method} {path}",
            "stage": "$default",
            "time": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "timeEpoch": int(now.timestamp() * 1000),
        },
        "isBase64Encoded": is_b64,
    }
    if encoded is not None:
        event["body"] = encoded
    if path_parameters:
        event["pathParameters"] = path_parameters
    if query:
        event["queryStringParameters"] = dict(p.split("=", 1) if "=" in p else (p, "") for p in query.split("&"))
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
