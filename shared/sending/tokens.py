"""Signed, expiring, opaque tokens for unsubscribe, resubscribe and sign-up confirmation links.

A token names the subscriber and the mail it came from (source, template, send id, topic),
its purpose and its expiry. It is encrypted and then authenticated, so a URL in a log or a
browser history reveals no address:

    token = base64url( version | nonce(16) | ciphertext | tag(16) )
    keystream block i = HMAC-SHA256(k_enc, nonce | i)        (HMAC as a PRF in counter mode)
    tag = HMAC-SHA256(k_mac, version | nonce | ciphertext)[:16]

``k_enc`` and ``k_mac`` are derived from the secret in Secrets Manager. The tag is checked
in constant time before anything is decrypted; only the standard library is needed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import time
from dataclasses import dataclass
from typing import Literal

from shared.core.errors import FieldProblem, InvalidInput

VERSION = b"\x01"
NONCE_BYTES = 16
TAG_BYTES = 16
MIN_SECRET_BYTES = 16
MAX_TOKEN_CHARS = 1024

Purpose = Literal["unsubscribe", "resubscribe", "confirm"]
_PURPOSE_CODES: dict[str, Purpose] = {"u": "unsubscribe", "r": "resubscribe", "c": "confirm"}
_CODES: dict[str, str] = {purpose: code for code, purpose in _PURPOSE_CODES.items()}


class InvalidToken(InvalidInput):
    """Malformed, tampered, for another purpose, or signed with another key."""

    refusal = "this link is not valid"  # what the page says; each kind of refusal says its own

    def __init__(self) -> None:
        super().__init__(self.refusal, [FieldProblem("token", self.refusal)])


class ExpiredToken(InvalidToken):
    refusal = "this link has expired"


@dataclass(frozen=True)
class TokenClaims:
    email: str
    source: str
    template: str = ""
    send_id: str = ""  # the mail's send id; in a confirm link, the id of the sign-up it confirms
    purpose: Purpose = "unsubscribe"
    expires_at: int = 0  # epoch seconds
    topic: str = ""  # the topic of the mail (its one-click unsubscribe leaves only that topic)


def _keys(secret: str) -> tuple[bytes, bytes]:
    raw = secret.encode()
    if len(raw) < MIN_SECRET_BYTES:
        raise ValueError(f"the token secret must be at least {MIN_SECRET_BYTES} bytes")
    enc = hmac.new(raw, b"mailstep/token/v1/encrypt", hashlib.sha256).digest()
    mac = hmac.new(raw, b"mailstep/token/v1/authenticate", hashlib.sha256).digest()
    return enc, mac


def _keystream(key: bytes, nonce: bytes, length: int) -> bytes:
    blocks = []
    for counter in range((length + 31) // 32):
        blocks.append(hmac.new(key, nonce + counter.to_bytes(4, "big"), hashlib.sha256).digest())
    return b"".join(blocks)[:length]


def _xor(data: bytes, stream: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(data, stream, strict=True))


def issue(claims: TokenClaims, secret: str, *, ttl_seconds: int, now: float | None = None) -> str:
    """A token for ``claims`` valid for ``ttl_seconds`` from ``now``."""
    expires = int((time.time() if now is None else now) + ttl_seconds)
    payload = {
        "e": claims.email,
        "s": claims.source,
        "p": _CODES[claims.purpose],
        "x": expires,
    }
    if claims.template:
        payload["t"] = claims.template
    if claims.send_id:
        payload["m"] = claims.send_id
    if claims.topic:
        payload["o"] = claims.topic
    plain = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
    enc_key, mac_key = _keys(secret)
    nonce = os.urandom(NONCE_BYTES)
    cipher = _xor(plain, _keystream(enc_key, nonce, len(plain)))
    tag = hmac.new(mac_key, VERSION + nonce + cipher, hashlib.sha256).digest()[:TAG_BYTES]
    return base64.urlsafe_b64encode(VERSION + nonce + cipher + tag).rstrip(b"=").decode("ascii")


def verify(token: str, secret: str, *, purpose: Purpose, now: float | None = None) -> TokenClaims:
    """The claims of a genuine, unexpired token for ``purpose``; raises InvalidToken or
    ExpiredToken otherwise."""
    if not isinstance(token, str) or not token or len(token) > MAX_TOKEN_CHARS:
        raise InvalidToken()
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (binascii.Error, ValueError):
        raise InvalidToken() from None
    if len(raw) <= 1 + NONCE_BYTES + TAG_BYTES or raw[:1] != VERSION:
        raise InvalidToken()
    nonce = raw[1 : 1 + NONCE_BYTES]
    cipher, tag = raw[1 + NONCE_BYTES : -TAG_BYTES], raw[-TAG_BYTES:]
    enc_key, mac_key = _keys(secret)
    expected = hmac.new(mac_key, VERSION + nonce + cipher, hashlib.sha256).digest()[:TAG_BYTES]
    if not hmac.compare_digest(tag, expected):
        raise InvalidToken()
    try:
        payload = json.loads(_xor(cipher, _keystream(enc_key, nonce, len(cipher))))
        claims = TokenClaims(
            email=str(payload["e"]),
            source=str(payload["s"]),
            template=str(payload.get("t", "")),
            send_id=str(payload.get("m", "")),
            purpose=_PURPOSE_CODES[payload["p"]],
            expires_at=int(payload["x"]),
            topic=str(payload.get("o", "")),
        )
    except (ValueError, KeyError, TypeError):
        raise InvalidToken() from None
    if claims.purpose != purpose:
        raise InvalidToken()
    if claims.expires_at <= (time.time() if now is None else now):
        raise ExpiredToken()
    return claims
