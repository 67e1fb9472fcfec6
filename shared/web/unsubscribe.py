"""Unsubscribe and resubscribe through signed links (DESIGN.md section 4).

- ``GET /u/<token>``: :func:`inspect` only verifies the token; the page asks to confirm.
  Nothing changes on GET, so link scanners cannot unsubscribe anyone.
- ``POST /u/<token>`` (the page's form, or RFC 8058 one-click with the body
  ``List-Unsubscribe=One-Click``): :func:`unsubscribe` opts the subscriber out through the
  store (idempotent), and only when that changed something records an ``unsubscribe``
  event and adds 1 to the source's ``unsubscribe`` counter. Repeated POSTs are harmless.
  The one-click POST of a *topic* mail (the token names the topic) leaves only that topic
  (``topic_unsubscribe`` event; the reader stays subscribed to everything else); the page's
  "Unsubscribe from everything" button always unsubscribes from everything.
- ``POST /u/<token>/resubscribe`` with the resubscribe token the confirmation page
  carries: :func:`resubscribe` opts back in (suppressions stay); after a topic one-click it
  turns that topic back on.

Erase is final: an address erased on request (its ``ERASED#`` tombstone and no profile) is
never re-created from an old link. Unsubscribe writes nothing for it (the answer says nothing
will be sent: true, there is nobody to send to), and resubscribe and topic changes refuse
with :class:`AddressErased`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol

from shared.core import clock
from shared.core.errors import SubscriberNotFound
from shared.core.observability import logger, redact_email
from shared.sending.tokens import TokenClaims, issue, verify
from shared.store.subscribers import Change, Profile, SubscriberStore, merged

RESUBSCRIBE_TTL_SECONDS = 30 * 86400
UNSUBSCRIBE_EVENT = "unsubscribe"
RESUBSCRIBE_EVENT = "resubscribe"
TOPIC_UNSUBSCRIBE_EVENT = "topic_unsubscribe"
TOPIC_RESUBSCRIBE_EVENT = "topic_resubscribe"
COUNTER = "unsubscribe"
Origin = Literal["one_click", "form"]


class AddressErased(SubscriberNotFound):
    """The link's address was erased on request: nothing of it is kept, and no link may
    re-create it (a 404 page that says so)."""


class ExecutionStopper(Protocol):
    def stop_all(self, email: str, *, reason: str, transactional_too: bool = True) -> list[str]: ...


@dataclass(frozen=True)
class UnsubscribeContext:
    store: SubscriberStore
    secret: str
    data_ttl_days: int = 180
    # The sequence engine: an unsubscribe stops the subscriber's marketing executions.
    sequences: ExecutionStopper | None = None


@dataclass(frozen=True)
class UnsubscribeResult:
    claims: TokenClaims
    changed: bool  # False: was already unsubscribed
    resubscribe_token: str
    # Sequences whose (non-transactional) executions this unsubscribe stopped.
    sequences_stopped: list[str] = field(default_factory=list)
    topic: str = ""  # set when only this topic was left (a topic mail's one-click)
    erased: bool = False  # the address was erased: nothing was written, nothing will be sent


@dataclass(frozen=True)
class ResubscribeResult:
    claims: TokenClaims
    changed: bool
    suppressed: bool  # a bounce/complaint suppression still blocks sending


def inspect(token: str, secret: str, *, now: float | None = None) -> TokenClaims:
    """Verify an unsubscribe token without changing anything (GET)."""
    return verify(token, secret, purpose="unsubscribe", now=now)


def unsubscribe(
    token: str, ctx: UnsubscribeContext, *, origin: Origin, now: datetime | None = None
) -> UnsubscribeResult:
    moment = now or clock.utc_now()
    claims = verify(token, ctx.secret, purpose="unsubscribe", now=moment.timestamp())
    if origin == "one_click" and claims.topic:
        return _leave_topic(claims, ctx, moment)
    try:
        change = _opt_out(ctx.store, claims.email)
    except AddressErased:
        return _erased(claims)
    if change.changed:
        _record(ctx, claims, UNSUBSCRIBE_EVENT, origin, moment)
        _count(ctx, claims.source)
    # Transactional sequences ignore unsubscribe; marketing ones stop before their next send.
    stopped = (
        ctx.sequences.stop_all(claims.email, reason="unsubscribe", transactional_too=False)
        if ctx.sequences is not None
        else []
    )
    logger.info(
        "unsubscribe",
        subscriber=redact_email(claims.email),
        source=claims.source,
        template=claims.template,
        origin=origin,
        changed=change.changed,
        sequences_stopped=stopped,
    )
    return UnsubscribeResult(
        claims=claims,
        changed=change.changed,
        resubscribe_token=_resubscribe_token(claims, ctx, moment, topic=""),
        sequences_stopped=stopped,
    )


def _opt_out(store: SubscriberStore, email: str) -> Change:
    """``SubscriberStore.unsubscribe`` (a profile that remembers the opt-out is created when
    there is none), except for an erased address: the tombstone is read whenever no profile
    is found, on each attempt. The erase writes its tombstone before it deletes the profile,
    so an erase racing this write makes it re-read, find no profile and see the tombstone."""

    def apply(current: Profile | None, now: str) -> Profile:
        if current is None and store.is_erased(email):
            raise AddressErased("the address was erased")
        return merged(current, email, unsubscribe=True)

    return store.mutate(email, apply)


def _erased(claims: TokenClaims) -> UnsubscribeResult:
    logger.info("unsubscribe of an erased address: nothing written", source=claims.source)
    return UnsubscribeResult(claims=claims, changed=False, resubscribe_token="", erased=True)


def refuse_if_erased(store: SubscriberStore, email: str) -> None:
    """For a path that found no profile (``SubscriberNotFound``): :class:`AddressErased`
    when the address was erased, so its page says so."""
    if store.is_erased(email):
        raise AddressErased("the address was erased") from None


def _leave_topic(claims: TokenClaims, ctx: UnsubscribeContext, moment: datetime) -> UnsubscribeResult:
    """One-click of a topic mail: only that topic is turned off. Sequences keep running; their
    later mails of this topic are skipped by the send pipeline (``topic_opt_out``)."""
    try:
        change = ctx.store.set_topics(claims.email, off=[claims.topic])
    except SubscriberNotFound:
        if ctx.store.is_erased(claims.email):
            return _erased(claims)
        raise
    if change.changed:
        _record(ctx, claims, TOPIC_UNSUBSCRIBE_EVENT, "one_click", moment)
        _count(ctx, claims.source)
    logger.info(
        "topic unsubscribe",
        subscriber=redact_email(claims.email),
        source=claims.source,
        topic=claims.topic,
        changed=change.changed,
    )
    return UnsubscribeResult(
        claims=claims,
        changed=change.changed,
        resubscribe_token=_resubscribe_token(claims, ctx, moment, topic=claims.topic),
        topic=claims.topic,
    )


def _resubscribe_token(claims: TokenClaims, ctx: UnsubscribeContext, moment: datetime, *, topic: str) -> str:
    return issue(
        TokenClaims(
            email=claims.email,
            source=claims.source,
            template=claims.template,
            send_id=claims.send_id,
            purpose="resubscribe",
            topic=topic,
        ),
        ctx.secret,
        ttl_seconds=RESUBSCRIBE_TTL_SECONDS,
        now=moment.timestamp(),
    )


def resubscribe(token: str, ctx: UnsubscribeContext, *, now: datetime | None = None) -> ResubscribeResult:
    moment = now or clock.utc_now()
    claims = verify(token, ctx.secret, purpose="resubscribe", now=moment.timestamp())
    try:
        if claims.topic:
            change = ctx.store.set_topics(claims.email, on=[claims.topic])
        else:
            change = ctx.store.resubscribe(claims.email)
    except SubscriberNotFound:
        refuse_if_erased(ctx.store, claims.email)
        raise
    if change.changed:
        _record(ctx, claims, TOPIC_RESUBSCRIBE_EVENT if claims.topic else RESUBSCRIBE_EVENT, "form", moment)
    logger.info(
        "resubscribe", subscriber=redact_email(claims.email), source=claims.source, changed=change.changed
    )
    suppressed = bool(change.profile and change.profile.suppressed)
    return ResubscribeResult(claims=claims, changed=change.changed, suppressed=suppressed)


def mask_email(email: str) -> str:
    """``jane@example.com`` -> ``j***@example.com`` (what the pages show)."""
    local, _, domain = email.partition("@")
    return f"{local[:1]}***@{domain}"


def _record(ctx: UnsubscribeContext, claims: TokenClaims, kind: str, origin: str, moment: datetime) -> None:
    ctx.store.add_event(
        claims.email,
        kind,
        at=moment,
        ttl_days=ctx.data_ttl_days,
        origin=origin,
        source=claims.source,
        template=claims.template or None,
        send_id=claims.send_id or None,
        topic=claims.topic or None,
    )


def _count(ctx: UnsubscribeContext, source: str) -> None:
    """Atomic ADD on ``STATS#<source>`` / ``COUNTERS`` (counted once per real change, so
    the total is also the unique count)."""
    ctx.store.add_to_counter(source, COUNTER)
