"""The console's guard (``console.guard.Guard``) in front of a recording ASGI app: which
requests reach a route, and what the others get."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from console.guard import COOKIE, Guard, Secrets

PORT = 8790
HOST = f"127.0.0.1:{PORT}"
SECRETS = Secrets(token="t0ken", session="s3ssion", csrf="csrf-token")
COOKIE_HEADER = f"{COOKIE}={SECRETS.session}"


class Recorder:
    """An ASGI app that answers 200 and remembers the requests (and bodies) that reached it."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bytes]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = b""
        if scope["method"] not in ("GET", "HEAD"):
            message = await receive()
            body = message.get("body", b"")
        self.seen.append((scope["path"], body))
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/html")]}
        )
        await send({"type": "http.response.body", "body": b"secret data"})


def request(
    path: str,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    body: bytes = b"",
    query: str = "",
) -> tuple[Recorder, int, dict[bytes, bytes], bytes]:
    app = Recorder()
    guard = Guard(app, SECRETS, PORT)
    sent: list[dict[str, Any]] = []
    all_headers = {"host": HOST, **(headers or {})}
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "query_string": query.encode(),
        "headers": [(k.lower().encode(), v.encode()) for k, v in all_headers.items()],
    }
    chunks = [body]

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": chunks.pop(0) if chunks else b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(guard(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    content = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return app, start["status"], dict(start["headers"]), content


FORM = "application/x-www-form-urlencoded"


def test_the_printed_token_signs_in_with_an_httponly_strict_cookie() -> None:
    app, status, headers, _ = request("/", query="token=t0ken")
    assert status == 303 and headers[b"location"] == b"/"
    cookie = headers[b"set-cookie"].decode()
    assert cookie.startswith(f"{COOKIE}={SECRETS.session};")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert app.seen == []


@pytest.mark.parametrize("query", ["", "token=wrong", "token="])
def test_without_the_cookie_nothing_reaches_a_route(query: str) -> None:
    app, status, headers, body = request("/subscribers", query=query)
    assert status == 401 and app.seen == [] and b"secret" not in body
    assert b"set-cookie" not in headers


def test_a_wrong_cookie_is_refused() -> None:
    app, status, _, _ = request("/", headers={"cookie": f"{COOKIE}=s3ssioN"})
    assert status == 401 and app.seen == []


@pytest.mark.parametrize("host", ["evil.example:8790", "127.0.0.1:8791", "127.0.0.1", "0.0.0.0:8790", ""])
def test_a_foreign_host_is_refused_even_with_the_token_or_cookie(host: str) -> None:
    for path, query in (("/", "token=t0ken"), ("/subscribers", "")):
        app, status, headers, _ = request(path, headers={"host": host, "cookie": COOKIE_HEADER}, query=query)
        assert status == 400 and app.seen == [] and b"set-cookie" not in headers


def test_signed_in_gets_the_page_with_the_security_headers() -> None:
    for host in (HOST, f"localhost:{PORT}"):
        app, status, headers, body = request("/subscribers", headers={"host": host, "cookie": COOKIE_HEADER})
        assert status == 200 and body == b"secret data" and app.seen == [("/subscribers", b"")]
        assert b"default-src 'none'" in headers[b"content-security-policy"]
        assert b"'unsafe-inline'" not in headers[b"content-security-policy"]
        assert headers[b"x-frame-options"] == b"DENY" and headers[b"cache-control"] == b"no-store"


@pytest.mark.parametrize(
    ("headers", "body"),
    [
        ({"content-type": FORM}, b"confirm=yes"),  # no token
        ({"content-type": FORM}, b"csrf=csrf-tokeN"),  # a wrong one
        ({"x-csrf-token": "nope"}, b""),
        ({"content-type": "text/plain"}, b"csrf=csrf-token"),  # only forms carry it in the body
        ({"content-type": FORM, "origin": "http://evil.example"}, b"csrf=csrf-token"),
        ({"content-type": FORM, "origin": "null"}, b"csrf=csrf-token"),
    ],
)
def test_a_change_without_the_csrf_token_never_reaches_a_route(headers: dict[str, str], body: bytes) -> None:
    app, status, _, _ = request(
        "/subscribers/a@b.c/erase", "POST", {"cookie": COOKIE_HEADER, **headers}, body
    )
    assert status == 403 and app.seen == []


def test_a_change_with_the_token_reaches_its_route_with_its_body() -> None:
    body = b"csrf=csrf-token&confirm=a%40b.c"
    headers = {"cookie": COOKIE_HEADER, "content-type": FORM, "origin": f"http://{HOST}"}
    app, status, _, _ = request("/subscribers/a@b.c/erase", "POST", headers, body)
    assert status == 200 and app.seen == [("/subscribers/a@b.c/erase", body)]
    app, status, _, _ = request(
        "/api/audience", "POST", {"cookie": COOKIE_HEADER, "x-csrf-token": "csrf-token"}
    )
    assert status == 200 and app.seen == [("/api/audience", b"")]


def test_static_assets_need_no_cookie_but_the_right_host() -> None:
    app, status, _, _ = request("/static/console.css")
    assert status == 200 and app.seen == [("/static/console.css", b"")]
    app, status, _, _ = request("/static/console.css", headers={"host": "evil.example"})
    assert status == 400 and app.seen == []
    app, status, _, _ = request("/static/console.css", "POST")
    assert status == 401 and app.seen == []


def test_the_framed_mail_preview_gets_a_sandboxed_policy() -> None:
    _, status, headers, _ = request("/templates/render/newsletter/monthly", headers={"cookie": COOKIE_HEADER})
    policy = headers[b"content-security-policy"]
    assert status == 200 and b"sandbox" in policy and b"frame-ancestors 'self'" in policy
    assert b"script-src" not in policy and headers[b"x-frame-options"] == b"SAMEORIGIN"
