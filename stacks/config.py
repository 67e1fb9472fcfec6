"""Deployment configuration: ``cdk.json`` context keys read into one validated model.

Every key is documented in ``docs/configuration.md``. A bad value fails synthesis with a
message naming the key. Override a key for one run with ``-c mailstep:dataTtlDays=90``
(CLI context values arrive as strings; they are coerced like the JSON values in cdk.json).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from email.utils import parseaddr
from typing import Annotated, Any

from aws_cdk import aws_logs as logs
from constructs import Node
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from shared.core import specs
from shared.core.specs import STACK_NAME
from stacks.warm import warm_throughput

PREFIX = "mailstep:"
# The sender when no fromAddress is set (shared.core.settings.Settings.default_from).
DEFAULT_LOCAL_SENDER = "Mailstep <hello@example.com>"
# A plausible address; SES verifies the real thing when it sends.
EMAIL_RE = re.compile(r"^[^@\s<>()\[\],;:\"]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$")
DOMAIN_RE = re.compile(r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# CloudWatch Logs accepts only these retention periods (days).
RETENTION_DAYS: dict[int, logs.RetentionDays] = {
    1: logs.RetentionDays.ONE_DAY,
    3: logs.RetentionDays.THREE_DAYS,
    5: logs.RetentionDays.FIVE_DAYS,
    7: logs.RetentionDays.ONE_WEEK,
    14: logs.RetentionDays.TWO_WEEKS,
    30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS,
    90: logs.RetentionDays.THREE_MONTHS,
    120: logs.RetentionDays.FOUR_MONTHS,
    150: logs.RetentionDays.FIVE_MONTHS,
    180: logs.RetentionDays.SIX_MONTHS,
    365: logs.RetentionDays.ONE_YEAR,
    400: logs.RetentionDays.THIRTEEN_MONTHS,
    545: logs.RetentionDays.EIGHTEEN_MONTHS,
    731: logs.RetentionDays.TWO_YEARS,
    1096: logs.RetentionDays.THREE_YEARS,
    1827: logs.RetentionDays.FIVE_YEARS,
    2192: logs.RetentionDays.SIX_YEARS,
    2557: logs.RetentionDays.SEVEN_YEARS,
    2922: logs.RetentionDays.EIGHT_YEARS,
    3288: logs.RetentionDays.NINE_YEARS,
    3653: logs.RetentionDays.TEN_YEARS,
}
# Model field -> context key (without the prefix).
KEYS: dict[str, str] = {
    "data_ttl_days": "dataTtlDays",
    "log_retention_days": "logRetentionDays",
    "log_level": "logLevel",
    "api_throttle_rate": "apiThrottleRate",
    "api_throttle_burst": "apiThrottleBurst",
    "from_address": "fromAddress",
    "reply_to": "replyTo",
    "postal_address": "postalAddress",
    "ses_domain": "sesDomain",
    "alarm_email": "alarmEmail",
    "mail_from_subdomain": "mailFromSubdomain",
    "inbound_domain": "inboundDomain",
    "use_existing_identity": "useExistingIdentity",
    "reply_forward_to": "replyForwardTo",
    "stack_name": "stackName",
    "signup_allowed_origins": "signupAllowedOrigins",
    "signup_double_opt_in": "signupDoubleOptIn",
    "signup_single_opt_in_forms": "signupSingleOptInForms",
    "signup_pending_days": "signupPendingDays",
    "signup_cooldown_seconds": "signupCooldownSeconds",
    "signup_domain_cap_per_hour": "signupDomainCapPerHour",
    "signup_domain_held_per_hour": "signupDomainHeldPerHour",
    "signup_source_cap_per_hour": "signupSourceCapPerHour",
    "signup_max_body_bytes": "signupMaxBodyBytes",
    "signup_throttle_rate": "signupThrottleRate",
    "signup_throttle_burst": "signupThrottleBurst",
    "ses_max_send_rate": "sesMaxSendRate",
    "soft_bounce_limit": "softBounceLimit",
    "soft_bounce_window_days": "softBounceWindowDays",
    "reputation_bounce_percent": "reputationBounceRatePercent",
    "reputation_complaint_percent": "reputationComplaintRatePercent",
    "cold_after_days": "coldAfterDays",
    "new_subscriber_cold_after_days": "newSubscriberColdAfterDays",
    "sunset_grace_days": "sunsetGraceDays",
    "warmup": "warmup",
    "expected_peak_mails_per_second": "expectedPeakMailsPerSecond",
    "local": "local",
}
# Context keys passed to the sign-up function as its settings (shared.core.settings) when set.
SIGNUP_SETTINGS = (
    "signup_allowed_origins",
    "signup_double_opt_in",
    "signup_single_opt_in_forms",
    "signup_pending_days",
    "signup_cooldown_seconds",
    "signup_domain_cap_per_hour",
    "signup_domain_held_per_hour",
    "signup_source_cap_per_hour",
    "signup_max_body_bytes",
)
ORIGIN_RE = re.compile(r"^https?://[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?$")
FORM_ID_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


class ConfigError(ValueError):
    """A context value breaks its rule; the message names the key."""


def _describe(err: dict[str, Any]) -> str:
    if not err["loc"]:  # a rule across keys names its keys in the message
        return str(err["msg"]).removeprefix("Value error, ")
    field = str(err["loc"][0])
    return f"context key {PREFIX}{KEYS.get(field, field)}: {err['msg']} (got {err.get('input')!r})"


def _optional_email(value: str) -> str:
    value = value.strip()
    if value and not EMAIL_RE.fullmatch(value):
        raise ValueError("must be an email address")
    return value


def _comma_separated(value: Any) -> Any:
    if isinstance(value, str):  # -c mailstep:signupAllowedOrigins=https://a.test,https://b.test
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


def _each_matching(pattern: re.Pattern[str], problem: str) -> AfterValidator:
    """Every item must match ``pattern`` (else: ``'<item>' <problem>``); repeats are dropped."""

    def check(value: tuple[str, ...]) -> tuple[str, ...]:
        for item in value:
            if not pattern.fullmatch(item):
                raise ValueError(f"{item!r} {problem}")
        return tuple(dict.fromkeys(value))

    return AfterValidator(check)


def _sender(value: str) -> str:
    name, address = parseaddr(value)
    if not address or "\r" in value or "\n" in value:
        raise ValueError("must be an address or 'Name <address>'")
    _optional_email(address)
    return value.strip()


def _domain(value: str) -> str:
    domain = value.strip().lower()
    if not DOMAIN_RE.fullmatch(domain):
        raise ValueError("must be a domain name such as mail.example.com")
    return domain


def _unless_empty(check: Callable[[str], str]) -> AfterValidator:
    """An empty value means "not set" and stays ""; any other must pass ``check``."""
    return AfterValidator(lambda value: check(value) if value else "")


SenderAddress = Annotated[str, _unless_empty(_sender)]
DomainName = Annotated[str, _unless_empty(_domain)]
# A list of names (or one comma-separated string) of which each must match its pattern.
Origins = Annotated[
    tuple[str, ...],
    BeforeValidator(_comma_separated),
    _each_matching(ORIGIN_RE, "is not an origin: scheme://host[:port], lower case, no path"),
]
FormIds = Annotated[
    tuple[str, ...],
    BeforeValidator(_comma_separated),
    _each_matching(FORM_ID_RE, "is not a form id ([a-z0-9][a-z0-9_.-]*, at most 64)"),
]


class MailstepConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    data_ttl_days: int = Field(default=180, ge=1, le=3650)
    log_retention_days: int = 90
    log_level: str = "INFO"
    api_throttle_rate: float = Field(default=50.0, gt=0, le=10000)
    api_throttle_burst: int = Field(default=100, ge=1, le=5000)
    # Used by sending (sequences, broadcasts): the default sender and CAN-SPAM footer.
    from_address: SenderAddress = ""
    reply_to: str = ""
    postal_address: str = Field(default="", max_length=500)
    # Used by sending: the SES identity (domain) mail is sent from.
    ses_domain: DomainName = ""
    # Used by alarms: who is told about dead letters, bounces and errors.
    alarm_email: str = ""
    # Used by engagement: custom MAIL FROM subdomain of sesDomain (e.g. "mail"); empty = SES default.
    mail_from_subdomain: str = Field(default="", pattern=r"^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)?$")
    # Used by replies: the domain whose inbound mail SES receives (MX record); empty = replies off.
    inbound_domain: str = Field(default="", pattern=r"^([a-z0-9-]+(\.[a-z0-9-]+)+)?$")
    # Used by engagement: the sesDomain identity already exists (verified outside this stack),
    # so the stack must not create it (CloudFormation would fail on the existing identity).
    use_existing_identity: bool = False
    # Used by replies: forward every recorded reply to this address (REPLY_FORWARD_TO); empty = no.
    reply_forward_to: str = ""
    # The CloudFormation stack name; a second copy in one account/region needs another name.
    # Sequence state machines are named "<stackName>-seq-<sequence id>".
    stack_name: str = Field(default=STACK_NAME, pattern=r"^[A-Za-z][A-Za-z0-9-]{0,63}$")
    # Used by sign-up (docs/signup.md): the origins a form may redirect to and that get CORS
    # (a list, or comma-separated); double opt-in; the forms that subscribe directly.
    signup_allowed_origins: Origins = ()
    signup_double_opt_in: bool = True
    signup_single_opt_in_forms: FormIds = ()
    signup_pending_days: int = Field(default=7, ge=1, le=60)
    signup_cooldown_seconds: int = Field(default=3600, ge=0, le=7 * 86400)
    signup_domain_cap_per_hour: int = Field(default=1000, ge=1, le=1_000_000)
    signup_domain_held_per_hour: int = Field(default=100, ge=0, le=1_000_000)
    signup_source_cap_per_hour: int = Field(default=100, ge=1, le=1_000_000)
    signup_max_body_bytes: int = Field(default=8 * 1024, ge=512, le=64 * 1024)
    # Used by engagement (docs/hygiene.md): soft-bounced mails within days that suppress an address.
    soft_bounce_limit: int = Field(default=3, ge=2, le=100)
    soft_bounce_window_days: int = Field(default=30, ge=1, le=365)
    # Used by the reputation guardrail (docs/reputation.md): the marketing configuration set is
    # paused above these rates (percent), below SES's review (5 %, 0.1 %) and pause (10 %, 0.5 %).
    reputation_bounce_percent: float = Field(default=4.0, gt=0, lt=10)
    reputation_complaint_percent: float = Field(default=0.08, gt=0, lt=0.5)
    # Used by list hygiene (docs/hygiene.md): days without a human open or click that make a
    # subscriber cold (the second while they are younger than the first), and the days a cold
    # subscriber has before the sunset unsubscribes them.
    cold_after_days: int = Field(default=90, ge=7, le=730)
    new_subscriber_cold_after_days: int = Field(default=30, ge=7, le=730)  # at most cold_after_days
    sunset_grace_days: int = Field(default=30, ge=1, le=365)
    # Used by the API: API Gateway throttling of POST /v1/signup alone (requests/s, burst).
    signup_throttle_rate: float = Field(default=5.0, gt=0, le=10000)
    signup_throttle_burst: int = Field(default=10, ge=1, le=5000)  # requests at once above the rate
    # Used by broadcasts: the account's SES maximum send rate (mails/s) the broadcast workers are
    # sized for (their concurrency: shared.core.specs.broadcast_workers). `mailstep doctor`
    # compares it with the account's; a higher rate needs a deploy with the new value.
    ses_max_send_rate: float = Field(default=14.0, ge=1, le=100_000)
    # Used by sending (docs/sending.md, "Warm-up"): the sending domain's daily volumes while it is
    # new: "auto" (the default ramp when the stack creates the sesDomain identity, off for an
    # existing one), "default", "off", or the volumes of day 1, 2, ... ("200,400,800").
    warmup: str = "auto"
    # Used by storage (docs/deploy.md, "Warm tables for a known peak"): the mails per second of
    # an expected peak the tables are pre-warmed for (their WarmThroughput, paid once per
    # increase); 0 = none, the tables scale on demand from a new table's throughput.
    expected_peak_mails_per_second: float = Field(default=0.0, ge=0, le=100_000)
    # Synthesized for the local runtime and the tests (local_aws.artifact sets it), not for a
    # deployment: the sending identity may stay unset (the built-in default sender is used).
    local: bool = False

    @field_validator("log_retention_days")
    @classmethod
    def _retention(cls, value: int) -> int:
        if value not in RETENTION_DAYS:
            raise ValueError(f"must be one of {sorted(RETENTION_DAYS)} (CloudWatch Logs retention periods)")
        return value

    @field_validator("warmup")
    @classmethod
    def _warmup(cls, value: str) -> str:
        text = value.strip().lower()
        if text != "auto":
            specs.parse_warmup(text)  # ValueError: the day that is wrong
        return text

    def warmup_schedule(self) -> str:
        """The schedule the mail functions get (``off``: none): auto ramps a domain this stack
        creates the identity of, not an existing one nor the built-in sender."""
        if self.warmup == "auto":
            new_domain = bool(self.ses_domain) and not self.use_existing_identity
            return specs.warmup_text(specs.DEFAULT_WARMUP if new_domain else ())
        return specs.warmup_text(specs.parse_warmup(self.warmup))

    @field_validator("log_level")
    @classmethod
    def _level(cls, value: str) -> str:
        if value.upper() not in LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}")
        return value.upper()

    @field_validator("reply_to", "alarm_email", "reply_forward_to")
    @classmethod
    def _email(cls, value: str) -> str:
        return _optional_email(value)

    @field_validator("postal_address")
    @classmethod
    def _postal(cls, value: str) -> str:
        if any(ord(c) < 32 and c != "\n" for c in value):
            raise ValueError("must not contain control characters other than newlines")
        return value.strip()

    @model_validator(mode="after")
    def _sender_on_domain(self) -> MailstepConfig:
        if self.from_address and self.ses_domain:
            domain = parseaddr(self.from_address)[1].rsplit("@", 1)[1].lower()
            if domain != self.ses_domain and not domain.endswith("." + self.ses_domain):
                raise ValueError(
                    f"context key {PREFIX}fromAddress: {domain!r} is not on "
                    f"{PREFIX}sesDomain {self.ses_domain!r}"
                )
        return self

    @model_validator(mode="after")
    def _sending_identity(self) -> MailstepConfig:
        if not self.local and not (self.ses_domain or self.from_address):
            raise ValueError(
                f"a deployment needs a sending identity: set context key {PREFIX}sesDomain (the domain "
                f"SES sends from; the stack creates and verifies its identity) and {PREFIX}fromAddress "
                f"(the default sender, an address on that domain), e.g. cdk deploy -c "
                f"{PREFIX}sesDomain=example.com -c '{PREFIX}fromAddress=News <news@example.com>' "
                f"(docs/deploy.md); {PREFIX}fromAddress alone uses an identity you verified in SES"
            )
        return self

    @property
    def sending_domain(self) -> str:
        """The domain mail is sent from: ``sesDomain``, else ``fromAddress``'s, else (local only)
        the built-in default sender's. Sending is granted for From addresses on it."""
        if self.ses_domain:
            return self.ses_domain
        address = parseaddr(self.from_address or DEFAULT_LOCAL_SENDER)[1]
        return address.rsplit("@", 1)[1].lower()

    @model_validator(mode="after")
    def _cold_after(self) -> MailstepConfig:  # a newcomer's cold window is the shorter one
        if self.new_subscriber_cold_after_days > self.cold_after_days:
            raise ValueError(
                f"context key {PREFIX}newSubscriberColdAfterDays: {self.new_subscriber_cold_after_days} is "
                f"more than {PREFIX}coldAfterDays ({self.cold_after_days}); new subscribers turn cold sooner"
            )
        return self

    @model_validator(mode="after")
    def _existing_identity(self) -> MailstepConfig:  # the stack neither creates it nor sets MAIL FROM
        if self.use_existing_identity and not self.ses_domain:
            raise ValueError(
                f"context key {PREFIX}useExistingIdentity: needs {PREFIX}sesDomain (the identity to use)"
            )
        if self.use_existing_identity and self.mail_from_subdomain:
            raise ValueError(
                f"context key {PREFIX}mailFromSubdomain: the MAIL FROM domain is set on the identity, "
                f"which {PREFIX}useExistingIdentity leaves to you; configure it on the existing identity"
            )
        return self

    def warm_throughput(self) -> dict[str, tuple[int, int]]:
        """Table id -> (write, read) warm throughput for ``expectedPeakMailsPerSecond``."""
        return warm_throughput(self.expected_peak_mails_per_second)

    @property
    def log_retention(self) -> logs.RetentionDays:
        return RETENTION_DAYS[self.log_retention_days]

    def mail_settings(self) -> dict[str, str]:
        """Settings fields (``shared.core.settings``) of functions that send mail; unset keys: defaults."""
        values = {
            "default_from": self.from_address,
            "default_reply_to": self.reply_to,
            "postal_address": self.postal_address,
        }
        return {field: value for field, value in values.items() if value}

    def signup_settings(self) -> dict[str, str]:
        """Settings fields of the sign-up function that the deployment sets (the others keep
        their defaults from ``shared.core.settings``), as environment values."""
        return self.set_settings(SIGNUP_SETTINGS)

    def set_settings(self, names: Iterable[str]) -> dict[str, str]:
        """Those of ``names`` (settings fields) that the deployment sets, as environment values."""
        values: dict[str, str] = {}
        for name in names:
            if name not in self.model_fields_set:
                continue
            value = getattr(self, name)
            if isinstance(value, tuple):
                values[name] = ",".join(value)
            elif isinstance(value, bool):
                values[name] = "true" if value else "false"
            else:
                values[name] = str(value)
        return {name: value for name, value in values.items() if value}

    @classmethod
    def from_context(cls, node: Node) -> MailstepConfig:
        unknown = sorted(
            k
            for k in node.get_all_context()
            if k.startswith(PREFIX) and k.removeprefix(PREFIX) not in KEYS.values()
        )
        if unknown:
            raise ConfigError(
                f"unknown context keys {unknown}; known: {sorted(PREFIX + k for k in KEYS.values())}"
            )
        values = {f: node.try_get_context(PREFIX + key) for f, key in KEYS.items()}
        return cls.parse({f: v for f, v in values.items() if v is not None})

    @classmethod
    def parse(cls, values: dict[str, Any]) -> MailstepConfig:
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            problems = "; ".join(_describe(dict(err)) for err in exc.errors())
            raise ConfigError(f"invalid mailstep configuration: {problems}") from None
