"""The console's guard (``console.guard.Guard``) in front of a recording ASGI app: which
requests reach a route, and what the others get; a sign-in token signs in once; fresh tokens
only for the holder of the control key, from outside a browser."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from console.guard import COOKIE, FRESH_LINK_PATH, Guard, LoginRefused, Logins, Secrets

PORT = 8790
HOST = f"127.0.0.1:{PORT}"
SECRETS = Secrets(token="t0ken", csrf="csrf-token", control="c0ntrol")


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
    guard: Guard | None = None,
) -> tuple[Recorder, int, dict[bytes, bytes], bytes]:
    """One request through ``guard`` (a new one, with a new recorder, when None)."""
    guard = guard or Guard(Recorder(), SECRETS, PORT)
    app = guard.app
    assert isinstance(app, Recorder)
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


@pytest.fixture
def guard() -> Guard:
    return Guard(Recorder(), SECRETS, PORT)


@pytest.fixture
def session(guard: Guard) -> str:
    """The cookie header of a browser signed in with the printed token on ``guard``."""
    return sign_in(guard, "t0ken")


def sign_in(guard: Guard, token: str) -> str:
    _, status, headers, _ = request("/", query=f"token={token}", guard=guard)
    assert status == 303 and headers[b"location"] == b"/", status
    return headers[b"set-cookie"].decode().split(";", 1)[0]


def test_the_printed_token_signs_in_with_an_httponly_strict_cookie(guard: Guard) -> None:
    app, status, headers, _ = request("/", query="token=t0ken", guard=guard)
    assert status == 303 and headers[b"location"] == b"/"
    cookie = headers[b"set-cookie"].decode()
    assert cookie.startswith(f"{COOKIE}=") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert app.seen == []
    assert request("/subscribers", headers={"cookie": cookie.split(";", 1)[0]}, guard=guard)[1] == 200


def test_a_token_signs_in_once_and_a_second_use_says_so(guard: Guard, session: str) -> None:
    app, status, headers, body = request("/", query="token=t0ken", guard=guard)
    assert status == 403 and b"set-cookie" not in headers and app.seen == []
    assert b"used already" in body and b"mailstep console token" in body
    # the browser it signed in stays signed in (and a used link there only shows the page)
    _, status, headers, _ = request("/", query="token=t0ken", headers={"cookie": session}, guard=guard)
    assert status == 303 and b"set-cookie" not in headers
    assert request("/subscribers", headers={"cookie": session}, guard=guard)[1] == 200


def fresh(guard: Guard, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    sent = {"authorization": "Bearer c0ntrol"} if headers is None else headers
    _, status, _, body = request(FRESH_LINK_PATH, "POST", sent, guard=guard)
    return status, body


def test_the_control_key_gets_a_fresh_token_that_signs_in_once(guard: Guard, session: str) -> None:
    status, body = fresh(guard)
    url = json.loads(body)["url"]
    assert status == 200 and url.startswith(f"http://127.0.0.1:{PORT}/?token=")
    token = url.split("token=", 1)[1]
    cookie = sign_in(guard, token)
    assert cookie != session  # a session of its own
    assert request("/", query=f"token={token}", guard=guard)[1] == 403


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"authorization": "Bearer c0ntroL"},
        {"authorization": "c0ntrol"},
        {"authorization": f"Bearer {SECRETS.token}"},
        # a web page (even one that learnt the key) sends an Origin: refused
        {"authorization": "Bearer c0ntrol", "origin": f"http://{HOST}"},
        {"authorization": "Bearer c0ntrol", "origin": "http://evil.example"},
    ],
)
def test_no_fresh_token_without_the_control_key_or_from_a_browser(
    guard: Guard, headers: dict[str, str]
) -> None:
    status, body = fresh(guard, headers)
    assert status in (401, 403) and b"token=" not in body
    _, status, _, _ = request(FRESH_LINK_PATH, "GET", {"authorization": "Bearer c0ntrol"}, guard=guard)
    assert status == 405


def test_a_fresh_token_expires_unused_and_the_printed_one_does_not() -> None:
    now = [0.0]
    logins = Logins("first", ttl_s=600, clock=lambda: now[0])
    fresh_token = logins.issue()
    now[0] = 600.0
    with pytest.raises(LoginRefused) as refused:
        logins.redeem(fresh_token)
    assert refused.value.reason == "expired"
    assert logins.signed_in(logins.redeem("first"))
    with pytest.raises(LoginRefused) as refused:
        logins.redeem("never-issued")
    assert refused.value.reason is None


@pytest.mark.parametrize("query", ["", "token=wrong", "token="])
def test_without_the_cookie_nothing_reaches_a_route(query: str) -> None:
    app, status, headers, body = request("/subscribers", query=query)
    assert status == 401 and app.seen == [] and b"secret" not in body
    assert b"set-cookie" not in headers


def test_a_wrong_cookie_is_refused(guard: Guard, session: str) -> None:
    app, status, _, _ = request("/", headers={"cookie": session[:-1] + "x"}, guard=guard)
    assert status == 401 and app.seen == []


@pytest.mark.parametrize(
    "host", ["evil.example:8790", "127.0.0.1:8791", "localhost.:8790", "0.0.0.0:8790", "127.0.0.2:8790", ""]
)
def test_a_foreign_host_is_refused_even_with_the_token_or_cookie(
    guard: Guard, session: str, host: str
) -> None:
    for path, query in (("/", "token=t0ken"), ("/subscribers", ""), (FRESH_LINK_PATH, "")):
        headers = {"host": host, "cookie": session, "authorization": "Bearer c0ntrol"}
        app, status, answered, body = request(path, "GET", headers, query=query, guard=guard)
        assert status == 421 and app.seen == [] and b"set-cookie" not in answered and b"token=" not in body


def test_signed_in_gets_the_page_with_the_security_headers(guard: Guard, session: str) -> None:
    for host in (HOST, f"localhost:{PORT}", "127.0.0.1", f"[::1]:{PORT}"):
        guard.app.seen.clear()  # type: ignore[attr-defined]
        app, status, headers, body = request(
            "/subscribers", headers={"host": host, "cookie": session}, guard=guard
        )
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
def test_a_change_without_the_csrf_token_never_reaches_a_route(
    guard: Guard, session: str, headers: dict[str, str], body: bytes
) -> None:
    app, status, _, _ = request(
        "/subscribers/a@b.c/erase", "POST", {"cookie": session, **headers}, body, guard=guard
    )
    assert status == 403 and app.seen == []


def test_a_change_with_the_token_reaches_its_route_with_its_body(guard: Guard, session: str) -> None:
    body = b"csrf=csrf-token&confirm=a%40b.c"
    headers = {"cookie": session, "content-type": FORM, "origin": f"http://{HOST}"}
    app, status, _, _ = request("/subscribers/a@b.c/erase", "POST", headers, body, guard=guard)
    assert status == 200 and app.seen == [("/subscribers/a@b.c/erase", body)]
    app.seen.clear()
    app, status, _, _ = request(
        "/api/audience", "POST", {"cookie": session, "x-csrf-token": "csrf-token"}, guard=guard
    )
    assert status == 200 and app.seen == [("/api/audience", b"")]


def test_static_assets_need_no_cookie_but_the_right_host() -> None:
    app, status, _, _ = request("/static/console.css")
    assert status == 200 and app.seen == [("/static/console.css", b"")]
    app, status, _, _ = request("/static/console.css", headers={"host": "evil.example"})
    assert status == 421 and app.seen == []
    app, status, _, _ = request("/static/console.css", "POST")
    assert status == 401 and app.seen == []


def test_the_framed_mail_preview_gets_a_sandboxed_policy(guard: Guard, session: str) -> None:
    _, status, headers, _ = request(
        "/templates/render/newsletter/monthly", headers={"cookie": session}, guard=guard
    )
    policy = headers[b"content-security-policy"]
    assert status == 200 and b"sandbox" in policy and b"frame-ancestors 'self'" in policy
    assert b"script-src" not in policy and headers[b"x-frame-options"] == b"SAMEORIGIN"
