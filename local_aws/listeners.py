"""The local runtime's listeners: the server each runs on and the guard in front of each.

Three listeners serve the runtime, all on 127.0.0.1: the embedded AWS endpoint (moto's
application), the HTTP API (plain http) and the same API over https (``local_aws.http_front``).
Each is a :class:`LocalServer` (Werkzeug's threaded server on a listener with a deep backlog; TLS
per connection thread) whose application is wrapped in a :class:`LoopbackGuard`:

- a request whose ``Host`` is not loopback (``ops.loopback.loopback_host``: 127.0.0.1,
  localhost or [::1], with or without the listener's port) gets ``421 Misdirected Request``
  and never reaches the application: a web page on a name that resolves to 127.0.0.1 (DNS
  rebinding) reaches nothing;
- under ``same_origin`` (every path of the AWS endpoint, ``/_local/`` on the HTTP fronts) a CORS
  preflight, and a request whose ``Origin`` is not the listener's own, get ``403 Forbidden``
  (no AWS SDK sends ``Origin``; a browser sends it with every cross-origin request);
- with ``cors=False`` (the AWS endpoint) no ``Access-Control-*`` header leaves the listener:
  moto's application answers CORS for every origin (flask-cors), the runtime answers none.

The HTTP API answers CORS as API Gateway does for the origins the template configures
(``local_aws.http_front.Cors``); nothing here changes that.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
from collections.abc import Callable, Iterable
from typing import Any

from werkzeug.serving import ThreadedWSGIServer, WSGIRequestHandler

from ops.loopback import MISDIRECTED, MISDIRECTED_TEXT, loopback_host, own_origin

WsgiApp = Callable[[dict[str, Any], Any], Iterable[bytes]]
# Connections the kernel queues before the server accepts them (Werkzeug's default is 128).
LISTEN_BACKLOG = 1024
HANDSHAKE_TIMEOUT_S = 10.0
CROSS_ORIGIN_TEXT = "forbidden: this listener answers no cross-origin request"


class QuietHandler(WSGIRequestHandler):
    def log(self, type: str, message: str, *args: Any) -> None:  # noqa: A002
        return  # requests are logged by the handlers (structured), not here


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (0: a port the kernel picks). Its port is taken from
    now on, so a runtime can name it (in a deployment's environment, say) before it serves: a
    port found free by binding and closing a socket could meanwhile become another connection's
    source port (a busy runtime opens many), and the server's bind would then fail."""
    return socket.create_server((host, port), backlog=LISTEN_BACKLOG)


class LocalServer(ThreadedWSGIServer):
    """Werkzeug's threaded server on a listener with a deep backlog; TLS per connection thread."""

    def __init__(
        self,
        host: str,
        port: int,
        app: WsgiApp,
        tls: ssl.SSLContext | None = None,
        handler: type[WSGIRequestHandler] = QuietHandler,
        listener: socket.socket | None = None,
    ) -> None:
        # Bound here (not by Werkzeug) for the backlog, and so a busy port is an OSError, not an
        # exit; or earlier, by :func:`listen` (``listener``).
        with listener or listen(host, port) as bound:
            super().__init__(host, port, app, handler, fd=bound.fileno())
        self.tls = tls
        self.ssl_context = tls  # Werkzeug reads it for wsgi.url_scheme; the listener stays plain

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.tls is None:
            super().finish_request(request, client_address)
            return
        try:
            request.settimeout(HANDSHAKE_TIMEOUT_S)
            connection = self.tls.wrap_socket(request, server_side=True)
            connection.settimeout(None)
        except (ssl.SSLError, OSError):
            return  # failed handshake: nothing to answer
        try:
            super().finish_request(connection, client_address)
        finally:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_WR)
            connection.close()


class LoopbackGuard:
    """The WSGI middleware described in the module docstring, around ``app``."""

    def __init__(self, app: WsgiApp, *, same_origin: str, cors: bool) -> None:
        self.app = app
        self.same_origin = same_origin  # the path prefix that takes no cross-origin request
        self.cors = cors

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        port = int(environ["SERVER_PORT"])
        if not loopback_host(environ.get("HTTP_HOST"), port):
            return _refuse(start_response, MISDIRECTED, "Misdirected Request", MISDIRECTED_TEXT)
        guarded = str(environ.get("PATH_INFO", "")).startswith(self.same_origin)
        if guarded and self._cross_origin(environ, port):
            return _refuse(start_response, 403, "Forbidden", CROSS_ORIGIN_TEXT)
        if self.cors:
            return self.app(environ, start_response)

        def without_cors(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            kept = [(k, v) for k, v in headers if not k.lower().startswith("access-control-")]
            return start_response(status, kept, exc_info)

        return self.app(environ, without_cors)

    @staticmethod
    def _cross_origin(environ: dict[str, Any], port: int) -> bool:
        """A CORS preflight, or a request from a page of another origin."""
        if environ.get("REQUEST_METHOD") == "OPTIONS" and "HTTP_ACCESS_CONTROL_REQUEST_METHOD" in environ:
            return True
        origin = environ.get("HTTP_ORIGIN")
        return origin is not None and not own_origin(origin, str(environ.get("wsgi.url_scheme")), port)


def _refuse(start_response: Any, status: int, reason: str, text: str) -> list[bytes]:
    """The listener's own short answer (nothing of the application behind it)."""
    body = text.encode()
    start_response(
        f"{status} {reason}",
        [
            ("Content-Type", "text/plain; charset=utf-8"),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-store"),
        ],
    )
    return [body]
