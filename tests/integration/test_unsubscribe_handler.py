"""Unsubscribe routes driven with API Gateway v2 events through the real handler."""

from __future__ import annotations

import base64
import importlib
from typing import Any

import pytest

from local_aws.apigw import LambdaContext, http_api_event
from local_aws.provision import LocalResources
from shared.core.secrets import get_secret
from shared.sending.tokens import TokenClaims, issue
from shared.store.stats import StatsStore
from shared.store.subscribers import SubscriberStore

EMAIL = "jane@example.com"


@pytest.fixture
def module(resources: LocalResources, monkeypatch: pytest.MonkeyPatch) -> Any:
    for name, value in resources.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DEFAULT_FROM", "Acme <hello@acme.test>")
    return importlib.reload(importlib.import_module("functions.unsubscribe.handler"))


@pytest.fixture
def secret(resources: LocalResources) -> str:
    return get_secret(resources.secrets["unsubscribe_secret"])


def _token(secret: str, *, ttl: int = 3600, purpose: str = "unsubscribe", email: str = EMAIL) -> str:
    claims = TokenClaims(
        email=email, source="onboarding", template="onboarding/welcome", send_id="abc", purpose=purpose
    )  # type: ignore[arg-type]
    return issue(claims, secret, ttl_seconds=ttl)


def _call(
    module: Any,
    method: str,
    path: str,
    body: str | bytes | None = None,
    content_type: str = "application/x-www-form-urlencoded",
) -> tuple[int, str, dict[str, str]]:
    event = http_api_event(method, path, body=body, headers={"content-type": content_type})
    response = module.handler(event, LambdaContext("unsubscribe"))
    text = response.get("body") or ""
    if response.get("isBase64Encoded"):
        text = base64.b64decode(text).decode()
    return response["statusCode"], text, response.get("headers", {})


def _state(store: SubscriberStore, resources: LocalResources) -> tuple[str, int, int]:
    profile = store.get_profile(EMAIL)
    stats = StatsStore(resources.tables["table_name"], resources.tables["events_table_name"])
    count = stats.source("onboarding").total("unsubscribe")
    events = [e for e in store.list_events(EMAIL) if e["type"] == "unsubscribe"]
    return (profile.status if profile else "none"), len(events), count


def test_get_shows_a_confirm_page_and_changes_nothing(module, store, resources, secret):
    store.upsert(EMAIL, first_name="Jane")
    status, html, headers = _call(module, "GET", f"/u/{_token(secret)}")
    assert status == 200
    assert '<form method="post"' in html and "j***@example.com" in html and EMAIL not in html
    assert headers["Content-Type"].startswith("text/html") and headers["Cache-Control"] == "no-store"
    assert _state(store, resources) == ("subscribed", 0, 0)


def test_one_click_post_unsubscribes_once_and_repeats_are_harmless(module, store, resources, secret):
    store.upsert(EMAIL)
    token = _token(secret)
    for _ in range(3):
        status, html, _ = _call(module, "POST", f"/u/{token}", body=b"List-Unsubscribe=One-Click")
        assert status == 200 and "You are unsubscribed" in html
    assert _state(store, resources) == ("unsubscribed", 1, 1)
    event = next(e for e in store.list_events(EMAIL) if e["type"] == "unsubscribe")
    assert (event["origin"], event["source"], event["template"]) == (
        "one_click",
        "onboarding",
        "onboarding/welcome",
    )


def test_form_post_then_resubscribe_from_the_confirmation_page(module, store, resources, secret):
    store.upsert(EMAIL)
    token = _token(secret)
    status, html, _ = _call(module, "POST", f"/u/{token}", body="unsubscribe=everything")
    assert status == 200
    action = html.split('action="', 2)[1].split('"', 1)[0]
    assert action.endswith("/resubscribe") and token not in action
    status, html, _ = _call(module, "POST", f"/u/{action}")
    assert status == 200 and "Welcome back" in html
    assert store.get_profile(EMAIL).status == "subscribed"
    # the resubscribe token cannot unsubscribe, and the unsubscribe token cannot resubscribe
    assert _call(module, "POST", f"/u/{action.split('/')[0]}")[0] == 400
    assert _call(module, "POST", f"/u/{token}/resubscribe")[0] == 400


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_tampered_and_expired_tokens_get_a_4xx_page_and_change_nothing(
    module, store, resources, secret, method
):
    store.upsert(EMAIL)
    good = _token(secret)
    flipped = good[:20] + ("A" if good[20] != "A" else "B") + good[21:]
    expired = _token(secret, ttl=-1)
    forged = _token("another-secret-of-enough-length")
    for token, words in (
        (flipped, "not valid"),
        (expired, "expired"),
        (forged, "not valid"),
        ("x", "not valid"),
    ):
        status, html, _ = _call(module, method, f"/u/{token}", body="List-Unsubscribe=One-Click")
        assert status == 400 and words in html and "Nothing was changed" in html
    assert _state(store, resources) == ("subscribed", 0, 0)


def test_unknown_paths_answer_an_html_404(module):
    status, html, _ = _call(module, "GET", "/u")
    assert status == 404 and "<html" in html


def test_tokens_never_expose_the_address(secret):
    token = _token(secret)
    padded = token + "=" * (-len(token) % 4)
    assert b"jane" not in base64.urlsafe_b64decode(padded) and "jane" not in token
