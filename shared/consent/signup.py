"""Public sign-up (``POST /v1/signup``): parse and validate the request, then do the one
thing its address calls for, with the same answer AND the same work whatever that was
(one read, one conditional transaction, one send job: its time tells nothing either).

- honeypot field filled -> nothing is read, written or sent;
- its client address (API Gateway's ``sourceIp``) sent ``source_cap_per_hour`` sign-ups this
  hour -> nothing more is read, written or sent; the answer (429) says when to try again;
- suppressed (its ``SUPPRESSION`` item, profile or not), erased (its erase tombstone, no
  profile), already subscribed, its mailbox within the cooldown -> no mail, no change (the
  admission transaction's conditions refuse it);
- single opt-in form -> subscribed at once, consent recorded with method ``single``;
- otherwise -> a pending sign-up (``shared.store.pending``) and ONE transactional
  confirmation mail, queued for the sender function (never sent inside the request): the
  send pipeline mails only the live sign-up its job names.

The recipient domain's state of the hour decides the answer and when the mail goes (the same
for every address of the domain, so it tells nothing about one address): under the cap, now;
over it, HELD: the job goes on the queue delayed :data:`HELD_DELAY_S` and the answer says the
mail is delayed and until when; over the held budget too, nothing is written or queued and the
answer (429) asks the reader to try again after the hour.

Counted (``shared.store.stats``): a NEW pending sign-up once its confirmation mail went out
(``signup``, by the send pipeline; a live sign-up mailed again after the cooldown is the
same sign-up), and a single opt-in (``single_opt_in``, in the profile's transaction).

The body is JSON or ``application/x-www-form-urlencoded`` (a plain HTML form), bounded in
size; every problem names its field (:class:`InvalidInput`, a 400).
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from urllib.parse import parse_qs

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator
from pydantic import ValidationError as PydanticValidationError

from shared.consent.context import ConsentContext, normalise_origin
from shared.consent.record import ANONYMOUS, Requester, ip_hash, opt_in
from shared.core import clock
from shared.core.errors import FieldProblem, InvalidInput, PayloadTooLarge
from shared.core.json_input import unique_keys
from shared.core.models import (
    CONTROL_RE,
    SUBSCRIBED,
    Email,
    FirstName,
    invalid_input,
    validate_name,
)
from shared.core.observability import logger, redact_email
from shared.core.topics import MAX_TOPICS, TopicCatalog
from shared.sending.jobs import SendJob
from shared.sending.tokens import TokenClaims, issue
from shared.store.pending import (
    DOUBLE,
    SINGLE,
    DomainMode,
    PendingSignup,
    SignupState,
    domain_of,
)
from shared.store.stats import SIGNUP_SOURCE

SOURCE = SIGNUP_SOURCE  # the send pipeline's source of confirmation mails (counters: STATS#signup)
TEMPLATE = "system/confirm"
HONEYPOT = "website"
DEFAULT_FORM = "default"
MAX_REDIRECT = 2000
MAX_FORM_FIELDS = 60
FIELDS = ("email", "first_name", "topics", "redirect", HONEYPOT, "form")
# What a name never holds: markup, template braces, links (list bombing puts spam in names),
# also without a scheme: anything shaped like a domain ("evil.com/win": a letter or digit, a
# dot, two letters).
NAME_FORBIDDEN = re.compile(r"[<>{}\\]|://|www\.|[\w-]\.[^\W\d_]{2,}", re.IGNORECASE)
# Nor what moves or reorders text: Unicode line and paragraph separators (NEL, U+2028/9) and
# the bidirectional controls (marks, embeddings, overrides, isolates).
NAME_INVISIBLE = re.compile("[\u0085\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
JSON_TYPES = ("application/json",)
FORM_TYPES = ("application/x-www-form-urlencoded",)

# A held sign-up's confirmation job waits this long on the send queue (SQS's largest
# DelaySeconds: a message is delayed by at most 15 minutes, "Amazon SQS delay queues",
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-delay-queues.html).
HELD_DELAY_S = 900
MAIL_MARGIN_S = 60  # the sender's share of a held mail's "by" time (a queued job is sent within seconds)
HOUR_S = 3600

Action = Literal[
    "pending",
    "held",
    "cooldown",
    "domain_full",
    "source_limited",
    "already_subscribed",
    "suppressed",
    "erased",
    "subscribed",
    "honeypot",
]


@dataclass(frozen=True)
class SignupRules:
    """What a request is checked against: the declared topics and the allowed origins."""

    topics: TopicCatalog
    origins: tuple[str, ...] = ()


class SignupRequest(BaseModel):
    """One sign-up. ``topics``: None when the request made no choice (the defaults apply);
    a list (even empty) is the reader's whole choice."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    email: Email
    first_name: FirstName = None
    topics: tuple[str, ...] | None = None
    redirect: str | None = None
    website: str = ""  # the honeypot: people never see it, bots fill it in
    form: str = DEFAULT_FORM

    @field_validator("first_name")
    @classmethod
    def _first_name(cls, name: str | None) -> str | None:
        if name and NAME_INVISIBLE.search(name):
            raise ValueError("must not contain line separators or text direction controls")
        if name and NAME_FORBIDDEN.search(name):
            raise ValueError("must be a plain name (no markup, braces, links or domains)")
        return name or None

    @field_validator("topics", mode="before")
    @classmethod
    def _topics(cls, value: Any, info: ValidationInfo) -> tuple[str, ...] | None:
        if value is None:
            return None
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list | tuple):
            raise ValueError("must be a list of topic ids")
        rules = _rules(info)
        if len(value) > MAX_TOPICS + 1:  # every topic once, and a form's hidden empty value
            raise ValueError(f"at most {MAX_TOPICS} topics")
        chosen = []
        for item in value:
            if item == "":
                continue  # an HTML form's hidden empty value: "a choice was made"
            topic = validate_name(item, "topic")
            if topic not in rules.topics:
                raise ValueError(
                    f"unknown topic {topic!r} (declared: {', '.join(t.id for t in rules.topics)})"
                )
            chosen.append(topic)
        return tuple(dict.fromkeys(chosen))

    @field_validator("redirect", mode="before")
    @classmethod
    def _redirect(cls, value: Any, info: ValidationInfo) -> str | None:
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            raise ValueError("must be a URL")
        if len(value) > MAX_REDIRECT or CONTROL_RE.search(value) or " " in value or "\\" in value:
            raise ValueError(f"must be a URL of at most {MAX_REDIRECT} characters, without spaces")
        origin = normalise_origin(value)
        if origin is None or origin not in _rules(info).origins:
            raise ValueError("must be a URL on one of the configured sign-up origins")
        return value

    @field_validator("website", mode="before")
    @classmethod
    def _honeypot(cls, value: Any) -> str:
        return value[:200] if isinstance(value, str) else "x"  # anything but a string: a bot

    @field_validator("form", mode="before")
    @classmethod
    def _form(cls, value: Any) -> str:
        if value is None or value == "":
            return DEFAULT_FORM
        return validate_name(value, "form id")


