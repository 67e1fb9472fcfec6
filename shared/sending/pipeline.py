"""The one send pipeline: every mail mailstep sends goes through :func:`send`.

    profile -> eligibility -> claim (send-once) -> render -> MIME -> SES -> SENT# -> outcome

Callers: the sender Lambda (send queue), sequences' step Lambda, broadcast workers,
transactional mails and ``mailstep send-test``. Expected outcomes are returned, never
raised (:class:`SendOutcome`):

- ``sent``: SES accepted it; ``message_id`` is SES's id.
- ``skipped``: ``no_profile`` | ``no_signup`` (a confirmation mail whose sign-up is gone,
  expired or replaced) | ``suppressed`` (the address's ``SUPPRESSION`` item exists, or its
  profile says so: checked for every mail, with a profile or without) | ``unsubscribed`` (marketing only) |
  ``topic_opt_out`` (the job names a topic the reader does not receive; marketing only) |
  ``already_sent`` (the send-once key was used before).
- ``retryable``: ``in_flight`` (another worker holds the claim) | ``throttled`` (SES
  throttling, 5xx, timeouts) | ``account`` (suspension, missing permission...) | one of the
  holds (:attr:`SendOutcome.held`): ``paused`` (sending is paused for the mail's configuration
  set or the account; docs/reputation.md), ``unverified`` (the sending identity is not verified
  yet), ``daily_quota`` (SES's 24-hour quota is spent). Nothing was sent and the claim is
  released; the caller retries later (the sender Lambda fails the SQS record, or puts a held
  job back on the queue with a delay; a sequence step waits; a broadcast pauses or holds).
- ``failed``: ``rejected`` (SES refused this message) | ``render_error`` |
  ``invalid_message``. Permanent; recorded as a ``send_failed`` event.

Crash window: the claim is held under a lease (``send_claim_lease_seconds``). If a worker
dies after SES accepted the message but before ``SENT#`` was written, the retry finds the
claim taken until the lease ends. Meanwhile SES's events for the message (they carry the
send id in their tags) reach the engagement consumer, which writes the missing ``SENT#``
from them (``SendLog.record_evidence``); the retry after the lease then answers
``already_sent``. Only when no event arrived before the lease ended is the mail sent again:
never a loss, and a duplicate only when SES accepted the first message but its events were
later than the lease. A send whose ``SENT#`` exists is never sent again
(``shared.store.send_log``).

Counting: ``send`` is added to the source and template counters with the ``SENT#`` write
(``count_sends``); a broadcast worker turns that off and counts each batch once instead.
Counters are off the critical path: once SES accepted the mail, a busy counters item (a
concurrent transaction, throttling) never turns ``sent`` into an error; ``SENT#`` is written
and its count follows (``SendLog.complete``, docs/sending.md).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from botocore.exceptions import ClientError
from pydantic import BaseModel, ConfigDict

from shared.core import clock
from shared.core.aws import ClientFactory
from shared.core.errors import InvalidInput
from shared.core.models import UNSUBSCRIBED
from shared.core.observability import logger, redact_email
from shared.core.retry import Backoff
from shared.core.settings import Settings
from shared.core.specs import parse_warmup
from shared.core.topics import TopicCatalog, require_topics
from shared.sending.jobs import SendJob
from shared.sending.mime import Envelope, build_message, parse_mailbox, to_bytes
from shared.sending.rate import RESERVED_SCOPE, Reservations
from shared.sending.rendering import (
    Renderer,
    RenderError,
    SenderView,
    SubscriberView,
    TemplateNotFound,
    build_context,
    renderer,
)
from shared.sending.sender import HOLD_STATUSES, SesSender
from shared.sending.tokens import TokenClaims, issue
from shared.sending.warmup import Warmup
from shared.store.pending import PendingSignup, PendingSignups
from shared.store.send_log import SendLog, SentRecord
from shared.store.stats import SIGNUP_SOURCE
from shared.store.subscribers import Profile, SubscriberStore

TEST_SOURCE = "test"
OutcomeStatus = Literal["sent", "skipped", "retryable", "failed"]


class SendOutcome(BaseModel):
    model_config = ConfigDict(frozen=True)

    status: OutcomeStatus
    send_id: str
    reason: str | None = None
    message_id: str | None = None
    error_code: str | None = None
    detail: str | None = None

    @property
    def retryable(self) -> bool:
        return self.status == "retryable"

    @property
    def held(self) -> bool:
        """SES said "not yet" (paused, identity not verified, daily quota spent): the mail waits
        for as long as that lasts instead of the short retries of a throttle."""
        return self.status == "retryable" and self.reason in HOLD_STATUSES


@dataclass(frozen=True)
class MailIdentity:
    """Defaults of every mail (Settings); a job's ``sender`` overrides from/reply-to."""

    from_: str = "Mailstep <hello@example.com>"
    reply_to: str = ""
    postal_address: str = "Mailstep, 1 Example Street, 12345 Example City"
    footer_reason: str = "You receive this email because you signed up for it."
    public_base_url: str = "https://mailstep.localhost"
    list_id_domain: str = ""
    unsubscribe_mailto: str = ""

    @classmethod
    def from_settings(cls, settings: Settings) -> MailIdentity:
        return cls(
            from_=settings.default_from,  # from_: "from" is a Python keyword
            reply_to=settings.default_reply_to,
            postal_address=settings.postal_address,
            footer_reason=settings.mail_footer_reason,
            public_base_url=settings.public_base_url,
            list_id_domain=settings.list_id_domain,
            unsubscribe_mailto=settings.unsubscribe_mailto,  # an address or mailto: URL; empty: none
        )

    def unsubscribe_url(self, token: str) -> str:
        return f"{self.public_base_url.rstrip('/')}/u/{token}"

    def preview_context(
        self, *, email: str, first_name: str, data: dict[str, Any], transactional: bool
    ) -> dict[str, Any]:
        """The template context of a preview (CLI and MCP): a sample subscriber, this sender,
        a placeholder unsubscribe link unless transactional."""
        name, address = parse_mailbox(self.from_, "DEFAULT_FROM")
        return build_context(
            SubscriberView(email=email, first_name=first_name),
            SenderView(
                name=name or address,
                email=address,
                postal_address=self.postal_address,
                reason=self.footer_reason,
            ),
            unsubscribe_url=None if transactional else self.unsubscribe_url("preview-token"),
            data=data,
        )


