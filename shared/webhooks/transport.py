"""One webhook POST, SSRF-safe: to the address the guard checked, no redirects, a timeout.

The connection goes to ``Target.address`` (resolved and checked by ``shared.webhooks.ssrf``),
with the URL's host in ``Host`` and, for https, in SNI and certificate verification; the
address actually connected is checked again. Redirects are answers like any other (a 3xx is
not a success and is not followed). At most :data:`MAX_RESPONSE_BYTES` of the answer are read; the TCP connect
takes at most :data:`CONNECT_TIMEOUT_S` and the whole exchange (connect, TLS, request, answer
and its body) at most :data:`TIMEOUT_S` of wall time, however slowly the receiver trickles.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

from shared.core import clock
from shared.webhooks.ssrf import Target, UnsafeUrl, check_peer

CONNECT_TIMEOUT_S = 3.0
TIMEOUT_S = 10.0  # the whole attempt (docs/webhooks.md, "Isolation")
MAX_RESPONSE_BYTES = 4096
USER_AGENT = "mailstep-webhooks/1"


@dataclass(frozen=True)
class Answer:
    status: int | None  # None: no HTTP answer (connection refused, timeout, TLS, refused address)
    retry_after_s: float | None = None
    error: str | None = None


def retry_after(value: str | None) -> float | None:
    """``Retry-After``: delay seconds or an HTTP date (RFC 9110) -> seconds from now."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (moment - clock.utc_now()).total_seconds())


class _Pinned:
    """Connects to the checked address instead of resolving the host again."""

    _address: str
    _allow_loopback: bool
    host: str
    port: int
    timeout: Any
    sock: Any

    def _open(self) -> socket.socket:
        sock = socket.create_connection((self._address, self.port), min(CONNECT_TIMEOUT_S, self.timeout))
        sock.settimeout(self.timeout)
        self.sock = sock  # from here the deadline's watchdog can cut it (a slow TLS handshake too)
        try:
            check_peer(str(sock.getpeername()[0]), allow_loopback_http=self._allow_loopback)
        except UnsafeUrl:
            sock.close()
            raise
        return sock


class _HTTP(_Pinned, http.client.HTTPConnection):
    def __init__(self, target: Target, timeout: float, allow_loopback: bool) -> None:
        http.client.HTTPConnection.__init__(self, target.host, target.port, timeout=timeout)
        self._address, self._allow_loopback = target.address, allow_loopback

    def connect(self) -> None:
        self.sock = self._open()


class _HTTPS(_Pinned, http.client.HTTPSConnection):
    def __init__(self, target: Target, timeout: float, allow_loopback: bool, context: ssl.SSLContext) -> None:
        http.client.HTTPSConnection.__init__(self, target.host, target.port, timeout=timeout, context=context)
        self._address, self._allow_loopback = target.address, allow_loopback
        self._tls = context

    def connect(self) -> None:
        self.sock = self._tls.wrap_socket(self._open(), server_hostname=self.host)


def post(
    target: Target,
    headers: dict[str, str],
    body: str,
    *,
    timeout_s: float = TIMEOUT_S,
    allow_loopback_http: bool = False,
    tls_context: ssl.SSLContext | None = None,
) -> Answer:
    """POST ``body`` to ``target``; never raises for what the receiver or the network does.
    ``timeout_s`` bounds the whole exchange (connect, TLS, request, answer), not each read: a
    receiver that trickles its answer is cut off at the deadline."""
    connection: http.client.HTTPConnection
    if target.scheme == "https":
        context = tls_context or ssl.create_default_context()
        connection = _HTTPS(target, timeout_s, allow_loopback_http, context)
    else:
        connection = _HTTP(target, timeout_s, allow_loopback_http)
    expired = threading.Event()

    def cut_off() -> None:
        expired.set()
        sock = connection.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    watchdog = threading.Timer(timeout_s, cut_off)
    watchdog.daemon = True
    watchdog.start()
    try:
        connection.request(
            "POST",
            target.path,
            body=body.encode(),
            headers={**headers, "content-type": "application/json", "user-agent": USER_AGENT},
        )
        response = connection.getresponse()
        response.read(MAX_RESPONSE_BYTES)
        if expired.is_set():  # the body was cut off at the deadline (a short read, no error)
            return Answer(status=None, error="timeout")
        return Answer(status=response.status, retry_after_s=retry_after(response.getheader("retry-after")))
    except UnsafeUrl as exc:
        return Answer(status=None, error=str(exc))
    except TimeoutError:
        return Answer(status=None, error="timeout")
    except ssl.SSLError as exc:
        return Answer(status=None, error=f"tls: {exc.reason or 'handshake failed'}")
    except (OSError, http.client.HTTPException) as exc:
        if expired.is_set():
            return Answer(status=None, error="timeout")
        return Answer(status=None, error=f"connection: {type(exc).__name__}")
    finally:
        watchdog.cancel()
        connection.close()
