"""The one decoder of request bodies, form fields in both encodings HTML forms and RFC 8058 use,
and the strict JSON parser: what they accept, and that each refusal names its field."""

from __future__ import annotations

import pytest
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEventV2

from local_aws.apigw import http_api_event
from shared.core.errors import InvalidInput, PayloadTooLarge
from shared.core.json_input import loads_strict
from shared.web.http import form_fields, request_body

BOUNDARY = "----b7MA4YWxk"
MULTIPART = f"multipart/form-data; boundary={BOUNDARY}"


def multipart(*parts: tuple[str, str], boundary: str = BOUNDARY) -> str:
    body = "".join(
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
        for name, value in parts
    )
    return body + f"--{boundary}--\r\n"


def field_of(exc: pytest.ExceptionInfo[InvalidInput]) -> str:
    return exc.value.problems[0].field


def test_request_body_decodes_base64_and_refuses_what_is_not_utf8() -> None:
    text = "List-Unsubscribe=One-Click ✓"
    event = APIGatewayProxyEventV2(
        http_api_event("POST", "/u/t", body=text.encode(), headers={"content-type": MULTIPART})
    )
    assert event.is_base64_encoded and request_body(event) == text
    plain = APIGatewayProxyEventV2(
        http_api_event("POST", "/u/t", body=text, headers={"content-type": "text/plain"})
    )
    assert request_body(plain) == text
    assert request_body(APIGatewayProxyEventV2(http_api_event("GET", "/u/t"))) is None
    bad = http_api_event(
        "POST", "/u/t", body=b"\xff\xfe", headers={"content-type": "application/octet-stream"}
    )
    with pytest.raises(InvalidInput) as exc:
        request_body(APIGatewayProxyEventV2(bad))
    assert field_of(exc) == "body" and "UTF-8" in str(exc.value)
    bad["body"] = "not base64!"
    with pytest.raises(InvalidInput) as exc:
        request_body(APIGatewayProxyEventV2(bad))
    assert field_of(exc) == "body"


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        ("List-Unsubscribe=One-Click", "application/x-www-form-urlencoded"),
        ("List-Unsubscribe=One-Click", None),  # no content type: a form post
        (multipart(("List-Unsubscribe", "One-Click")), MULTIPART),
        (multipart(("List-Unsubscribe", "One-Click"), boundary="x y"), 'multipart/form-data; boundary="x y"'),
    ],
)
def test_one_click_reads_the_same_in_either_encoding(body: str, content_type: str | None) -> None:
    assert form_fields(body, content_type) == {"List-Unsubscribe": ["One-Click"]}


def test_multipart_keeps_order_blank_values_and_line_breaks() -> None:
    body = multipart(("topics", ""), ("topics", "news"), ("note", "a\r\nb"))
    assert form_fields(body, MULTIPART) == {"topics": ["", "news"], "note": ["a\r\nb"]}


@pytest.mark.parametrize(
    ("body", "content_type", "field"),
    [
        ("{}", "application/json", "content-type"),
        ("garbage", MULTIPART, "body"),
        (multipart(("a", "b"))[:-8], MULTIPART, "body"),  # no closing boundary
        (
            f"--{BOUNDARY}\r\nContent-Type: text/plain\r\n\r\nx\r\n--{BOUNDARY}--\r\n",
            MULTIPART,
            "body",
        ),  # no name
        ("a=1", "multipart/form-data", "body"),  # no boundary
        ("&".join(f"f{i}=1" for i in range(60)), None, "body"),
    ],
)
def test_what_is_no_form_is_refused_naming_the_field(body: str, content_type: str | None, field: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        form_fields(body, content_type)
    assert field_of(exc) == field


def test_a_form_over_the_limit_is_too_large() -> None:
    with pytest.raises(PayloadTooLarge):
        form_fields("a=" + "x" * 9000, None)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('{"email": "a@x.test", "email": "b@x.test"}', "email"),
        ('{"events": [{"tags": [], "tags": ["vip"]}]}', "tags"),
        ('{"a": {"b": {"c": 1, "c": 2}}}', "c"),
        ('{"n": NaN}', "body"),
        ('{"n": -Infinity}', "body"),
        ("[" * 100_000, "body"),
        ('{"a": 1,}', "body"),
    ],
)
def test_strict_json_refuses_naming_the_field(text: str, field: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        loads_strict(text)
    assert field_of(exc) == field


def test_strict_json_reads_valid_json_as_json_loads_does() -> None:
    text = '{"a": [1, 2.5, "x", null, true], "b": {"a": 1}, "c": {}}'
    assert loads_strict(text) == {"a": [1, 2.5, "x", None, True], "b": {"a": 1}, "c": {}}
