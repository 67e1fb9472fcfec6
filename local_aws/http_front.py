"""The local API Gateway (HTTP API, payload format 2.0) in front of the in-process Lambdas.

A thin adapter on Werkzeug: its threaded WSGI server serves, its URL map routes every route
in ``shared.core.specs.routes()``, and a request becomes the v2 event API Gateway would send
(``local_aws.apigw``); the function is invoked through the same Lambda path moto uses, and
the result is mapped back like API Gateway does (a dict with ``statusCode`` is a full
response; anything else is a 200 JSON body; a function error is a 500). Unknown routes, and
a known path with another method, get API Gateway's 404. ``/_local/...`` goes to the
runtime's control endpoints.

CORS as the template configures it (the HTTP API's ``CorsConfiguration``, :class:`Cors`):
API Gateway answers a preflight (``OPTIONS`` with ``Origin`` and
``Access-Control-Request-Method``) itself, without an ``OPTIONS`` route and without invoking
a function, and adds the configured headers to a function's answer to an allowed origin
(ignoring CORS headers the function set). Without a configuration an ``OPTIONS`` is a 404
like any method without a route; so is ``HEAD`` (a ``GET`` route does not take it).

With an ``ssl.SSLContext`` the same front is served over TLS (the runtime's public https
base URL): the handshake runs in the connection's own thread, so a client that stalls or
fails it (an untrusted certificate, plain http on the TLS port) only loses its connection.

Both fronts serve this machine only (``local_aws.listeners.LoopbackGuard``): a request whose
``Host`` is not loopback is refused (421) before it becomes an event, and the ``/_local/``
control endpoints take no cross-origin request (403); the API's routes answer CORS as above.
"""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import ssl
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from local_aws.apigw import http_api_event
from local_aws.listeners import LocalServer, LoopbackGuard
from shared.core.specs import FunctionSpec, RouteSpec

Invoke = Callable[[FunctionSpec, dict[str, Any]], tuple[Any, bool]]
# Local-only control endpoints under CONTROL_PREFIX: (method, path, body) -> (status, JSON body)
Control = Callable[[str, str, bytes], tuple[int, Any]]
CONTROL_PREFIX = "/_local/"

Answer = tuple[int, dict[str, str], list[str], bytes]


def rule_path(path: str) -> str:
    """API Gateway route syntax -> Werkzeug's: ``/u/{token}`` -> ``/u/<token>``, ``{p+}`` -> ``<path:p>``."""
    parts = path.replace("}", "{").split("{")
    return "".join(
        part if i % 2 == 0 else (f"<path:{part[:-1]}>" if part.endswith("+") else f"<{part}>")
        for i, part in enumerate(parts)
    )


def to_http(result: Any, errored: bool) -> Answer:
    """A Lambda result -> (status, headers, cookies, body), as API Gateway maps format 2.0."""
    if errored:
        return 500, {"content-type": "application/json"}, [], b'{"message":"Internal Server Error"}'
    if isinstance(result, dict) and "statusCode" in result:
        headers = {str(k).lower(): str(v) for k, v in (result.get("headers") or {}).items()}
        for name, values in (result.get("multiValueHeaders") or {}).items():
            headers[str(name).lower()] = ", ".join(str(v) for v in values)
        body = result.get("body") or ""
        raw = base64.b64decode(body) if result.get("isBase64Encoded") else str(body).encode()
        return int(result["statusCode"]), headers, [str(c) for c in result.get("cookies") or []], raw
    return 200, {"content-type": "application/json"}, [], json.dumps(result).encode()


NOT_FOUND: Answer = 404, {"content-type": "application/json"}, [], b'{"message":"Not Found"}'
API_RESOURCE = "AWS::ApiGatewayV2::Api"


