"""Every pattern that checks outside input matches the whole value: Python's ``$`` also matches
before a final newline, so ``re.match(r"^[a-z]+$", "vip\\n")`` succeeds. Each case below is a
valid value with a newline appended, refused by the rule that checks it."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from shared.broadcasts.model import Condition
from shared.core.errors import InvalidInput
from shared.core.models import (
    is_attribute_name,
    is_template_key,
    normalise_email,
    validate_attribute_name,
    validate_name,
)
from shared.sending.jobs import SendJob
from shared.sending.mime import Envelope, build_message
from shared.sequences.model import SendWindow, parse_duration


def _envelope(**overrides: Any) -> Envelope:
    fields: dict[str, Any] = {
        "from_email": "hello@acme.test",
        "to_email": "ann@example.com",
        "subject": "Hi",
        "send_id": "abc123",
        "unsubscribe_url": "https://api.acme.test/u/t",
        "list_id": "onboarding.acme.test",
        **overrides,
    }
    return Envelope(**fields)


def test_the_valid_values_pass_without_the_newline() -> None:
    assert validate_name("vip") == "vip" and is_template_key("onboarding/welcome")
    assert validate_attribute_name("plan") == "plan"
    assert SendJob(email="a@example.com", template="welcome", source="s", step="w").step == "w"
    assert build_message(_envelope(), text="t", html="<p>t</p>")["List-Id"]
    assert parse_duration("2d") == 2 * 86400
    assert SendWindow(days=["mon"], start="09:00", end="17:00").start == "09:00"
    assert Condition.parse("plan in pro,team").values == ("pro", "team")


@pytest.mark.parametrize(
    "refused",
    [
        lambda: validate_name("vip\n"),
        lambda: validate_attribute_name("plan\n"),
        lambda: normalise_email("ann\n@example.com"),
        lambda: SendJob(email="a@example.com", template="welcome", source="s", step="w\n"),
        lambda: build_message(_envelope(send_id="abc123\n"), text="t", html="t"),
        lambda: build_message(_envelope(list_id="onboarding.acme.test\n"), text="t", html="t"),
        lambda: build_message(_envelope(unsubscribe_url="https://api.acme.test/u/t\n"), text="t", html="t"),
        lambda: SendWindow(days=["mon"], start="09:00\n", end="17:00"),
    ],
    ids=["tag", "attribute", "email", "step", "send-id", "list-id", "unsubscribe-url", "send-window"],
)
def test_a_trailing_newline_is_refused(refused: Any) -> None:
    with pytest.raises((ValueError, ValidationError, InvalidInput)):
        refused()


def test_the_predicates_refuse_a_trailing_newline() -> None:
    assert not is_template_key("onboarding/welcome\n")
    assert not is_attribute_name("plan\n")
