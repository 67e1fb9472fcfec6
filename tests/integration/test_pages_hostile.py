"""Hostile and careless requests against the public routes' real handlers on moto: every
refusal is a 4xx naming its field, with words of its own on the pages, and writes nothing.

- A body that is not UTF-8, sent with a binary content type (API Gateway base64-encodes it),
  is a 400 on every route that reads a body (it was a 500: Powertools' ``decoded_body``).
- JSON naming one key twice is refused naming the key, like a repeated form field.
- The preference page's refusals read what happened (an unknown topic is not "We could not
  find you"); the sign-up form's error page is titled by its heading, not "Link problem".
- Resubscribing from the page never lifts a bounce suppression.
"""

from __future__ import annotations

import base64
import importlib
import json
import re
from typing import Any

import pytest

from local_aws.apigw import LambdaContext, http_api_event
from local_aws.provision import LocalResources
from shared.core.secrets import get_secret
from shared.engagement.suppression import Suppression, Suppressions
from shared.sending.tokens import TokenClaims, issue
from shared.store.subscribers import SubscriberStore
from tests.forms import submission
from tests.integration.conftest import API_KEY, scan_all

MAIN, EVENTS = "mailstep-main", "mailstep-events"
EMAIL = "reader@example.com"
NOT_UTF8 = b"email=\xff\xfe\xfa@example.com&\xc3\x28"
FORM = "application/x-www-form-urlencoded"
PAGE_URL = "https://api.acme.test"


@pytest.fixture
def handlers(resources: LocalResources, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The api, signup and unsubscribe handler modules, loaded with the resources' environment."""
    for name, value in resources.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DEFAULT_FROM", "Acme <hello@acme.test>")
    monkeypatch.setenv("PUBLIC_BASE_URL", PAGE_URL)
    return {
        name: importlib.reload(importlib.import_module(f"functions.{name}.handler"))
        for name in ("api", "signup", "unsubscribe")
    }


@pytest.fixture
def token(resources: LocalResources) -> str:
    """An unsubscribe link's token for ``EMAIL`` (a broadcast's mail, no topic)."""
    claims = TokenClaims(
        email=EMAIL, source="news-1", template="newsletter/monthly", send_id="s1", purpose="unsubscribe"
    )  # type: ignore[arg-type]
    return issue(claims, get_secret(resources.secrets["unsubscribe_secret"]), ttl_seconds=3600)


def call(
    module: Any, method: str, path: str, body: bytes | str | None = None, content_type: str = FORM
) -> tuple[int, str, dict[str, str]]:
    headers = {"content-type": content_type, "authorization": f"Bearer {API_KEY}"}
    event = http_api_event(method, path, body=body, headers=headers)
    response = module.handler(event, LambdaContext(module.__name__.split(".")[1]))
    text = response.get("body") or ""
    if response.get("isBase64Encoded"):
        text = base64.b64decode(text).decode()
    return response["statusCode"], text, response.get("headers") or {}


def tables() -> list[dict[str, Any]]:
    return scan_all(MAIN) + scan_all(EVENTS)


def title(html: str) -> str:
    found = re.search(r"<title>(.*?)</title>", html, re.S)
    assert found, html[:500]
    return found.group(1).strip()


# ----- bodies that cannot be decoded ------------------------------------------------------------
@pytest.mark.parametrize(
    ("function", "path"),
    [
        ("api", "/v1/events"),
        ("signup", "/v1/signup"),
        ("unsubscribe", "/u/{token}/preferences"),
        ("unsubscribe", "/u/{token}"),
        ("unsubscribe", "/u/garbage"),
    ],
)
@pytest.mark.parametrize("content_type", ["application/octet-stream", "multipart/form-data; boundary=x"])
def test_a_body_that_is_not_utf8_is_a_400_naming_the_body_and_writes_nothing(
    handlers: dict[str, Any], store: SubscriberStore, token: str, function: str, path: str, content_type: str
) -> None:
    store.upsert(EMAIL)
    before = tables()
    for _ in range(2):  # a client's retry gets the same answer
        status, text, _ = call(handlers[function], "POST", path.format(token=token), NOT_UTF8, content_type)
        assert status == 400, text[:1000]
        if function == "unsubscribe":
            assert "not valid UTF-8" in text and "Something went wrong" not in text
        else:
            assert json.loads(text)["error"]["field"] == "body", text
    assert tables() == before


# ----- JSON naming a key twice ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("route", "body", "key"),
    [
        ("/v1/events", '{"type": "t.x", "email": "a@example.com", "email": "b@example.com"}', "email"),
        ("/v1/events", '{"events": [{"type": "t.x", "email": "a@x.t", "tags": [], "tags": []}]}', "tags"),
        ("/v1/events", '{"events": [], "events": [{"type": "t.x", "email": "a@example.com"}]}', "events"),
        ("/v1/events", '{"type": "t.x", "email": "a@x.t", "attributes": {"plan": 1, "plan": 2}}', "plan"),
        ("/v1/signup", '{"email": "a@example.com", "email": "victim@example.com"}', "email"),
        ("/v1/signup", '{"email": "a@example.com", "topics": [], "topics": ["newsletter"]}', "topics"),
    ],
)  # fmt: skip
def test_json_with_a_duplicate_key_is_refused_naming_it(
    handlers: dict[str, Any], route: str, body: str, key: str
) -> None:
    before = tables()
    handler = handlers["api"] if route == "/v1/events" else handlers["signup"]
    status, text, _ = call(handler, "POST", route, body, "application/json")
    assert status == 400, text
    error = json.loads(text)["error"]
    assert error["field"] == key and "more than once" in error["message"], error
    assert tables() == before


