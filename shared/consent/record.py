"""Recording consent: the profile becomes ``subscribed`` with the opt-in written on it, and
``subscriber.confirmed`` goes to the sequence engine.

The consent record on the profile (``consent``) holds the time, the method (``double``: the
reader clicked the link in the confirmation mail; ``single``: the form's operator collected
consent elsewhere), the form id, the sign-up's id and time, a keyed hash of the IP address
(never the address itself) and the user agent. The events table keeps one
``subscriber.confirmed`` item per opt-in (the history; the profile keeps the latest).

Each opt-in is counted in the profile's transaction (``confirm`` for ``double``,
``single_opt_in`` for ``single``; ``shared.store.stats``): a repeat that changes nothing
writes nothing and counts nothing.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from shared.consent.context import ConsentContext
from shared.core import clock
from shared.core.models import CONTROL_RE, SUBSCRIBED, InboundEvent
from shared.core.observability import logger, redact_email
from shared.core.topics import choices_from
from shared.store.pending import DOUBLE, PendingSignup
from shared.store.stats import CONFIRM, SINGLE_OPT_IN, retry_contended, signup_counters
from shared.store.subscribers import Change, Profile

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

CONFIRMED_EVENT = "subscriber.confirmed"
MAX_USER_AGENT = 256
MAX_IP = 64


@dataclass(frozen=True)
class OptIn:
    """What an opt-in did: ``changed`` is False when it had been recorded already."""

    profile: Profile | None
    changed: bool
    sequences_started: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Requester:
    """Who sent a sign-up or its confirmation: recorded with the consent as a keyed hash of
    the IP and the cleaned User-Agent (empty when unknown)."""

    ip: str = ""
    user_agent: str | None = None


ANONYMOUS = Requester()


def ip_hash(ip: str, secret: str) -> str:
    """A keyed hash of the client's IP: equal addresses give equal hashes (abuse review),
    and nobody without the signing secret can test a guess."""
    key = hmac.new(secret.encode(), b"mailstep/consent/ip/v1", hashlib.sha256).digest()
    return hmac.new(key, ip.strip()[:MAX_IP].encode(), hashlib.sha256).hexdigest()[:32]


def clean_user_agent(value: str | None) -> str:
    return CONTROL_RE.sub("", value or "")[:MAX_USER_AGENT]


def opt_in(
    ctx: ConsentContext,
    signup: PendingSignup,
    *,
    method: str,
    requester: Requester,
    moment: datetime,
    extra: Sequence[TransactWriteItemTypeDef] = (),
) -> OptIn:
    """Subscribe ``signup.email`` with consent recorded (profile and TAG# partners in one
    transaction, joined by ``extra`` and the opt-in's counter), then announce
    ``subscriber.confirmed``."""
    consent = {
        "at": clock.iso(moment),
        "method": method,
        "form": signup.form,
        "signup_id": signup.signup_id,
        "signed_up_at": signup.created_at,
        "ip_hash": ip_hash(requester.ip, ctx.secret()) if requester.ip else "",
        "user_agent": clean_user_agent(requester.user_agent),
    }
    choice = choices_from(signup.topics, ctx.topics) if signup.topics is not None else None

    def apply(current: Profile | None, now: str) -> Profile:
        base = current or Profile(email=signup.email)
        topics_in, topics_out = choice if choice is not None else (base.topics_in, base.topics_out)
        return replace(
            base,
            status=SUBSCRIBED,
            first_name=signup.first_name if signup.first_name is not None else base.first_name,
            consent=consent,
            topics_in=topics_in,
            topics_out=topics_out,
        )

    counters = signup_counters(
        ctx.store.table, CONFIRM if method == DOUBLE else SINGLE_OPT_IN, at=clock.iso(moment)
    )
    change = retry_contended(lambda: ctx.store.mutate(signup.email, apply, extra=[*extra, *counters]))
    started = announce(ctx, signup, change, method=method, moment=moment) if change.changed else []
    logger.info(
        "opt-in recorded",
        subscriber=redact_email(signup.email),
        method=method,
        form=signup.form,
        new_profile=change.created,
        sequences_started=started,
    )
    return OptIn(profile=change.profile, changed=change.changed, sequences_started=started)


def announce(
    ctx: ConsentContext, signup: PendingSignup, change: Change, *, method: str, moment: datetime
) -> list[str]:
    """The ``subscriber.confirmed`` event item, then the sequences it triggers (their
    execution names derive from the sign-up id, so a repeat starts nothing new)."""
    data: dict[str, Any] = {"form": signup.form, "method": method}
    if signup.topics is not None:
        data["topics"] = list(signup.topics)
    ctx.store.add_event(
        signup.email,
        CONFIRMED_EVENT,
        at=moment,
        ttl_days=ctx.config.data_ttl_days,
        suffix=signup.signup_id[:16],
        origin="signup",
        data=data,
    )
    if ctx.sequences is None:
        return []
    event = InboundEvent(type=CONFIRMED_EVENT, email=signup.email, id=f"signup-{signup.signup_id}", data=data)
    started, _ = ctx.sequences.on_event(event, change.profile)
    return started