@dataclass(frozen=True)
class SendContext:
    store: SubscriberStore
    log: SendLog
    ses: SesSender
    identity: MailIdentity
    token_secret: Callable[[], str]  # fetched only for mail that carries an unsubscribe link
    data_ttl_days: int = 180
    token_ttl_days: int = 365
    lease_seconds: int = 300
    count_sends: bool = True  # False: the caller counts sends (a broadcast batch)
    # Counts this send in its second before the SES call, so broadcasts give way to it
    # (shared.sending.rate.Reservations); None: a broadcast's send, which took a token instead.
    reserve: Callable[[int], None] | None = None
    sleep: Callable[[float], None] = time.sleep
    renderer: Renderer = field(default_factory=renderer)
    topics: TopicCatalog = field(default_factory=TopicCatalog)  # topics.yaml: defaults and names
    # The sending domain's warm-up (shared.sending.warmup): each mail sent from it is counted
    # in its day; None: no ramp (or a broadcast's send: the worker takes its batch's share).
    warmup: Warmup | None = None

    @classmethod
    def from_settings(
        cls, settings: Settings, store: SubscriberStore | None = None, aws: ClientFactory | None = None
    ) -> SendContext:
        """Wired to ``settings`` on ``aws``'s clients (None: the environment's, as in a Lambda)."""
        if aws is None:
            from shared.core.secrets import get_secret

            def secret() -> str:
                return get_secret(settings.unsubscribe_secret)
        else:
            from aws_lambda_powertools.utilities.parameters import SecretsProvider

            provider = SecretsProvider(boto3_client=aws.client("secretsmanager"))

            def secret() -> str:
                return str(provider.get(settings.unsubscribe_secret))

        ddb = aws.client("dynamodb") if aws else None
        schedule = parse_warmup(settings.warmup_schedule)
        domain = parse_mailbox(settings.default_from, "DEFAULT_FROM")[1].rsplit("@", 1)[-1]
        return cls(
            store=store or SubscriberStore(settings.table_name, settings.events_table_name, client=ddb),
            log=SendLog(settings.table_name, client=ddb),
            ses=SesSender(
                settings.configuration_set,
                client=aws.client("sesv2") if aws else None,
                transactional_configuration_set=settings.transactional_configuration_set,
            ),
            identity=MailIdentity.from_settings(settings),
            token_secret=secret,
            data_ttl_days=settings.data_ttl_days,
            token_ttl_days=settings.unsubscribe_token_ttl_days,
            lease_seconds=settings.send_claim_lease_seconds,
            topics=require_topics(),
            reserve=Reservations(settings.table_name, RESERVED_SCOPE, client=ddb).reserve,
            warmup=Warmup(settings.table_name, domain, schedule, client=ddb) if schedule else None,
        )