# ----- page copy of each refusal ----------------------------------------------------------------
def test_an_unknown_topic_on_the_preference_page_says_what_was_wrong(
    handlers: dict[str, Any], store: SubscriberStore, token: str
) -> None:
    store.upsert(EMAIL)
    status, page, _ = call(handlers["unsubscribe"], "GET", f"/u/{token}")
    assert status == 200
    url, body = submission(f"{PAGE_URL}/u/{token}", page, "Save my choices")
    before = tables()
    status, html, _ = call(
        handlers["unsubscribe"], "POST", url.removeprefix(PAGE_URL), body + "&topics=no-such"
    )
    assert status == 400
    assert "could not find you" not in html and "no-such" in html, html
    assert title(html).startswith("We could not use this form"), title(html)
    assert tables() == before


def test_a_post_that_names_no_choice_changes_nothing_and_names_the_field(
    handlers: dict[str, Any], store: SubscriberStore, token: str
) -> None:
    store.upsert(EMAIL)
    before = tables()
    for body, problem in (
        ("", "unsubscribe: missing"),
        ("List-Unsubscribe=Two-Clicks", "List-Unsubscribe: must be &#39;One-Click&#39;"),
        ("unsubscribe=topic", "unsubscribe: must be &#39;everything&#39;"),
        ("unsubscribe=everything&unsubscribe=x", "unsubscribe: given more than once"),
    ):
        status, html, _ = call(handlers["unsubscribe"], "POST", f"/u/{token}", body)
        assert status == 400 and problem in html and "could not find you" not in html, (body, html)
    status, html, _ = call(handlers["unsubscribe"], "POST", f"/u/{token}", "{}", "application/json")
    assert status == 400 and "content-type" in html, html
    status, html, _ = call(
        handlers["unsubscribe"], "POST", f"/u/{token}", "unsubscribe=everything&x=" + "y" * 9000
    )
    assert status == 413 and "more data than a form" in html, html
    assert tables() == before


def test_a_sign_up_form_error_page_is_titled_by_what_happened(handlers: dict[str, Any]) -> None:
    before = tables()
    status, html, _ = call(handlers["signup"], "POST", "/v1/signup", "email=not-an-address")
    assert status == 400
    assert "Link problem" not in html and title(html).startswith("We could not sign you up"), title(html)
    assert tables() == before


# ----- resubscribing from the page keeps a bounce's suppression ---------------------------------
def test_resubscribing_from_the_page_keeps_a_bounce_suppression(
    handlers: dict[str, Any], store: SubscriberStore, token: str
) -> None:
    store.upsert(EMAIL)
    Suppressions(store).suppress(
        Suppression(email=EMAIL, reason="bounce", detail="Permanent/General", at="2026-11-25T10:00:00Z")
    )
    module, page_url = handlers["unsubscribe"], f"{PAGE_URL}/u/{token}"

    status, page, _ = call(module, "GET", f"/u/{token}")
    assert status == 200
    url, body = submission(page_url, page, "Unsubscribe from everything")
    status, unsubscribed, _ = call(module, "POST", url.removeprefix(PAGE_URL), body)
    assert status == 200 and store.get_profile(EMAIL).status == "unsubscribed"
    url, body = submission(page_url, unsubscribed, "Subscribe again")
    for _ in range(2):  # pressed twice: the same answer, nothing more changes
        status, welcome, _ = call(module, "POST", url.removeprefix(PAGE_URL), body)
        assert status == 200 and "bounced or was reported" in welcome, welcome

    profile = store.get_profile(EMAIL)
    assert profile is not None and (profile.status, profile.suppressed) == ("subscribed", True)
    suppression = store.get_suppression(EMAIL)
    assert suppression is not None and suppression["reason"] == "bounce"