@dataclass(frozen=True)
class Cors:
    """An HTTP API's ``CorsConfiguration`` (origins compared exactly, ``*`` allows any)."""

    allow_origins: tuple[str, ...]
    allow_methods: tuple[str, ...] = ()
    allow_headers: tuple[str, ...] = ()
    expose_headers: tuple[str, ...] = ()
    max_age: int | None = None
    allow_credentials: bool = False
    _lower: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_lower", frozenset(o.lower() for o in self.allow_origins))

    @classmethod
    def from_template(cls, template: dict[str, Any]) -> Cors | None:
        """The ``CorsConfiguration`` of the template's HTTP API; None when it has none."""
        for resource in (template.get("Resources") or {}).values():
            config = (resource.get("Properties") or {}).get("CorsConfiguration")
            if resource.get("Type") == API_RESOURCE and config:
                return cls(
                    allow_origins=tuple(config.get("AllowOrigins") or ()),
                    allow_methods=tuple(config.get("AllowMethods") or ()),
                    allow_headers=tuple(config.get("AllowHeaders") or ()),
                    expose_headers=tuple(config.get("ExposeHeaders") or ()),
                    max_age=config.get("MaxAge"),
                    allow_credentials=bool(config.get("AllowCredentials")),
                )
        return None

    def allows(self, origin: str) -> bool:
        return "*" in self.allow_origins or origin.lower() in self._lower

    def _origin(self, origin: str) -> dict[str, str]:
        allowed = "*" if "*" in self.allow_origins and not self.allow_credentials else origin
        headers = {"access-control-allow-origin": allowed}
        if self.allow_credentials:
            headers["access-control-allow-credentials"] = "true"
        return headers

    def preflight(self, origin: str) -> Answer:
        """API Gateway's own answer to a preflight: 204, the configured headers for an allowed
        origin, none for another (the browser then refuses the request)."""
        if not self.allows(origin):
            return 204, {}, [], b""
        headers = self._origin(origin)
        if self.allow_methods:
            headers["access-control-allow-methods"] = ",".join(self.allow_methods)
        if self.allow_headers:
            headers["access-control-allow-headers"] = ",".join(self.allow_headers)
        if self.max_age is not None:
            headers["access-control-max-age"] = str(self.max_age)
        return 204, headers, [], b""

    def on_answer(self, origin: str | None, answer: Answer) -> Answer:
        """A function's answer as API Gateway returns it: its CORS headers replaced by the
        configured ones (for an allowed ``origin``; none otherwise)."""
        status, headers, cookies, body = answer
        kept = {k: v for k, v in headers.items() if not k.startswith("access-control-")}
        if origin and self.allows(origin):
            kept.update(self._origin(origin))
            if self.expose_headers:
                kept["access-control-expose-headers"] = ",".join(self.expose_headers)
        return status, kept, cookies, body


class _GatewayResponse(Response):
    default_mimetype = None  # API Gateway adds no content-type the function did not set


@dataclass
class FrontStats:
    requests: int = 0


class HttpFront:
    def __init__(
        self,
        routes: list[tuple[RouteSpec, FunctionSpec]],
        invoke: Invoke,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        control: Control | None = None,
        ssl_context: ssl.SSLContext | None = None,
        stats: FrontStats | None = None,
        cors: Cors | None = None,
        listener: socket.socket | None = None,  # bound already (``local_aws.listeners.listen``)
    ) -> None:
        self.routes = routes
        self.cors = cors
        self.url_map = Map(
            [
                Rule(rule_path(route.path), endpoint=index, methods=_methods(route.method))
                for index, (route, _) in enumerate(routes)
            ],
            merge_slashes=False,
        )
        self.invoke = invoke
        self.control = control
        self.stats = stats if stats is not None else FrontStats()
        self.scheme = "http" if ssl_context is None else "https"
        self.api_id = "local"
        guarded = LoopbackGuard(self.wsgi_app, same_origin=CONTROL_PREFIX, cors=True)
        self.server = LocalServer(host, port, guarded, ssl_context, listener=listener)
        name = f"{self.scheme}-front"
        self.thread = threading.Thread(target=self.server.serve_forever, name=name, daemon=True)

    def wsgi_app(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        request = Request(environ)
        status, headers, cookies, body = self.answer(request)
        response = _GatewayResponse(body, _status_line(status))
        for name, value in headers.items():
            if name not in ("content-length", "connection"):
                response.headers[name] = value
        for cookie in cookies:
            response.headers.add("set-cookie", cookie)
        response.headers["apigw-requestid"] = uuid.uuid4().hex[:16]
        return response(environ, start_response)

    def answer(self, request: Request) -> Answer:
        # The target as sent (percent-escapes kept), like API Gateway's rawPath and rawQueryString.
        target = urlsplit(request.environ["RAW_URI"].encode("latin-1").decode())
        raw_path = target.path
        body = request.get_data()
        if self.control is not None and raw_path.startswith(CONTROL_PREFIX):
            status, answer = self.control(request.method, raw_path, body)
            return status, {"content-type": "application/json"}, [], json.dumps(answer).encode()
        self.stats.requests += 1
        origin = request.headers.get("origin")
        if (
            self.cors is not None
            and request.method == "OPTIONS"
            and origin
            and request.headers.get("access-control-request-method")
        ):
            return self.cors.preflight(origin)
        try:
            index, params = self.url_map.bind_to_environ(request.environ).match(
                raw_path, method=request.method
            )
        except HTTPException:
            return NOT_FOUND
        route, function = self.routes[index]
        if route.method not in (request.method, "ANY"):
            return NOT_FOUND  # Werkzeug answers HEAD for GET rules; API Gateway does not
        headers: dict[str, str] = {k.lower(): v for k, v in request.headers.items()}
        event = http_api_event(
            request.method,
            raw_path,
            route_key=f"{route.method} {route.path}",
            body=body,
            headers=headers,
            query=target.query,
            path_parameters=dict(params),
            source_ip=request.remote_addr or "",
            api_id=self.api_id,
        )
        answer = to_http(*self.invoke(function, event))
        return answer if self.cors is None else self.cors.on_answer(origin, answer)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def _status_line(status: int) -> str | int:
    """``201 Created`` as http.server words it (Werkzeug would send ``201 CREATED``)."""
    with contextlib.suppress(ValueError):
        return f"{status} {HTTPStatus(status).phrase}"
    return status


def _methods(method: str) -> list[str] | None:
    return None if method == "ANY" else [method]
