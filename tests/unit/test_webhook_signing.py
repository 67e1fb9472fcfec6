"""Standard Webhooks signatures, checked by an independent implementation (``standardwebhooks``)."""

from __future__ import annotations

import base64
import time

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from shared.webhooks import signing

BODY = '{"data":{"email":"ann@example.com"},"type":"subscriber.created"}'


def test_new_secret_is_whsec_and_base64_of_at_least_24_bytes() -> None:
    secret = signing.new_secret()
    assert secret.startswith("whsec_")
    assert len(base64.b64decode(secret.removeprefix("whsec_"))) >= 24
    assert signing.new_secret() != secret


def test_standardwebhooks_verifies_our_signature() -> None:
    # Given a secret and a message
    secret = signing.new_secret()
    now = int(time.time())
    # When it is signed
    headers = signing.headers([secret], "msg_1", now, BODY)
    # Then the reference implementation accepts it, and refuses a changed body or id
    assert Webhook(secret).verify(BODY, headers) == {
        "data": {"email": "ann@example.com"},
        "type": "subscriber.created",
    }
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(BODY.replace("ann", "bob"), headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(BODY, {**headers, "webhook-id": "msg_2"})


def test_rotation_signs_with_both_secrets_each_verifies() -> None:
    old, new = signing.new_secret(), signing.new_secret()
    headers = signing.headers([new, old], "msg_1", int(time.time()), BODY)
    assert len(headers["webhook-signature"].split(" ")) == 2
    assert all(s.startswith("v1,") for s in headers["webhook-signature"].split(" "))
    Webhook(old).verify(BODY, headers)
    Webhook(new).verify(BODY, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(signing.new_secret()).verify(BODY, headers)


@pytest.mark.parametrize(
    "bad", ["", "abc", "whsec_", "whsec_!!!", "whsec_" + base64.b64encode(b"short").decode()]
)
def test_malformed_secrets_are_refused(bad: str) -> None:
    with pytest.raises(signing.InvalidSecret):
        signing.signature(bad, "msg_1", 1, BODY)