def _rules(info: ValidationInfo) -> SignupRules:
    rules = info.context
    if not isinstance(rules, SignupRules):
        raise TypeError("validate a SignupRequest with context=SignupRules(...)")
    return rules


def _media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def parse_signup(
    body: str | bytes | None, content_type: str | None, rules: SignupRules, *, max_bytes: int
) -> SignupRequest:
    """Decode and validate a sign-up body (JSON or an HTML form post)."""
    raw = body.encode() if isinstance(body, str) else (body or b"")
    if len(raw) > max_bytes:
        raise PayloadTooLarge(f"request body exceeds {max_bytes} bytes")
    if not raw.strip():
        raise InvalidInput("request body is empty", [FieldProblem("body", "must hold the sign-up")])
    media = _media_type(content_type)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput("body is not valid UTF-8", [FieldProblem("body", "not valid UTF-8")]) from None
    if media in JSON_TYPES:
        data = _json(text)
    elif media in FORM_TYPES:
        data = _form(text)
    else:
        message = "must be application/json or application/x-www-form-urlencoded"
        raise InvalidInput(f"content-type {message}", [FieldProblem("content-type", message)])
    try:
        return SignupRequest.model_validate(data, context=rules)
    except PydanticValidationError as exc:
        raise invalid_input(exc, "body") from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _json(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=unique_keys)
    except (ValueError, RecursionError):
        raise InvalidInput("body is not valid JSON", [FieldProblem("body", "invalid JSON")]) from None
    if not isinstance(data, dict):
        raise InvalidInput("body must be a JSON object", [FieldProblem("body", "must be a JSON object")])
    return data


