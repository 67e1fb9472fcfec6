"""The SES v2 adapter: sends one raw MIME message and turns every outcome into a result.

Raw content is used so every header survives (List-Unsubscribe, List-Id, the send id).
Errors are classified here and nowhere else (docs/sending.md):

- ``retryable``: throttling of the sending rate, 5xx, timeouts, connection errors. Nothing was
  accepted; try again within seconds (the send queue's visibility timeout is the backoff).
- ``rejected``: permanent for this message (MessageRejected, an invalid address; in the SES
  sandbox, a recipient that is not a verified identity).
- ``account``: the account cannot send at all (AccountSuspended, missing permission or
  configuration set). Nothing was sent; the job is retried and ends in the dead-letter queue
  for a redrive once the account is fixed.

Three refusals mean "not yet", never "failed": nothing was sent and the same mail goes out
later by itself (:data:`HOLD_STATUSES`; docs/sending.md, "Held, not failed"):

- ``paused``: sending is paused for the configuration set the send names (the reputation
  guardrail's pause, docs/reputation.md) or for the whole account. SES v2 answers with
  ``SendingPausedException``; v1's ``ConfigurationSetSendingPausedException`` and
  ``AccountSendingPausedException`` count the same (:data:`PAUSED_CODES`).
- ``unverified``: the sending identity is not verified yet (a new domain whose DKIM records
  are not seen yet). SES answers ``MessageRejected`` with "Email address is not verified. The
  following identities failed the check in region REGION: identity, ..." (re:Post knowledge
  center "ses-554-400-message-rejected-error"; SES Developer Guide "Amazon SES email sending
  errors"). It is "not yet" only when a failed identity is the sender (its address or its
  domain) or none is named; a failed recipient alone is the sandbox refusing that recipient
  (``rejected``).
- ``daily_quota``: the rolling 24-hour quota is spent. SES answers a throttling error whose
  message includes "Daily message quota exceeded" (SES Developer Guide, "Errors related to the
  sending quotas for your Amazon SES account"); unlike the rate throttle it frees capacity only
  as the sends of the last 24 hours age out. Its code is a throttling code, which botocore's
  standard retry mode retries (four more calls, about 7 s of backoff in all, for a refusal that
  holds for hours): :func:`final_when_quota_spent` ends the call at the first refusal instead.

Marketing and transactional mail name different configuration sets (``transactional``), so a
paused marketing set leaves transactional mail going.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)

from shared.core.aws import client as aws_client

if TYPE_CHECKING:
    from mypy_boto3_sesv2 import SESV2Client


SendStatus = Literal["sent", "retryable", "rejected", "account", "paused", "unverified", "daily_quota"]
HOLD_STATUSES: frozenset[str] = frozenset({"paused", "unverified", "daily_quota"})

RETRYABLE_CODES = frozenset(
    {
        "TooManyRequestsException",
        "Throttling",
        "ThrottlingException",
        "RequestThrottled",
        "ServiceUnavailable",
        "InternalFailure",
        "InternalServiceErrorException",
        "RequestTimeout",
    }
)
REJECTED_CODES = frozenset({"MessageRejected", "BadRequestException", "InvalidParameterValue"})
# v2 SendEmail's paused error, and v1's two (SES API v1 reference, SendRawEmail "Errors")
PAUSED_CODES = frozenset(
    {"SendingPausedException", "ConfigurationSetSendingPausedException", "AccountSendingPausedException"}
)
DAILY_QUOTA_MESSAGE = "daily message quota exceeded"  # SES Developer Guide (module doc), lower case
UNVERIFIED_MESSAGE = "email address is not verified"  # re:Post and the SES Developer Guide
_FAILED_IDENTITIES = re.compile(r"failed the check in region [^:]*:\s*(.+)$", re.IGNORECASE | re.DOTALL)
ACCOUNT_CODES = frozenset(
    {
        "AccountSuspendedException",
        "LimitExceededException",
        "MailFromDomainNotVerifiedException",
        "NotFoundException",
        "AccessDeniedException",
    }
)
TAG_MAX = 256
_TAG_SAFE = re.compile(r"[A-Za-z0-9-]")
_TAG_ESCAPES = {"/": "s", ".": "d", "_": "u"}  # "_x" + 4 hex digits: any other character
_TAG_UNESCAPES = {code: char for char, code in _TAG_ESCAPES.items()}


@dataclass(frozen=True)
class SendResult:
    status: SendStatus
    message_id: str | None = None
    error_code: str | None = None
    detail: str | None = None


def encode_tag_value(value: str) -> str:
    """Reversible encoding into SES's tag charset (letters, digits, ``_``, ``-``).

    Letters, digits and ``-`` are kept; ``_`` starts an escape: ``_s`` is ``/``, ``_d`` is
    ``.``, ``_u`` is ``_`` and ``_xHHHH`` any other character. So
    ``onboarding/welcome`` -> ``onboarding_swelcome``; ``spring.sale`` -> ``spring_dsale``.
    """
    out = []
    for char in value:
        if _TAG_SAFE.match(char):
            out.append(char)
        elif char in _TAG_ESCAPES:
            out.append(f"_{_TAG_ESCAPES[char]}")
        else:
            out.append(f"_x{ord(char):04x}" if ord(char) <= 0xFFFF else "_x003f")
    encoded = "".join(out)
    if len(encoded) > TAG_MAX:
        raise ValueError(f"tag value longer than {TAG_MAX} characters once encoded")
    return encoded


def decode_tag_value(value: str) -> str:
    """Inverse of :func:`encode_tag_value` (the engagement consumer reads tags with it)."""
    out, i = [], 0
    while i < len(value):
        char = value[i]
        if char != "_":
            out.append(char)
            i += 1
            continue
        code = value[i + 1 : i + 2]
        if code in _TAG_UNESCAPES:
            out.append(_TAG_UNESCAPES[code])
        elif code == "x" and len(value) >= i + 6:
            out.append(chr(int(value[i + 2 : i + 6], 16)))
            i += 4
        else:
            raise ValueError(f"not an encoded tag value: {value[:40]!r}")
        i += 2
    return "".join(out)


def _sender_unverified(message: str, from_email: str) -> bool:
    """A "not verified" refusal names the identities that failed; the sender's (its address or
    its domain), or none named, means the sending identity waits for verification."""
    found = _FAILED_IDENTITIES.search(message)
    if found is None:
        return True
    failed = {part.strip().strip(".").lower() for part in found.group(1).split(",")}
    sender = from_email.strip().lower()
    return not from_email or sender in failed or sender.rsplit("@", 1)[-1] in failed


def classify(exc: Exception, from_email: str = "") -> SendResult:
    """An exception from SendEmail -> a result (never raises). ``from_email``: the sending
    address, to tell an unverified sender from a sandbox-refused recipient."""
    if isinstance(
        exc, ConnectTimeoutError | ReadTimeoutError | EndpointConnectionError | ConnectionClosedError
    ):
        return SendResult("retryable", error_code=type(exc).__name__, detail="network error or timeout")
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        full = str(error.get("Message", ""))
        message = full[:300]
        if DAILY_QUOTA_MESSAGE in full.lower():
            return SendResult("daily_quota", error_code=code, detail=message)
        if code == "MessageRejected" and UNVERIFIED_MESSAGE in full.lower():
            if _sender_unverified(full, from_email):
                return SendResult("unverified", error_code=code, detail=message)
            return SendResult("rejected", error_code=code, detail=message)
        if code in RETRYABLE_CODES or status >= 500:
            return SendResult("retryable", error_code=code, detail=message)
        if code in PAUSED_CODES:
            return SendResult("paused", error_code=code, detail=message)
        if code in ACCOUNT_CODES:
            return SendResult("account", error_code=code, detail=message)
        if code in REJECTED_CODES or 400 <= status < 500:
            return SendResult("rejected", error_code=code, detail=message)
        return SendResult("retryable", error_code=code or "unknown", detail=message)
    return SendResult("retryable", error_code=type(exc).__name__, detail="unexpected error")


NEEDS_RETRY = "needs-retry.sesv2.SendEmail"  # botocore asks its handlers before each retry


def final_when_quota_spent(ses: SESV2Client) -> Callable[..., None]:
    """A botocore ``needs-retry`` handler that raises the spent-quota refusal as the call's error
    at once. botocore raises any exception a handler raises out of the call; its own retry
    handler still decides for every other error (the rate throttle keeps its backoff)."""

    def final(response: tuple[Any, dict[str, Any]] | None = None, operation: Any = None, **_: Any) -> None:
        parsed = response[1] if response is not None else {}
        error = parsed.get("Error") or {}
        if DAILY_QUOTA_MESSAGE in str(error.get("Message", "")).lower():
            # the class botocore raises for the code (boto3-stubs types from_code's result as an instance)
            modeled = cast("type[ClientError]", ses.exceptions.from_code(str(error.get("Code", ""))))
            raise modeled(parsed, operation.name)  # type: ignore[arg-type]

    return final


class SesSender:
    """``send_raw`` is the one call that puts mail on the wire."""

    def __init__(
        self,
        configuration_set: str = "",
        client: SESV2Client | None = None,
        transactional_configuration_set: str = "",
    ) -> None:
        self.configuration_set = configuration_set  # marketing mail
        # transactional mail (empty: the marketing set's)
        self.transactional_configuration_set = transactional_configuration_set or configuration_set
        self._client = client

    @property
    def client(self) -> SESV2Client:
        if self._client is not None:  # a client of the caller's own, as given
            return self._client
        ses = aws_client("sesv2")
        # once per client (botocore keeps one handler per unique id)
        ses.meta.events.register(NEEDS_RETRY, final_when_quota_spent(ses), unique_id=NEEDS_RETRY)
        return ses

    def send_raw(
        self,
        raw: bytes,
        *,
        from_email: str,
        to_email: str,
        tags: Mapping[str, str],
        transactional: bool = False,
    ) -> SendResult:
        request: dict[str, Any] = {
            "FromEmailAddress": from_email,
            "Destination": {"ToAddresses": [to_email]},
            "Content": {"Raw": {"Data": raw}},
            "EmailTags": [
                {"Name": name, "Value": encode_tag_value(value)} for name, value in tags.items() if value
            ],
        }
        configuration_set = self.transactional_configuration_set if transactional else self.configuration_set
        if configuration_set:
            request["ConfigurationSetName"] = configuration_set
        try:
            response = self.client.send_email(**request)
        except (
            ClientError,
            ConnectTimeoutError,
            ReadTimeoutError,
            EndpointConnectionError,
            ConnectionClosedError,
        ) as exc:
            return classify(exc, from_email)
        return SendResult("sent", message_id=response["MessageId"])