# SES throttling of a send that is not a broadcast's: three more tries after pauses between half
# and all of 0.25 s, 0.5 s and 1 s (the broadcasts have given way by then: shared.sending.rate);
# still throttled, the caller retries later (the SQS record comes back).
THROTTLE_RETRY = Backoff(attempts=4, base=0.25, cap=1.0, jitter=0.5)


def _reserve(ctx: SendContext, log: dict[str, Any]) -> None:
    """Count this send in its second (shared.sending.rate); a failed count never stops it."""
    if ctx.reserve is None:
        return
    try:
        ctx.reserve(1)
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "?")
        logger.warning("send rate reservation failed", extra={**log, "error_code": code})


def send_id_for(job: SendJob) -> str:
    """Stable per send-once key, so a rare duplicate carries the same correlation id."""
    digest = hashlib.sha256(f"{job.email}\n{job.source}\n{job.step}".encode()).hexdigest()
    return digest[:24]


def send(job: SendJob, ctx: SendContext, *, now: datetime | None = None) -> SendOutcome:
    """Send ``job`` at most once. Never raises for an expected outcome (see module doc)."""
    moment = now or clock.utc_now()
    send_id = send_id_for(job)
    log = {
        "template": job.template,
        "source": job.source,
        "step": job.step,
        "send_id": send_id,
        "subscriber": redact_email(job.email),
    }

    # Suppression is a fact of the address, not of its profile: its SUPPRESSION item is read
    # with the profile (one BatchGetItem) and holds back every mail, profile or not.
    confirmation: PendingSignup | None = None
    if job.source == SIGNUP_SOURCE:
        profile, suppressed, confirmation = _confirmation_recipient(job, ctx, moment)
    else:
        known = ctx.store.known([job.email])[job.email]
        profile, suppressed = known.profile, bool(known.suppressed)
    if profile is None and job.source == TEST_SOURCE:
        profile = Profile(email=job.email)
    skip = _ineligible(profile, suppressed, job, ctx.topics)
    if skip is None and confirmation is not None and confirmation.mailed:
        skip = "already_sent"  # a redelivered confirmation job: its claim was dropped
    if skip is not None:
        logger.info("send skipped", extra={**log, "reason": skip})
        if profile is not None and job.source != SIGNUP_SOURCE:
            _record_event(ctx, job, send_id, "send_skipped", skip, moment)
        return SendOutcome(status="skipped", send_id=send_id, reason=skip)
    assert profile is not None
    log_until = confirmation.expires_at if confirmation is not None else _log_ttl(moment, ctx)

    claim = ctx.log.claim(
        job.email,
        job.source,
        job.step,
        send_id=send_id,
        template=job.template,
        now=int(moment.timestamp()),
        lease_seconds=ctx.lease_seconds,
        log_until=log_until,
        sent_at=clock.iso(moment),
        count=ctx.count_sends,
    )
    if claim.status == "already_sent":
        logger.info("send skipped", extra={**log, "reason": "already_sent"})
        return SendOutcome(
            status="skipped", send_id=send_id, reason="already_sent", message_id=claim.message_id
        )
    if claim.status == "in_flight":
        logger.info("send in flight elsewhere", extra={**log, "lease_until": claim.lease_until})
        return SendOutcome(status="retryable", send_id=send_id, reason="in_flight")

    try:
        raw, envelope, subject = _compose(job, profile, send_id, ctx, moment)
    except (RenderError, TemplateNotFound, InvalidInput) as exc:
        ctx.log.release(job.email, job.source, job.step, claim.claim_id)
        reason = "invalid_message" if type(exc) is InvalidInput else "render_error"
        logger.warning("send failed", extra={**log, "reason": reason, "error": str(exc)[:300]})
        _record_event(ctx, job, send_id, "send_failed", reason, moment)
        return SendOutcome(status="failed", send_id=send_id, reason=reason, detail=str(exc)[:300])

    tags = {
        "template": job.template,
        "source": job.source,
        "step": job.step,
        "send_id": send_id,
        "sent_at": clock.iso(moment),  # the key of its SENT# entry (the consumer's first look)
        "kind": "transactional" if job.transactional else "marketing",
        **({"topic": job.topic} if job.topic and not job.transactional else {}),
    }
    _reserve(ctx, log)
    for _ in THROTTLE_RETRY.tries(sleep=ctx.sleep):
        result = ctx.ses.send_raw(
            raw,
            from_email=envelope.from_email,
            to_email=job.email,
            tags=tags,
            transactional=job.transactional,
        )
        # a broadcast's send retries with a token of its own (shared.broadcasts.worker); other
        # mail was reserved, so a broadcast gives way within a second: try again here
        if ctx.reserve is None or result.status != "retryable":
            break
    if result.status != "sent" or not result.message_id:
        ctx.log.release(job.email, job.source, job.step, claim.claim_id)
        if result.status == "rejected":
            logger.warning("send rejected", extra={**log, "error_code": result.error_code})
            _record_event(ctx, job, send_id, "send_failed", "rejected", moment)
            return SendOutcome(
                status="failed",
                send_id=send_id,
                reason="rejected",
                error_code=result.error_code,
                detail=result.detail,
            )
        reason = (
            result.status if result.status in HOLD_STATUSES or result.status == "account" else "throttled"
        )
        # An account problem or a hold (a missing permission, sending paused, the identity not
        # verified) needs the operator or time: SES's message names the action, the state or the
        # sending identity (a recipient only in the sandbox's refusal, which is ``rejected``).
        detail = {"detail": result.detail} if reason != "throttled" else {}
        logger.warning(
            "send deferred", extra={**log, "reason": reason, "error_code": result.error_code, **detail}
        )
        return SendOutcome(
            status="retryable",
            send_id=send_id,
            reason=reason,
            error_code=result.error_code,
            detail=result.detail,
        )

    record = SentRecord(
        email=job.email,
        source=job.source,
        step=job.step,
        send_id=send_id,
        template=job.template,
        subject=subject,
        ses_message_id=result.message_id,
        transactional=job.transactional,
        sent_at=clock.iso(moment),
        ttl=log_until,
        after_takeover=claim.took_over,
    )
    if not ctx.log.complete(record, count=ctx.count_sends):
        logger.info("send log already written from an SES event", extra=log)
    if confirmation is not None:
        _pending(ctx).sent(confirmation, job.source, at=clock.iso(moment))
    _count_warmup(ctx, envelope.from_email, log)
    logger.info("sent", extra={**log, "message_id": result.message_id, "after_takeover": claim.took_over})
    return SendOutcome(status="sent", send_id=send_id, message_id=result.message_id)


