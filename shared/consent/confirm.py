"""Confirmation of a sign-up through its signed link (``/c/<token>``).

- ``GET``: :func:`inspect` verifies the token and reads the sign-up; it changes nothing, so
  link scanners that fetch every URL of a mail confirm nobody.
- ``POST``: :func:`confirm` makes the profile ``subscribed`` with consent recorded, stores
  the topic choices and deletes the pending sign-up, all in ONE transaction (profile, TAG#
  partners, the pending item's delete conditioned on the sign-up's id, and the ``confirm``
  counter, so a confirmation is counted exactly when it happens), then emits
  ``subscriber.confirmed`` to the sequence engine. Confirming again changes nothing and
  answers ``already_confirmed``; a concurrent second confirm loses the transaction's
  condition and answers the same.

A link confirms only its own sign-up: the token names the sign-up's id, and a pending
sign-up (or a recorded opt-in) with another id is not it. Such a link, from an earlier
sign-up of the same address, is refused as :class:`StaleConfirmation` (its page says a newer
sign-up replaced it) and changes nothing. A token whose sign-up is gone (expired, never
confirmed) answers like an expired link; a token past its own expiry is expired, whatever
sign-up of the address is pending.
Crash window: a crash after the transaction and before the event leaves the reader
subscribed with consent recorded but the triggered sequences not started (as an events POST
that crashes after its upsert does); the operator starts them with an event.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from shared.consent.context import ConsentContext
from shared.consent.record import ANONYMOUS, Requester, opt_in
from shared.core import clock
from shared.core.errors import ConcurrentModification, Conflict
from shared.core.models import SUBSCRIBED
from shared.sending.tokens import ExpiredToken, InvalidToken, TokenClaims, verify
from shared.store.pending import DOUBLE, PendingSignup
from shared.store.subscribers import WRITE_RETRY, Profile

Status = Literal["pending", "confirmed", "already_confirmed"]


class StaleConfirmation(InvalidToken):
    """The link belongs to an earlier sign-up of the address: a newer one replaced it."""

    refusal = "this link was replaced by a newer sign-up"


@dataclass(frozen=True)
class Confirmation:
    status: Status  # pending: only GET (inspect) answers it; confirmed: only POST (confirm)
    email: str
    first_name: str | None = None
    topics: tuple[str, ...] | None = None  # the sign-up's choice (None: defaults)
    sequences_started: tuple[str, ...] = ()


def _verify(token: str, ctx: ConsentContext, moment: datetime) -> TokenClaims:
    return verify(token, ctx.secret(), purpose="confirm", now=moment.timestamp())


def _confirmed_already(profile: Profile | None) -> bool:
    return profile is not None and profile.status == SUBSCRIBED and profile.consent is not None


def _own(pending: PendingSignup | None, claims: TokenClaims) -> PendingSignup | None:
    """The pending sign-up when it is the token's own; another one: the link is stale."""
    if pending is not None and pending.signup_id != claims.send_id:
        raise StaleConfirmation()
    return pending


def _already(profile: Profile | None, claims: TokenClaims) -> Confirmation:
    """No pending sign-up: the token's sign-up was confirmed (already_confirmed), another
    sign-up's opt-in is recorded (stale), or it is gone (expired)."""
    if not _confirmed_already(profile):
        raise ExpiredToken()
    assert profile is not None and profile.consent is not None
    if profile.consent.get("signup_id") != claims.send_id:
        raise StaleConfirmation()
    return Confirmation("already_confirmed", claims.email, profile.first_name)


def inspect(token: str, ctx: ConsentContext, *, now: datetime | None = None) -> Confirmation:
    """What the confirm page shows (GET): reads only."""
    moment = now or clock.utc_now()
    claims = _verify(token, ctx, moment)
    pending = _own(ctx.pending.get(claims.email, now=moment.timestamp()), claims)
    if pending is not None:
        return Confirmation("pending", claims.email, pending.first_name, pending.topics)
    return _already(ctx.store.get_profile(claims.email), claims)


def confirm(
    token: str, ctx: ConsentContext, *, requester: Requester = ANONYMOUS, now: datetime | None = None
) -> Confirmation:
    """Confirm the sign-up the token names (POST); idempotent."""
    moment = now or clock.utc_now()
    claims = _verify(token, ctx, moment)
    for _ in WRITE_RETRY.tries():
        pending = _own(ctx.pending.get(claims.email, now=moment.timestamp()), claims)
        if pending is None:
            return _already(ctx.store.get_profile(claims.email), claims)
        try:
            result = opt_in(
                ctx,
                pending,
                method=DOUBLE,
                requester=requester,
                moment=moment,
                extra=[ctx.pending.delete_action(pending.email, pending.signup_id)],
            )
        except Conflict:
            continue  # the sign-up changed under us (confirmed meanwhile, or signed up anew)
        return _done(pending, result.sequences_started)
    raise ConcurrentModification("the sign-up kept changing during its confirmation")


def _done(pending: PendingSignup, started: list[str]) -> Confirmation:
    return Confirmation(
        "confirmed", pending.email, pending.first_name, pending.topics, sequences_started=tuple(started)
    )
