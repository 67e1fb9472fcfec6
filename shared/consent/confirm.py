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

A token whose sign-up is gone (expired, never confirmed) answers like an expired link.
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
from shared.sending.tokens import ExpiredToken, TokenClaims, verify
from shared.store.pending import DOUBLE, PendingSignup
from shared.store.subscribers import WRITE_RETRY, Profile

Status = Literal["pending", "confirmed", "already_confirmed"]


@dataclass(frozen=True)
class Confirmation:
    status: Status
    email: str
    first_name: str | None = None
    topics: tuple[str, ...] | None = None  # the sign-up's choice (None: defaults)
    sequences_started: tuple[str, ...] = ()


def _verify(token: str, ctx: ConsentContext, moment: datetime) -> TokenClaims:
    return verify(token, ctx.secret(), purpose="confirm", now=moment.timestamp())


def _confirmed_already(profile: Profile | None) -> bool:
    return profile is not None and profile.status == SUBSCRIBED and profile.consent is not None


def inspect(token: str, ctx: ConsentContext, *, now: datetime | None = None) -> Confirmation:
    """What the confirm page shows (GET): reads only."""
    moment = now or clock.utc_now()
    claims = _verify(token, ctx, moment)
    pending = ctx.pending.get(claims.email, now=moment.timestamp())
    if pending is not None:
        return Confirmation("pending", claims.email, pending.first_name, pending.topics)
    profile = ctx.store.get_profile(claims.email)
    if _confirmed_already(profile):
        assert profile is not None
        return Confirmation("already_confirmed", claims.email, profile.first_name)
    raise ExpiredToken()


def confirm(
    token: str, ctx: ConsentContext, *, requester: Requester = ANONYMOUS, now: datetime | None = None
) -> Confirmation:
    """Confirm the sign-up the token names (POST); idempotent."""
    moment = now or clock.utc_now()
    claims = _verify(token, ctx, moment)
    for _ in WRITE_RETRY.tries():
        pending = ctx.pending.get(claims.email, now=moment.timestamp())
        if pending is None:
            profile = ctx.store.get_profile(claims.email)
            if _confirmed_already(profile):
                assert profile is not None
                return Confirmation("already_confirmed", claims.email, profile.first_name)
            raise ExpiredToken()
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
