"""How SES's refusals are read (``shared.sending.sender.classify``): "not yet" is never "failed".

Each code and message is one SES documents (or one v1 has for the same state): the sources are
in the module doc of ``shared/sending/sender.py`` and in docs/local-runtime.md's beliefs.
"""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from shared.sending.sender import classify

FROM = "hello@news.acme.test"


def refusal(code: str, message: str, status: int = 400) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "SendEmail",
    )


@pytest.mark.parametrize(
    "code",
    ["SendingPausedException", "ConfigurationSetSendingPausedException", "AccountSendingPausedException"],
)
def test_every_paused_code_is_paused(code: str) -> None:
    assert classify(refusal(code, "Sending is paused for this account."), FROM).status == "paused"


@pytest.mark.parametrize(
    ("failed", "status"),
    [
        ("news.acme.test", "unverified"),  # the sending domain waits for its DKIM records
        ("hello@news.acme.test", "unverified"),  # the sending address
        ("HELLO@News.Acme.Test", "unverified"),  # SES may spell it in other case
        ("reader@example.com", "rejected"),  # the sandbox refusing a recipient: this mail only
        ("reader@example.com, news.acme.test", "unverified"),
    ],
)
def test_not_verified_is_not_yet_for_the_sender_and_rejected_for_a_sandbox_recipient(
    failed: str, status: str
) -> None:
    message = (
        f"Email address is not verified. The following identities failed the check in region X: {failed}"
    )
    result = classify(refusal("MessageRejected", message), FROM)
    assert result.status == status
    assert result.error_code == "MessageRejected"


def test_not_verified_naming_no_identity_holds() -> None:
    assert classify(refusal("MessageRejected", "Email address is not verified."), FROM).status == "unverified"


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("ThrottlingException", 400),  # the SES guide's name
        ("Throttling", 400),  # v1's
        ("TooManyRequestsException", 429),  # v2's throttle
        ("LimitExceededException", 400),  # what the local SES answered before
    ],
)
def test_a_spent_daily_quota_is_a_window_whatever_the_code(code: str, status: int) -> None:
    result = classify(refusal(code, "Daily message quota exceeded.", status), FROM)
    assert result.status == "daily_quota"


def test_the_rate_throttle_stays_a_short_retry_and_other_rejections_stay_permanent() -> None:
    assert classify(
        refusal("TooManyRequestsException", "Maximum sending rate exceeded.", 429), FROM
    ).status == ("retryable")
    assert classify(refusal("MessageRejected", "Email address is invalid."), FROM).status == "rejected"
    assert classify(refusal("AccountSuspendedException", "suspended"), FROM).status == "account"