def _form(text: str) -> dict[str, Any]:
    """Form fields; unknown ones (a named submit button) are ignored, a repeated single-value
    field is an error, ``topics`` may repeat (one checkbox each)."""
    try:
        fields = parse_qs(text, keep_blank_values=True, strict_parsing=False, max_num_fields=MAX_FORM_FIELDS)
    except ValueError:
        raise InvalidInput(
            "the form has too many fields", [FieldProblem("body", f"at most {MAX_FORM_FIELDS} fields")]
        ) from None
    data: dict[str, Any] = {}
    for name, found in fields.items():
        if name not in FIELDS:
            continue
        if name == "topics":
            data[name] = found
        elif len(found) > 1:
            raise InvalidInput(f"{name}: given more than once", [FieldProblem(name, "given more than once")])
        else:
            data[name] = found[0]
    if data.get("first_name") == "":
        data["first_name"] = None
    return data


# The sign-up function's metric of an outcome (every other one: SignupsAccepted). The stack
# alarms on SignupsHeld and SignupsDeferred (stacks/constructs/alarms.py).
SIGNUP_METRICS: dict[str, str] = {
    "held": "SignupsHeld",
    "domain_full": "SignupsDeferred",
    "source_limited": "SignupsSourceLimited",
}

# What the answer may depend on besides the form: the recipient domain's state of the hour
# (open, held, full) or the client's own limit (source): never the address's state.
Limit = Literal["open", "held", "full", "source"]
TRY_LATER = 429  # Too Many Requests, with Retry-After (RFC 6585, section 4)


def _clock_time(epoch: int) -> str:
    return clock.iso(datetime.fromtimestamp(epoch, UTC))[11:16] + " UTC"


@dataclass(frozen=True)
class SignupOutcome:
    """``action`` is for logs, metrics and tests only: the HTTP answer must not depend on it
    (use :meth:`public`), so nobody learns whether an address is known. ``limit`` and ``at``
    (held: when the mail goes out at the latest; full, source: when to try again, epoch
    seconds) are the same for every address of a domain (or every sign-up of a client)."""

    action: Action
    method: str  # double | single: what this form does, the same for every address
    redirect: str | None = None
    limit: Limit = "open"
    at: int = 0
    domain: str = ""
    now: int = 0

    @property
    def status_code(self) -> int:
        return TRY_LATER if self.limit in ("full", "source") else 200

    @property
    def headers(self) -> dict[str, str]:
        """``Retry-After`` (seconds) of an answer that asks to try again."""
        return {"Retry-After": str(max(1, self.at - self.now))} if self.status_code == TRY_LATER else {}

    @property
    def shows_page(self) -> bool:
        """A form post that was held or refused shows mailstep's page, not its redirect: the
        reader must read what happens."""
        return self.limit != "open"

    def public(self) -> dict[str, Any]:
        iso = clock.iso(datetime.fromtimestamp(self.at, UTC)) if self.at else None
        if self.limit in ("source", "full"):
            why = (
                "Too many sign-ups came from your network this hour, so we did not sign you up."
                if self.limit == "source"
                else f"So many people signed up with {self.domain} addresses this hour that we cannot "
                "send your confirmation mail now, and did not sign you up."
            )
            message = f"{why} Please try again after {_clock_time(self.at)}."
            return {"status": "try_later", "confirmation": False, "message": message, "retry_after": iso}
        if self.limit == "held":
            message = (
                f"Thanks! Many people signed up with {self.domain} addresses this hour, so your "
                f"confirmation mail is delayed: it will arrive by about {_clock_time(self.at)}. "
                "Then click the link in it to confirm."
            )
            return {"status": "held", "confirmation": True, "message": message, "mail_by": iso}
        message = (
            "Thanks! Check your inbox and click the link to confirm."
            if self.method == DOUBLE
            else "Thanks! You are subscribed."
        )
        return {"status": "accepted", "confirmation": self.method == DOUBLE, "message": message}


