"""Unsubscribe tokens: genuine ones verify; tampered, foreign, expired or repurposed ones do not."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.sending.tokens import ExpiredToken, InvalidToken, TokenClaims, issue, verify

SECRET = "a-test-secret-with-enough-bytes"
CLAIMS = TokenClaims(
    email="jane@example.com", source="onboarding", template="onboarding/welcome", send_id="s1"
)


def test_a_genuine_token_verifies_and_carries_its_claims():
    token = issue(CLAIMS, SECRET, ttl_seconds=60, now=1000)
    claims = verify(token, SECRET, purpose="unsubscribe", now=1059)
    assert (claims.email, claims.source, claims.template, claims.send_id, claims.expires_at) == (
        "jane@example.com",
        "onboarding",
        "onboarding/welcome",
        "s1",
        1060,
    )
    assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_expired_tokens_are_refused():
    token = issue(CLAIMS, SECRET, ttl_seconds=60, now=1000)
    with pytest.raises(ExpiredToken):
        verify(token, SECRET, purpose="unsubscribe", now=1060)


def test_a_token_for_one_purpose_does_not_work_for_the_other():
    token = issue(CLAIMS, SECRET, ttl_seconds=60)
    with pytest.raises(InvalidToken):
        verify(token, SECRET, purpose="resubscribe")


def test_another_key_is_refused():
    with pytest.raises(InvalidToken):
        verify(issue(CLAIMS, SECRET, ttl_seconds=60), "another-secret-of-enough-bytes", purpose="unsubscribe")


@settings(max_examples=200, deadline=None)
@given(position=st.integers(min_value=0), bit=st.integers(min_value=0, max_value=7))
def test_any_flipped_bit_is_refused(position, bit):
    token = issue(CLAIMS, SECRET, ttl_seconds=60)
    raw = bytearray(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    raw[position % len(raw)] ^= 1 << bit
    tampered = base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()
    with pytest.raises(InvalidToken):
        verify(tampered, SECRET, purpose="unsubscribe")


@pytest.mark.parametrize(
    "junk", ["", "x", "!!!!", "A" * 2000, "AQ", base64.urlsafe_b64encode(b"\x01" * 40).decode()]
)
def test_junk_is_refused(junk):
    with pytest.raises(InvalidToken):
        verify(junk, SECRET, purpose="unsubscribe")


def test_the_address_is_not_readable_in_the_token_and_tokens_differ():
    one, two = issue(CLAIMS, SECRET, ttl_seconds=60), issue(CLAIMS, SECRET, ttl_seconds=60)
    assert one != two
    for token in (one, two):
        decoded = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        assert b"jane" not in decoded and b"example" not in decoded and b"onboarding" not in decoded


def test_short_secrets_are_refused():
    with pytest.raises(ValueError):
        issue(CLAIMS, "short", ttl_seconds=60)
