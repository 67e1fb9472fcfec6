"""Validation rules for everything that enters mailstep (no network)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.core.errors import InvalidInput
from shared.core.models import (
    MAX_BATCH,
    InboundEvent,
    normalise_email,
    parse_event_body,
    validate_attributes,
    validate_name,
)
from shared.store import keys


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("  Ann@Example.COM ", "Ann@example.com"),
        ("ann+news@EXAMPLE.co.uk", "ann+news@example.co.uk"),
        ("o'neil@example.com", "o'neil@example.com"),
        ("user@bücher.de", "user@xn--bcher-kva.de"),
    ],
)
def test_email_normalisation_trims_and_lowercases_the_domain_only(raw: str, expected: str) -> None:
    assert normalise_email(raw) == expected


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "   ",
        "plain",
        "a@b",
        "a@@b.com",
        "a b@c.com",
        "a#b@c.com",
        "a\r\n@c.com",
        ".a@c.com",
        "a..b@c.com",
        "a@-c.com",
        "a@c..com",
        "x" * 65 + "@c.com",
        "a@" + "c" * 250 + ".com",
    ],
)
def test_invalid_emails_are_rejected(raw: str) -> None:
    with pytest.raises(ValueError):
        normalise_email(raw)


@given(st.text(max_size=80))
def test_a_normalised_email_can_never_forge_a_key(raw: str) -> None:
    try:
        email = normalise_email(raw)
    except ValueError:
        return
    assert "#" not in email and email == email.strip()
    assert keys.email_from_sub(keys.sub_pk(email)) == email
    assert normalise_email(email) == email  # idempotent


@pytest.mark.parametrize("name", ["pro", "a", "vip.1", "trial-2026", "x_y", "9lives"])
def test_valid_names(name: str) -> None:
    assert validate_name(name) == name


@pytest.mark.parametrize("name", ["", "Pro", "a#b", "a b", "-a", ".a", "a/b", "x" * 65, "é"])
def test_invalid_names(name: str) -> None:
    with pytest.raises(ValueError):
        validate_name(name, "tag")


def test_reserved_attribute_names_are_rejected() -> None:
    for name in ("email", "unsubscribe_url", "Tags", "first_name"):
        with pytest.raises(ValueError, match="reserved"):
            validate_attributes({name: 1})


def test_attribute_limits() -> None:
    validate_attributes({"plan": "pro", "nested": {"a": {"b": 1}}, "list": [1, 2, 3]})
    with pytest.raises(ValueError, match="nested deeper"):
        validate_attributes({"n": {"a": {"b": {"c": {"d": 1}}}}})
    with pytest.raises(ValueError, match="longer than"):
        validate_attributes({"s": "x" * 1001})
    with pytest.raises(ValueError, match="at most 50"):
        validate_attributes({f"k{i}": i for i in range(51)})
    with pytest.raises(ValueError, match="bytes"):
        validate_attributes({f"k{i}": "x" * 999 for i in range(9)})


def test_tags_list_means_add_and_object_means_add_remove() -> None:
    assert InboundEvent.model_validate(
        {"type": "t", "email": "a@b.co", "tags": ["x", "x", "y"]}
    ).tags.add == ("x", "y")
    event = InboundEvent.model_validate(
        {"type": "t", "email": "a@b.co", "tags": {"add": ["x"], "remove": ["y"]}}
    )
    assert event.tags.add == ("x",) and event.tags.remove == ("y",)


def test_single_event_and_batch_bodies() -> None:
    assert len(parse_event_body({"type": "t", "email": "a@b.co"}).events) == 1
    batch = parse_event_body({"events": [{"type": "t", "email": f"u{i}@b.co"} for i in range(MAX_BATCH)]})
    assert len(batch.events) == MAX_BATCH


def test_errors_name_the_field_with_its_index() -> None:
    with pytest.raises(InvalidInput) as info:
        parse_event_body(
            {"events": [{"type": "t", "email": "a@b.co"}, {"type": "t", "email": "a@b.co", "tags": ["A"]}]}
        )
    assert info.value.problems[0].field == "events[1].tags.add"
    assert "tag 'A'" in info.value.message
