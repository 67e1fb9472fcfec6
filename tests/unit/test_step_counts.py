"""Which mails count per sequence step, and how a step's counts are read back (shared.store.stats)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from shared.store.stats import send_counters, sequence_step, step_attribute, step_counts


@pytest.mark.parametrize(
    ("step", "code"),
    [
        ("S1:run-1", "S1"),
        ("S3T1E2:0123456789abcdef", "S3T1E2"),
        ("broadcast", None),  # a broadcast's mail
        ("t1764230400000000000", None),  # a test send
        ("welcome", None),  # the demo's, a sign-up's
        ("S1", None),  # a step code alone is not a sequence mail's send-once step
        ("s1:run-1", None),
        (None, None),
    ],
)
def test_only_a_sequence_mail_has_a_step_code(step: str | None, code: str | None) -> None:
    assert sequence_step(step) == code


def test_a_sequence_send_adds_its_step_to_the_sequence_item_and_no_item_more() -> None:
    plain = send_counters("t", {("onboarding", "onboarding/welcome"): 1}, at="2026-11-27T10:00:00.000Z")
    stepped = send_counters(
        "t", {("onboarding", "onboarding/welcome"): 1}, at="2026-11-27T10:00:00.000Z", step="S3:run-1"
    )
    assert len(plain) == len(stepped) == 3  # the sequence's, the template's and the day's items
    names = [sorted(a["Update"]["ExpressionAttributeNames"].values()) for a in stepped]
    assert names[0] == ["S3.sent", "send"] and names[1] == names[2] == ["send"]


def test_step_counts_are_read_from_the_summed_item_and_nothing_else() -> None:
    item = {
        "send": Decimal(9),
        "open_unique": Decimal(4),
        "S1.sent": Decimal(5),
        "S1.opened": Decimal(3),
        "S3T1.clicked": Decimal(1),
        "updated_at": "2026-11-27T10:00:00.000Z",
        "x.sent": Decimal(7),  # not a step code
    }
    assert step_counts(item) == {"S1": {"sent": 5, "opened": 3}, "S3T1": {"clicked": 1}}
    assert step_counts(None) == {}
    assert step_attribute("S2", "open") == "S2.opened"
