"""The cooldown's mailbox key follows only documented provider rules (docs/signup.md)."""

from __future__ import annotations

import pytest

from shared.store.pending import domain_of, mailbox_key


@pytest.mark.parametrize(
    ("address", "mailbox"),
    [
        ("a.d.a@gmail.com", "ada@gmail.com"),  # Gmail ignores dots
        ("A.D.A+news@GoogleMail.com", "ada@gmail.com"),  # googlemail.com is Gmail; case; +tag
        ("Ada+x@Example.com", "ada@example.com"),  # every domain: case and +tag
        ("a.d.a@example.com", "a.d.a@example.com"),  # no documented dot rule: dots count
        ("a.d.a@outlook.com", "a.d.a@outlook.com"),
        ("+tag@gmail.com", "+tag@gmail.com"),  # a local part that starts with + is kept whole
        ("...@gmail.com", "...@gmail.com"),  # only dots: kept
    ],
)
def test_mailbox_key(address: str, mailbox: str) -> None:
    assert mailbox_key(address) == mailbox


def test_the_domain_cap_counts_gmail_and_googlemail_as_one_domain() -> None:
    assert domain_of("x@googlemail.com") == domain_of("y@Gmail.com") == "gmail.com"
    assert domain_of("x@example.com") == "example.com"
