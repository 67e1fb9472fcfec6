"""The console's protection, one ASGI middleware in front of every route.

- **Host**: a request whose ``Host`` is not loopback (``ops.loopback.loopback_host``, the rule
  of every local listener: ``127.0.0.1``, ``localhost`` or ``[::1]``, alone or with the console's
  port) is refused (421 Misdirected Request) before anything else: a web page on another name
  that resolves to 127.0.0.1 (DNS rebinding) reaches nothing.
- **Login**: ``GET /?token=<token>`` (the URL the command prints, or one from ``mailstep console
  token``) sets a session cookie of its own (HttpOnly, SameSite=Strict, Path=/) and redirects to
  the page without the token. Each token signs in once (:class:`Logins`): used again it is
  refused (403, a page saying so and how to get a fresh one), so the URL left in the terminal,
  a log or the browser's history signs no one in. Without a session cookie every route but
  ``/static/`` answers 401 and no data.
- **Fresh tokens**: ``POST /_console/token`` with ``Authorization: Bearer <control key>`` (the
  key in the console's control file, ``console.control``, readable by its owner only) and no
  ``Origin`` (browsers send one; ``mailstep console token`` does not) answers a fresh sign-in URL,
  which expires unused after :data:`FRESH_TOKEN_TTL_S`.
- **CSRF**: every request that is not GET or HEAD carries the per-start CSRF token, as the
  form field ``csrf`` (urlencoded forms) or the header ``X-CSRF-Token`` (the console's scripts),
  or is refused (403) before any route runs; its ``Origin``, when sent, must be the console's own
  (``ops.loopback.own_origin``).
- **Headers**: a strict Content-Security-Policy (nothing from another origin, no inline script),
  ``no-store``, ``nosniff``, no referrer to other origins, no framing (the template preview, framed by the
  console itself, gets a sandboxed policy of its own).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from ops.loopback import MISDIRECTED, MISDIRECTED_TEXT, loopback_host, own_origin

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
FRESH_LINK_PATH = "/_console/token"  # POST: a fresh sign-in URL, for the holder of the control key
FRESH_TOKEN_TTL_S = 600  # a fresh token is for now: unused after 10 minutes it signs no one in
USED, EXPIRED = "used", "expired"
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

    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))  # in the printed URL: signs in once
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    control: str = field(default_factory=lambda: secrets.token_urlsafe(32))  # asks for fresh tokens


class LoginRefused(Exception):
    """A token that signs no one in: :data:`USED`, :data:`EXPIRED`, or unknown (None)."""

    def __init__(self, reason: str | None) -> None:
        super().__init__(reason or "unknown")
        self.reason = reason


def _digest(value: str) -> bytes:
    """What is kept of a token or session (looked up by digest: no secret is compared bytewise)."""
    return hashlib.sha256(value.encode()).digest()


class Logins:
    """The console's sign-in tokens, each good for one sign-in, and the sessions they opened.

    The printed token lasts until it is used; a fresh one (:meth:`issue`) until it is used or
    ``ttl_s`` passed. A used or expired token is remembered as such, to say so."""

    def __init__(
        self, first: str, *, ttl_s: float = FRESH_TOKEN_TTL_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._lock = threading.Lock()
        self._ttl_s = ttl_s
        self._clock = clock
        self._open: dict[bytes, float] = {_digest(first): math.inf}  # digest -> when it expires
        self._spent: dict[bytes, str] = {}  # digest -> USED | EXPIRED
        self._sessions: set[bytes] = set()

    def issue(self) -> str:
        """A fresh token (one sign-in, within ``ttl_s``)."""
        token = secrets.token_urlsafe(24)
        with self._lock:
            self._expire()
            self._open[_digest(token)] = self._clock() + self._ttl_s
        return token

    def redeem(self, token: str) -> str:
        """A new session for an open token, which is spent from now on; else :class:`LoginRefused`."""
        key = _digest(token)
        with self._lock:
            self._expire()
            if self._open.pop(key, None) is None:
                raise LoginRefused(self._spent.get(key))
            self._spent[key] = USED
            session = secrets.token_urlsafe(32)
            self._sessions.add(_digest(session))
        return session

    def signed_in(self, session: str | None) -> bool:
        return session is not None and _digest(session) in self._sessions

    def _expire(self) -> None:
        now = self._clock()
        for key in [k for k, until in self._open.items() if until <= now]:
            del self._open[key]
            self._spent[key] = EXPIRED


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
    await _answer(send, status, text.encode(), b"text/plain; charset=utf-8", extra)


async def _answer(
    send: Send, status: int, body: bytes, content_type: bytes, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    headers = [
        (b"content-type", content_type),
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


NOT_SIGNED_IN = "not signed in: open the URL `mailstep console` printed (it has ?token=...)"
SPENT = {
    USED: "this sign-in link was used already: each link signs in once. "
    "For a new one run `mailstep console token` (add --port PORT when several consoles run).",
    EXPIRED: "this sign-in link expired unused (a link from `mailstep console token` lasts "
    f"{FRESH_TOKEN_TTL_S // 60} minutes). For a new one run `mailstep console token` again.",
}


class Guard:
    """The ASGI middleware described in the module docstring."""

    def __init__(self, app: ASGIApp, secrets_: Secrets, port: int) -> None:
        self.app = app
        self.secrets = secrets_
        self.port = port
        self.logins = Logins(secrets_.token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        if not loopback_host(headers.get(b"host", b"").decode("latin-1"), self.port):
            await _plain(send, MISDIRECTED, MISDIRECTED_TEXT)
            return
        path = str(scope.get("path", ""))
        method = str(scope.get("method", "GET")).upper()
        if path == FRESH_LINK_PATH:
            await self._issue(method, headers, send)
            return
        if (path.startswith(PUBLIC_PREFIX) or path == FAVICON) and method in SAFE_METHODS:
            await self.app(scope, receive, self._with_headers(send, path))
            return
        signed_in = self.logins.signed_in(_cookie(headers, COOKIE))
        token = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token", [""])[0]
        if method == "GET" and path == "/" and token:
            await self._sign_in(token, signed_in, send)
            return
        if not signed_in:
            await _plain(send, 401, NOT_SIGNED_IN)
            return
        if method not in SAFE_METHODS:
            replay = await self._checked(scope, receive, headers)
            if replay is None:
                await _plain(send, 403, "refused: this request has no valid CSRF token; reload the page")
                return
            receive = replay
        await self.app(scope, receive, self._with_headers(send, path))

    async def _sign_in(self, token: str, signed_in: bool, send: Send) -> None:
        """``GET /?token=``: a session cookie for an open token; a used or expired one is refused
        with the reason (a browser signed in already is only sent to the page)."""
        try:
            session = self.logins.redeem(token)
        except LoginRefused as refused:
            if signed_in:
                await _plain(send, 303, "signed in already", [(b"location", b"/")])
            elif refused.reason is not None:
                await _plain(send, 403, SPENT[refused.reason])
            else:
                await _plain(send, 401, NOT_SIGNED_IN)
            return
        cookie = f"{COOKIE}={session}; HttpOnly; SameSite=Strict; Path=/"
        await _plain(send, 303, "signed in", [(b"location", b"/"), (b"set-cookie", cookie.encode())])

    async def _issue(self, method: str, headers: dict[bytes, bytes], send: Send) -> None:
        """``POST /_console/token``: a fresh sign-in URL for the holder of the control key,
        asking from outside a browser (no ``Origin``)."""
        if method != "POST":
            await _plain(send, 405, "method not allowed: POST", [(b"allow", b"POST")])
            return
        if b"origin" in headers:
            await _plain(send, 403, "refused: fresh sign-in links are for `mailstep console token` only")
            return
        scheme, _, key = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
        if scheme.lower() != "bearer" or not key or not _same(key, self.secrets.control):
            await _plain(send, 401, "refused: no valid control key (`mailstep console token` reads it)")
            return
        url = f"http://127.0.0.1:{self.port}/?token={self.logins.issue()}"
        body = json.dumps({"url": url, "expires_in_s": FRESH_TOKEN_TTL_S}).encode()
        await _answer(send, 200, body, b"application/json")

    async def _checked(self, scope: Scope, receive: Receive, headers: dict[bytes, bytes]) -> Receive | None:
        """The body's receive (read here, replayed to the route) when the request carries the
        CSRF token and no foreign Origin; None otherwise."""
        origin = headers.get(b"origin")
        if origin is not None and not own_origin(origin.decode("latin-1"), "http", self.port):
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
