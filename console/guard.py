"""The console's protection, one ASGI middleware in front of every route.

- **Host**: a request whose ``Host`` is not the console's own address (``127.0.0.1:PORT`` or
  ``localhost:PORT``) is refused (400) before anything else: a web page on another name that
  resolves to 127.0.0.1 (DNS rebinding) reaches nothing.
- **Login**: ``GET /?token=<token>`` (the URL the command prints, a fresh random token per
  start) sets the session cookie (HttpOnly, SameSite=Strict, Path=/) and redirects to the page
  without the token. Without that cookie every route but ``/static/`` answers 401 and no data.
- **CSRF**: every request that is not GET or HEAD carries the per-start CSRF token, as the
  form field ``csrf`` (urlencoded forms) or the header ``X-CSRF-Token`` (the console's scripts),
  or is refused (403) before any route runs; its ``Origin``, when sent, must be the console's.
- **Headers**: a strict Content-Security-Policy (nothing from another origin, no inline script),
  ``no-store``, ``nosniff``, no referrer to other origins, no framing (the template preview, framed by the
  console itself, gets a sandboxed policy of its own).
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

COOKIE = "mailstep_console"
CSRF_FIELD = "csrf"
CSRF_HEADER = b"x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD"})
MAX_BODY = 1_000_000
PUBLIC_PREFIX = "/static/"
FAVICON = "/favicon.ico"  # asked for by browsers on any page; answered empty
PREVIEW_PREFIXES = ("/templates/render/", "/outbox/render/")  # mails, framed by the console
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-src 'self'; frame-ancestors 'none'; base-uri 'none'"
)
# A mail as it is rendered: its inline styles, its data: images; no script, no fetch, no form.
PREVIEW_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'self'; sandbox"


@dataclass(frozen=True)
class Secrets:
    """The secrets of one console start."""

    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))  # in the printed URL
    session: str = field(default_factory=lambda: secrets.token_urlsafe(32))  # the cookie's value
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(24))


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def _headers(scope: Scope) -> dict[bytes, bytes]:
    return {k.lower(): v for k, v in scope.get("headers", [])}


def _cookie(headers: dict[bytes, bytes], name: str) -> str | None:
    for part in headers.get(b"cookie", b"").decode("latin-1").split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None


async def _plain(send: Send, status: int, text: str, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    body = text.encode()
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        *_security_headers(""),
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _security_headers(path: str) -> list[tuple[bytes, bytes]]:
    preview = path.startswith(PREVIEW_PREFIXES)
    return [
        (b"content-security-policy", (PREVIEW_CSP if preview else CSP).encode()),
        (b"x-frame-options", b"SAMEORIGIN" if preview else b"DENY"),
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"same-origin"),  # no-referrer would make forms send "Origin: null"
        (b"cache-control", b"no-store"),
        (b"cross-origin-opener-policy", b"same-origin"),
        (b"cross-origin-resource-policy", b"same-origin"),
    ]


class Guard:
    """The ASGI middleware described in the module docstring."""

    def __init__(self, app: ASGIApp, secrets_: Secrets, port: int) -> None:
        self.app = app
        self.secrets = secrets_
        self.port = port
        self.hosts = {f"127.0.0.1:{port}".encode(), f"localhost:{port}".encode()}
        self.origins = {b"http://" + h for h in self.hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        if headers.get(b"host") not in self.hosts:
            await _plain(send, 400, "this console answers only at its own address (127.0.0.1)")
            return
        path = str(scope.get("path", ""))
        method = str(scope.get("method", "GET")).upper()
        if (path.startswith(PUBLIC_PREFIX) or path == FAVICON) and method in SAFE_METHODS:
            await self.app(scope, receive, self._with_headers(send, path))
            return
        if method == "GET" and path == "/" and self._login(scope):
            cookie = f"{COOKIE}={self.secrets.session}; HttpOnly; SameSite=Strict; Path=/"
            await _plain(send, 303, "signed in", [(b"location", b"/"), (b"set-cookie", cookie.encode())])
            return
        session = _cookie(headers, COOKIE)
        if session is None or not _same(session, self.secrets.session):
            await _plain(
                send, 401, "not signed in: open the URL `mailstep console` printed (it has ?token=...)"
            )
            return
        if method not in SAFE_METHODS:
            replay = await self._checked(scope, receive, headers)
            if replay is None:
                await _plain(send, 403, "refused: this request has no valid CSRF token; reload the page")
                return
            receive = replay
        await self.app(scope, receive, self._with_headers(send, path))

    def _login(self, scope: Scope) -> bool:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        token = query.get("token", [""])[0]
        return bool(token) and _same(token, self.secrets.token)

    async def _checked(self, scope: Scope, receive: Receive, headers: dict[bytes, bytes]) -> Receive | None:
        """The body's receive (read here, replayed to the route) when the request carries the
        CSRF token and no foreign Origin; None otherwise."""
        origin = headers.get(b"origin")
        if origin is not None and origin not in self.origins:
            return None
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_BODY:
                return None
            chunks.append(chunk)
            more = bool(message.get("more_body"))
        body = b"".join(chunks)
        token = headers.get(CSRF_HEADER, b"").decode("latin-1")
        if not token and headers.get(b"content-type", b"").startswith(b"application/x-www-form-urlencoded"):
            token = parse_qs(body.decode("latin-1")).get(CSRF_FIELD, [""])[0]
        if not token or not _same(token, self.secrets.csrf):
            return None
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        return replay

    def _with_headers(self, send: Send, path: str) -> Send:
        async def wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", [])}
                extra = [(k, v) for k, v in _security_headers(path) if k not in names]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        return wrapped
