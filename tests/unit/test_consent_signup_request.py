"""The sign-up request parser: JSON and HTML form bodies; hostile input gets a clear error
naming the field (a 4xx through shared/web/http.py), never a half-parsed request."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import pytest

from shared.consent.context import ConsentConfig, parse_origins
from shared.consent.signup import SignupRequest, SignupRules, parse_signup
from shared.core.errors import InvalidInput, PayloadTooLarge
from shared.core.settings import Settings
from shared.core.topics import Topic, TopicCatalog
from shared.web.http import status_for

CATALOG = TopicCatalog(
    {
        "product-updates": Topic("product-updates", "Product updates"),
        "newsletter": Topic("newsletter", "Newsletter", default=False),
    }
)
RULES = SignupRules(topics=CATALOG, origins=("https://acme.test", "http://localhost:8000"))
FORM = "application/x-www-form-urlencoded"
JSON = "application/json"
MAX = 8 * 1024


def _json(body: dict) -> SignupRequest:
    return parse_signup(json.dumps(body), "application/json; charset=utf-8", RULES, max_bytes=MAX)


def _form(fields: list[tuple[str, str]]) -> SignupRequest:
    return parse_signup(urlencode(fields), FORM, RULES, max_bytes=MAX)


def _problem(call, *args) -> tuple[str, str]:
    with pytest.raises(InvalidInput) as raised:
        call(*args)
    assert status_for(raised.value)[0] == 400
    problem = raised.value.problems[0]
    return problem.field, problem.message


def test_a_json_sign_up_is_normalised() -> None:
    request = _json(
        {
            "email": "  Ada@Example.COM ",
            "first_name": " Ada ",
            "topics": ["newsletter", "newsletter"],
            "redirect": "https://acme.test/thanks?x=1",
            "form": "footer",
        }
    )
    assert request.email == "Ada@example.com"
    assert request.first_name == "Ada"
    assert request.topics == ("newsletter",)
    assert request.redirect == "https://acme.test/thanks?x=1"
    assert (request.form, request.website) == ("footer", "")


def test_a_plain_html_form_post_parses_with_repeated_topics_and_ignores_a_named_button() -> None:
    request = _form(
        [
            ("email", "bob@example.com"),
            ("first_name", ""),
            ("topics", ""),  # the hidden empty value: a choice was made
            ("topics", "product-updates"),
            ("topics", "newsletter"),
            ("website", ""),
            ("redirect", "http://localhost:8000/thanks"),
            ("submit", "Subscribe"),
        ]
    )
    assert request.email == "bob@example.com"
    assert request.first_name is None
    assert request.topics == ("product-updates", "newsletter")
    assert request.redirect == "http://localhost:8000/thanks"


def test_no_topics_means_no_choice_and_an_empty_choice_is_a_choice() -> None:
    assert _form([("email", "a@example.com")]).topics is None
    assert _form([("email", "a@example.com"), ("topics", "")]).topics == ()
    assert _json({"email": "a@example.com", "topics": []}).topics == ()


def test_the_honeypot_is_kept_for_the_flow_to_see() -> None:
    assert _form([("email", "a@example.com"), ("website", "http://spam.test")]).website == "http://spam.test"
    assert _json({"email": "a@example.com", "website": 1}).website  # not a string: a bot


def test_an_oversized_body_is_refused_before_parsing() -> None:
    body = urlencode([("email", "a@example.com"), ("first_name", "x" * MAX)])
    with pytest.raises(PayloadTooLarge) as raised:
        parse_signup(body, FORM, RULES, max_bytes=MAX)
    assert status_for(raised.value)[0] == 413


def _valid_email_and(name: str, value: str) -> list[tuple[str, str]]:
    return [("email", "a@example.com"), (name, value)]


@pytest.mark.parametrize(
    ("fields", "field", "needle"),
    [
        ([("email", "not-an-address")], "email", "exactly one '@'"),
        ([("first_name", "Ada")], "email", "field required"),
        (_valid_email_and("first_name", "<script>alert(1)</script>"), "first_name", "plain name"),
        (_valid_email_and("first_name", "Win $$$ at https://spam.test"), "first_name", "plain name"),
        (_valid_email_and("first_name", "Ada\r\nBcc: victim@example.com"), "first_name", "CR, LF"),
        (_valid_email_and("first_name", "A" * 101), "first_name", "at most 100"),
        ([("email", "a@example.com\r\nBcc: x@example.com")], "email", "control characters"),
        (_valid_email_and("topics", "sports"), "topics", "unknown topic 'sports'"),
        (_valid_email_and("topics", "news#letter"), "topics", "no '#'"),
        (_valid_email_and("redirect", "https://evil.test/phish"), "redirect", "configured sign-up origins"),
        (_valid_email_and("redirect", "https://acme.test@evil.test/"), "redirect", "configured"),
        (_valid_email_and("redirect", "javascript:alert(1)"), "redirect", "configured"),
        (_valid_email_and("redirect", "//evil.test/"), "redirect", "configured"),
        (_valid_email_and("redirect", "https://acme.test/\r\nSet-Cookie: x"), "redirect", "without spaces"),
        (_valid_email_and("form", "Bad Form"), "form", "form id"),
        (_valid_email_and("email", "b@example.com"), "email", "more than once"),
    ],
)
def test_hostile_or_broken_form_fields_name_the_field(
    fields: list[tuple[str, str]], field: str, needle: str
) -> None:
    got_field, message = _problem(_form, fields)
    assert got_field == field
    assert needle in message


@pytest.mark.parametrize(
    ("body", "content_type", "field"),
    [
        ("", JSON, "body"),
        ("{not json", JSON, "body"),
        ("[1, 2]", JSON, "body"),
        ('{"email": NaN}', JSON, "body"),
        ('{"email": "a@example.com", "admin": true}', JSON, "admin"),
        ('{"email": "a@example.com", "topics": {"a": 1}}', JSON, "topics"),
        ("email=a%40example.com", "text/plain", "content-type"),
        ("email=a%40example.com", None, "content-type"),
        (b"email=\xff\xfe", FORM, "body"),
        ("&".join(f"f{i}=x" for i in range(100)), FORM, "body"),
    ],
)
def test_malformed_bodies_name_what_is_wrong(body: str | bytes, content_type: str | None, field: str) -> None:
    got_field, _ = _problem(lambda: parse_signup(body, content_type, RULES, max_bytes=MAX))
    assert got_field == field


def test_origins_are_parsed_strictly_from_the_settings() -> None:
    assert parse_origins(" https://Acme.test, http://localhost:8000 ,") == (
        "https://acme.test",
        "http://localhost:8000",
    )
    for bad in ("acme.test", "https://acme.test/path", "ftp://acme.test", "https://user@acme.test"):
        with pytest.raises(ValueError):
            parse_origins(bad)
    config = ConsentConfig.from_settings(
        Settings(
            table_name="t", signup_allowed_origins="https://acme.test", signup_single_opt_in_forms="app, crm"
        )
    )
    assert config.origins == ("https://acme.test",)
    assert config.domain_cap_per_hour == 1000  # the default
    capped = ConsentConfig.from_settings(Settings(table_name="t", signup_domain_cap_per_hour=250))
    assert capped.domain_cap_per_hour == 250
    assert config.single_opt_in("app") and not config.single_opt_in("footer")
    assert ConsentConfig.from_settings(Settings(table_name="t", signup_double_opt_in=False)).single_opt_in(
        "footer"
    )
