"""Standard Webhooks v1 signatures (https://www.standardwebhooks.com, spec v1.0.0).

A secret is ``whsec_`` + base64 of :data:`SECRET_BYTES` random bytes. A delivery carries
``webhook-id``, ``webhook-timestamp`` (integer epoch seconds) and ``webhook-signature``:
``v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">``, space-separated when the endpoint
has two secrets (a rotation's 24 hours).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Sequence

SECRET_PREFIX = "whsec_"  # noqa: S105 - the format's prefix, not a secret
SECRET_BYTES = 32  # the spec asks for 24 to 64


class InvalidSecret(ValueError):
    """Not a ``whsec_<base64>`` secret of 24 to 64 bytes."""


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def secret_key(secret: str) -> bytes:
    if not secret.startswith(SECRET_PREFIX):
        raise InvalidSecret("a webhook secret starts with whsec_")
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except binascii.Error as exc:
        raise InvalidSecret("a webhook secret is whsec_ and base64") from exc
    if not 24 <= len(key) <= 64:
        raise InvalidSecret("a webhook secret holds 24 to 64 bytes")
    return key


def signature(secret: str, msg_id: str, timestamp: int, body: str) -> str:
    """``v1,<base64>`` of one secret."""
    content = f"{msg_id}.{timestamp}.{body}".encode()
    digest = hmac.new(secret_key(secret), content, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def headers(secrets_: Sequence[str], msg_id: str, timestamp: int, body: str) -> dict[str, str]:
    """The three Standard Webhooks headers (one signature per secret, space-separated)."""
    if not secrets_:
        raise InvalidSecret("no secret to sign with")
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(signature(s, msg_id, timestamp, body) for s in secrets_),
    }