def signup(
    request: SignupRequest,
    ctx: ConsentContext,
    *,
    requester: Requester = ANONYMOUS,
    now: datetime | None = None,
) -> SignupOutcome:
    """Decide on one sign-up from ONE read of everything it depends on, then write and queue
    only what it calls for. The confirmation mail goes through the send queue (the send
    pipeline mails the live sign-up its job names, and checks suppression again)."""
    moment = now or clock.utc_now()
    at = int(moment.timestamp())
    method = SINGLE if ctx.config.single_opt_in(request.form) else DOUBLE

    domain = domain_of(request.email)
    next_hour = (at // HOUR_S + 1) * HOUR_S

    def outcome(action: Action, limit: Limit = "open", until: int = 0) -> SignupOutcome:
        logger.info(
            "sign-up", action=action, limit=limit, form=request.form, subscriber=redact_email(request.email)
        )
        return SignupOutcome(
            action=action,
            method=method,
            redirect=request.redirect,
            limit=limit,
            at=until,
            domain=domain,
            now=at,
        )

    if request.website:
        return outcome("honeypot")
    if requester.ip and not ctx.pending.count_source(
        ip_hash(requester.ip, ctx.secret()), cap=ctx.config.source_cap_per_hour, now=at
    ):
        return outcome("source_limited", "source", next_hour)
    state = ctx.pending.read_state(request.email, now=at)
    expected = _expected(state, ctx, at)
    mode: DomainMode = state.domain_mode(
        cap=ctx.config.domain_cap_per_hour, held_cap=ctx.config.domain_held_per_hour
    )
    if method == DOUBLE and mode == "full":  # the same for every address of the domain
        return outcome("domain_full", "full", next_hour)
    held = method == DOUBLE and mode == "held"
    expires = moment + timedelta(days=ctx.config.pending_days)
    signup_ = PendingSignup(
        email=request.email,
        signup_id=uuid.uuid4().hex,
        form=request.form,
        created_at=clock.iso(moment),
        expires_at=int(expires.timestamp()),
        last_mail_at=at,
        first_name=request.first_name,
        topics=request.topics,
        held_at=at if held else 0,
    )
    if method == SINGLE:
        if expected in ("erased", "suppressed", "already_subscribed"):
            return outcome(expected)
        opt_in(ctx, signup_, method=SINGLE, requester=requester, moment=moment)
        return outcome("subscribed")
    # The same requests whatever the address's state (answers do not reveal it): the one
    # read above, the admission transaction (its conditions refuse every state but a mailable
    # one, writing nothing) and the confirmation job (the send pipeline mails only a live
    # sign-up with the job's id: for a refused one there is none, and nothing is sent). A held
    # sign-up's job waits HELD_DELAY_S on the queue, whatever the address's state too.
    admitted = ctx.pending.admit(
        signup_,
        state,
        cooldown_seconds=ctx.config.cooldown_seconds,
        domain_cap=ctx.config.domain_cap_per_hour,
        held_cap=ctx.config.domain_held_per_hour,
        now=at,
    )
    delay = HELD_DELAY_S if held else 0
    ctx.queue_send(confirmation_job(signup_, ctx, moment), moment, delay_s=delay)
    limit: Limit = "held" if held else "open"
    until = -(-(at + delay + MAIL_MARGIN_S) // 60) * 60 if held else 0  # rounded up to the minute
    if admitted is not None:
        return outcome("held" if held else "pending", limit, until)
    # "cooldown": a concurrent sign-up won (or the domain's state changed since the read)
    return outcome("cooldown" if expected == "pending" else expected, limit, until)


def _expected(state: SignupState, ctx: ConsentContext, at: int) -> Action:
    """What the read says a sign-up of the address does (the transaction decides)."""
    if state.erased and state.profile is None:
        return "erased"  # erase is final: nothing is written about the address again
    if state.suppressed or (state.profile is not None and state.profile.suppressed):
        return "suppressed"
    if state.profile is not None and state.profile.status == SUBSCRIBED:
        return "already_subscribed"
    if state.within_cooldown(cooldown_seconds=ctx.config.cooldown_seconds, now=at):
        return "cooldown"
    return "pending"


def confirmation_job(signup_: PendingSignup, ctx: ConsentContext, moment: datetime) -> SendJob:
    """The send job of ``signup_``'s confirmation mail (transactional: never topic-gated, no
    unsubscribe link); its step names the sign-up, so the send pipeline mails only that one."""
    token = issue(
        TokenClaims(email=signup_.email, source=SOURCE, send_id=signup_.signup_id, purpose="confirm"),
        ctx.secret(),
        ttl_seconds=max(1, signup_.expires_at - int(moment.timestamp())),
        now=moment.timestamp(),
    )
    topics = [t.name for t in ctx.topics if signup_.topics is not None and t.id in signup_.topics]
    return SendJob(
        email=signup_.email,
        template=TEMPLATE,
        source=SOURCE,
        step=signup_.step,
        transactional=True,
        data={
            "confirm_url": ctx.config.confirm_url(token),
            "topics": topics,
            "days": ctx.config.pending_days,
        },
    )
