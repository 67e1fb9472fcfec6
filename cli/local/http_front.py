"""The local API Gateway (HTTP API, payload format 2.0) in front of the in-process Lambdas.

Every route in ``shared.core.specs.routes()`` is served; a request becomes the v2 event API
Gateway would send (``version``, ``routeKey``, ``rawPath``, lower-cased headers,
``pathParameters``, ``requestContext.http``...), the function is invoked through the same
in-process Lambda path moto uses, and the result is mapped back like API Gateway does
(a dict with ``statusCode`` is a full response; anything else is a 200 JSON body; a
function error is a 500). Unknown routes get API Gateway's 404.

With an ``ssl.SSLContext`` the same front is served over TLS (the runtime's public https
base URL): the handshake runs in the connection's own thread, and a client that fails it
(an untrusted certificate, plain http on the TLS port) is simply disconnected.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from cli.local.apigw import http_api_event
from shared.core.specs import FunctionSpec, RouteSpec

Invoke = Callable[[FunctionSpec, dict[str, Any]], tuple[Any, bool]]
# Local-only control endpoints under CONTROL_PREFIX: (method, path, body) -> (status, JSON body)
Control = Callable[[str, str, bytes], tuple[int, Any]]
CONTROL_PREFIX = "/_local/"


@dataclass(frozen=True)
class CompiledRoute:
    route: RouteSpec
    function: FunctionSpec
    pattern: re.Pattern[str]

    @property
    def route_key(self) -> str:
        return f"{self.route.method} {self.route.path}"


def compile_route(route: RouteSpec, function: FunctionSpec) -> CompiledRoute:
    regex = ""
    for part in re.split(r"(\{[^}]+\})", route.path):
        if part.startswith("{") and part.endswith("}"):
            name = part[1:-1]
            if name.endswith("+"):
                regex += f"(?P<{name[:-1]}>.+)"
            else:
                regex += f"(?P<{name}>[^/]+)"
        else:
            regex += re.escape(part)
    return CompiledRoute(route, function, re.compile(f"^{regex}$"))


def match(routes: list[CompiledRoute], method: str, path: str) -> tuple[CompiledRoute, dict[str, str]] | None:
    for compiled in routes:
        found = compiled.pattern.match(path)
        if found and compiled.route.method in (method, "ANY"):
            return compiled, {k.rstrip("+"): v for k, v in found.groupdict().items()}
    return None


def build_event(
    compiled: CompiledRoute,
    params: dict[str, str],
    *,
    method: str,
    raw_path: str,
    raw_query: str,
    headers: dict[str, str],
    body: bytes,
    source_ip: str,
    api_id: str,
    stage: str = "$default",
) -> dict[str, Any]:
    return http_api_event(
        method,
        raw_path,
        route_key=compiled.route_key,
        body=body,
        headers=headers,
        query=raw_query,
        path_parameters=params,
        source_ip=source_ip,
        api_id=api_id,
        stage=stage,
    )


def to_http(result: Any, errored: bool) -> tuple[int, dict[str, str], list[str], bytes]:
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


@dataclass
class FrontStats:
    requests: int = 0


class _TlsHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server that wraps each accepted connection in TLS in its thread."""

    handshake_timeout_s = 10.0

    def __init__(self, address: tuple[str, int], handler: Any, context: ssl.SSLContext) -> None:
        self.context = context
        super().__init__(address, handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        try:
            request.settimeout(self.handshake_timeout_s)
            connection = self.context.wrap_socket(request, server_side=True)
            connection.settimeout(None)
        except (ssl.SSLError, OSError):
            return  # failed handshake: nothing to answer
        try:
            super().finish_request(connection, client_address)
        finally:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_WR)
            connection.close()


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
    ) -> None:
        self.routes = [compile_route(r, f) for r, f in routes]
        self.invoke = invoke
        self.control = control
        self.stats = stats if stats is not None else FrontStats()
        self.scheme = "http" if ssl_context is None else "https"
        self.api_id = "local"
        front = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                if front.control is not None and parts.path.startswith(CONTROL_PREFIX):
                    status, answer = front.control(self.command, parts.path, body)
                    self._reply(status, {"content-type": "application/json"}, [], json.dumps(answer).encode())
                    return
                front.stats.requests += 1
                found = match(front.routes, self.command, parts.path)
                if found is None:
                    self._reply(404, {"content-type": "application/json"}, [], b'{"message":"Not Found"}')
                    return
                compiled, params = found
                headers: dict[str, str] = {}
                for name, value in self.headers.items():
                    key = name.lower()
                    headers[key] = f"{headers[key]},{value}" if key in headers else value
                event = build_event(
                    compiled,
                    params,
                    method=self.command,
                    raw_path=parts.path,
                    raw_query=parts.query,
                    headers=headers,
                    body=body,
                    source_ip=self.client_address[0],
                    api_id=front.api_id,
                )
                result, errored = front.invoke(compiled.function, event)
                self._reply(*to_http(result, errored))

            def _reply(self, status: int, headers: dict[str, str], cookies: list[str], body: bytes) -> None:
                self.send_response(status)
                for name, value in headers.items():
                    if name not in ("content-length", "connection"):
                        self.send_header(name, value)
                for cookie in cookies:
                    self.send_header("set-cookie", cookie)
                self.send_header("content-length", str(len(body)))
                self.send_header("apigw-requestid", uuid.uuid4().hex[:16])
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _serve  # noqa: N815

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return  # requests are logged by the handlers (structured), not here

        if ssl_context is None:
            self.server = ThreadingHTTPServer((host, port), Handler)
        else:
            self.server = _TlsHTTPServer((host, port), Handler, ssl_context)
        self.server.daemon_threads = True
        name = f"{self.scheme}-front"
        self.thread = threading.Thread(target=self.server.serve_forever, name=name, daemon=True)

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


def wait_until_serving(url: str, timeout_s: float = 10.0) -> None:
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            urllib.request.urlopen(url, timeout=1)  # noqa: S310 (local URL)
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