def _count_warmup(ctx: SendContext, from_email: str, log: dict[str, Any]) -> None:
    """A sent mail from the warming domain counts in its day; a failed count never fails the mail."""
    if ctx.warmup is None or from_email.rsplit("@", 1)[-1].lower() != ctx.warmup.domain:
        return
    try:
        ctx.warmup.count()
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "?")
        logger.warning("warm-up count failed", extra={**log, "error_code": code})


def _log_ttl(moment: datetime, ctx: SendContext) -> int:
    return clock.ttl_after(ctx.data_ttl_days, moment)


def _pending(ctx: SendContext) -> PendingSignups:
    return PendingSignups(ctx.store.table, ctx.store.client)


def _confirmation_recipient(
    job: SendJob, ctx: SendContext, moment: datetime
) -> tuple[Profile | None, bool, PendingSignup | None]:
    """A sign-up's confirmation mail goes to its pending sign-up, the one its step names
    (``confirm-<signup_id>``): an address without a profile reads as a stand-in built from
    the sign-up (never written); an existing profile (an unsubscribed reader signing up again)
    is read as it is. No live sign-up with that id (gone, expired, replaced, or never
    admitted): no recipient (``no_signup``)."""
    profile, suppressed, pending = _pending(ctx).confirmation(
        job.email, job.step, now=int(moment.timestamp())
    )
    if pending is None:
        return None, suppressed, None
    if profile is None:
        return Profile(email=job.email, status="pending", first_name=pending.first_name), suppressed, pending
    return replace(profile, first_name=pending.first_name or profile.first_name), suppressed, pending


