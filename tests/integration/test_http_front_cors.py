"""CORS on the local HTTP front as the template configures it, on the real server with a stub in
place of the Lambdas: API Gateway answers a preflight itself (no OPTIONS route, no function
invoked) and puts the configured headers on a function's answer to an allowed origin; without
a configuration an OPTIONS, and a HEAD on a GET route, are 404s like any method without a route."""

from __future__ import annotations

import http.client
from typing import Any

from local_aws.http_front import Cors, HttpFront
from tests.integration.test_http_front import DEADLINE_S, ROUTES, Stub

ALLOWED, OTHER = "https://www.acme.test", "https://evil.test"
# The HTTP API of a template synthesized with mailstep:signupAllowedOrigins set (the shape
# tests/infra/test_signup_infra.py asserts).
TEMPLATE = {
    "Resources": {
        "ApiHttpApi": {
            "Type": "AWS::ApiGatewayV2::Api",
            "Properties": {
                "Name": "mailstep",
                "ProtocolType": "HTTP",
                "CorsConfiguration": {
                    "AllowHeaders": ["content-type"],
                    "AllowMethods": ["POST"],
                    "AllowOrigins": [ALLOWED, "https://acme.test:8443"],
                    "MaxAge": 3600,
                },
            },
        }
    }
}


class CorsStub(Stub):
    """Answers like a function that sets a CORS header of its own (API Gateway ignores it)."""

    def __call__(self, function: Any, event: dict[str, Any]) -> tuple[Any, bool]:
        answer, errored = super().__call__(function, event)
        answer["headers"]["access-control-allow-origin"] = "https://from-the-function.test"
        return answer, errored


def call(front: HttpFront, method: str, path: str, headers: dict[str, str]) -> tuple[int, dict[str, str]]:
    connection = http.client.HTTPConnection("127.0.0.1", front.port, timeout=DEADLINE_S)
    try:
        connection.request(method, path, body=b"{}" if method == "POST" else None, headers=headers)
        response = connection.getresponse()
        response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}
    finally:
        connection.close()


def preflight(origin: str) -> dict[str, str]:
    return {
        "Origin": origin,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type",
    }


def test_the_template_cors_configuration_is_read() -> None:
    assert Cors.from_template(TEMPLATE) == Cors(
        allow_origins=(ALLOWED, "https://acme.test:8443"),
        allow_methods=("POST",),
        allow_headers=("content-type",),
        max_age=3600,
    )
    assert (
        Cors.from_template({"Resources": {"Api": {"Type": "AWS::ApiGatewayV2::Api", "Properties": {}}}})
        is None
    )


def test_with_cors_configured_the_front_answers_preflights_itself_and_adds_headers() -> None:
    stub = CorsStub()
    front = HttpFront(ROUTES, stub, cors=Cors.from_template(TEMPLATE))
    front.start()
    try:
        status, headers = call(front, "OPTIONS", "/v1/events", preflight(ALLOWED))
        assert status == 204
        assert {k: v for k, v in headers.items() if k.startswith("access-control-")} == {
            "access-control-allow-origin": ALLOWED,
            "access-control-allow-methods": "POST",
            "access-control-allow-headers": "content-type",
            "access-control-max-age": "3600",
        }
        # Another origin: answered, without a header that would let the browser go on.
        status, headers = call(front, "OPTIONS", "/v1/events", preflight(OTHER))
        assert status == 204 and not [k for k in headers if k.startswith("access-control-")]
        # A path with no route at all is answered the same (API Gateway answers preflights itself).
        assert call(front, "OPTIONS", "/no/route", preflight(ALLOWED))[0] == 204
        assert stub.events == []  # no function was invoked for a preflight

        # The actual request: the configured origin header, never the function's own.
        status, headers = call(
            front, "POST", "/v1/events", {"Origin": ALLOWED, "Content-Type": "application/json"}
        )
        assert status == 200 and headers["access-control-allow-origin"] == ALLOWED
        status, headers = call(
            front, "POST", "/v1/events", {"Origin": OTHER, "Content-Type": "application/json"}
        )
        assert status == 200 and "access-control-allow-origin" not in headers
        # An OPTIONS that is no preflight (no Access-Control-Request-Method) has no route.
        assert call(front, "OPTIONS", "/v1/events", {"Origin": ALLOWED})[0] == 404
    finally:
        front.stop()


def test_without_cors_options_and_head_are_404_like_any_method_without_a_route() -> None:
    stub = Stub()
    front = HttpFront(ROUTES, stub)
    front.start()
    try:
        assert call(front, "OPTIONS", "/v1/events", preflight(ALLOWED))[0] == 404
        assert call(front, "HEAD", "/u/tok", {})[0] == 404
        status, headers = call(
            front, "POST", "/v1/events", {"Origin": ALLOWED, "Content-Type": "application/json"}
        )
        assert status == 200 and "access-control-allow-origin" not in headers
        assert [e["routeKey"] for e in stub.events] == ["POST /v1/events"]
    finally:
        front.stop()