def _ineligible(profile: Profile | None, suppressed: bool, job: SendJob, topics: TopicCatalog) -> str | None:
    if suppressed or (profile is not None and profile.suppressed):
        return "suppressed"
    if profile is None:
        return "no_signup" if job.source == SIGNUP_SOURCE else "no_profile"
    if job.transactional:
        return None
    if profile.status == UNSUBSCRIBED:
        return "unsubscribed"
    if job.topic and not profile.receives(job.topic, topics):
        return "topic_opt_out"
    return None


def _compose(
    job: SendJob, profile: Profile, send_id: str, ctx: SendContext, moment: datetime
) -> tuple[bytes, Envelope, str]:
    identity = ctx.identity
    from_value = job.sender.from_ if job.sender else identity.from_
    reply_to = (job.sender.reply_to if job.sender else "") or identity.reply_to
    from_name, from_email = parse_mailbox(from_value, "sender.from")
    unsubscribe_url = None
    topic = None if job.transactional else job.topic
    if not job.transactional:
        token = issue(
            TokenClaims(
                email=job.email, source=job.source, template=job.template, send_id=send_id, topic=topic or ""
            ),
            ctx.token_secret(),
            ttl_seconds=ctx.token_ttl_days * clock.DAY_SECONDS,
            now=moment.timestamp(),
        )
        unsubscribe_url = identity.unsubscribe_url(token)
    context = build_context(
        SubscriberView(
            email=profile.email,
            first_name=profile.first_name or "",
            attributes=profile.attributes,
            tags=tuple(sorted(profile.tags)),
        ),
        SenderView(
            name=from_name or from_email,
            email=from_email,
            postal_address=identity.postal_address,
            reason=identity.footer_reason,
        ),
        unsubscribe_url=unsubscribe_url,
        data=job.data,
        now=moment,
    )
    rendered = ctx.renderer.render(job.template, context, subject=job.subject)
    list_domain = identity.list_id_domain or from_email.rsplit("@", 1)[1]
    envelope = Envelope(
        from_email=from_email,
        from_name=from_name,
        to_email=job.email,
        to_name=profile.first_name or "",
        reply_to=reply_to,
        subject=rendered.subject,
        send_id=send_id,
        unsubscribe_url=unsubscribe_url,
        unsubscribe_mailto=_mailto(identity.unsubscribe_mailto) if unsubscribe_url else None,
        # A topic mail's list is the topic (its one-click leaves only that topic); other
        # marketing mail's list is its source (sequence or broadcast id).
        list_id=None if job.transactional else f"{topic or job.source}.{list_domain}",
        list_name=_list_name(topic, job.source, ctx.topics),
        date=moment,
    )
    return (
        to_bytes(build_message(envelope, text=rendered.text, html=rendered.html)),
        envelope,
        rendered.subject,
    )


def _list_name(topic: str | None, source: str, topics: TopicCatalog) -> str:
    declared = topics.get(topic) if topic else None
    return declared.name if declared is not None else (topic or source)


def _mailto(address: str) -> str | None:
    if not address:
        return None
    return address if address.startswith("mailto:") else f"mailto:{address}?subject=unsubscribe"


def _record_event(
    ctx: SendContext, job: SendJob, send_id: str, kind: str, reason: str, moment: datetime
) -> None:
    ctx.store.add_event(
        job.email,
        kind,
        at=moment,
        ttl_days=ctx.data_ttl_days,
        reason=reason,  # why it was skipped or failed, as a code (e.g. render_error), never the text
        template=job.template,
        source=job.source,
        step=job.step,
        send_id=send_id,
    )


def outcome_dict(outcome: SendOutcome) -> dict[str, Any]:
    return outcome.model_dump(exclude_none=True)


class RetryableSend(Exception):
    """Raised by queue consumers to fail a record whose outcome is retryable."""

    def __init__(self, outcome: SendOutcome) -> None:
        detail = f": {outcome.detail}" if outcome.reason == "account" and outcome.detail else ""
        super().__init__(f"send deferred: {outcome.reason} ({outcome.error_code or '-'}){detail}")
        self.outcome = outcome
