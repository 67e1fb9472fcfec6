"""Held sign-ups (docs/signup.md, "Over a domain's cap: held, then try again"): what the
recipient domains' hourly caps hold, per domain, and the operator's release of a domain's held
sign-ups whose confirmation mail has not gone out yet. The CLI, the MCP server and the console
reach this through ``ops.signups``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from shared.consent.context import ConsentContext
from shared.consent.signup import confirmation_job
from shared.core import clock
from shared.core.errors import FieldProblem, InvalidInput
from shared.core.observability import logger
from shared.store.pending import PendingSignups, domain_of, mailbox_domain

DOMAIN_MAX = 253


def _iso(epoch: int) -> str | None:
    return clock.iso(datetime.fromtimestamp(epoch, UTC)) if epoch else None


@dataclass(frozen=True)
class HeldDomain:
    """One recipient domain whose cap held sign-ups in the last two hours."""

    domain: str
    held: int  # sign-ups held in those hours
    mailed_at_once: int  # confirmation mails of the domain's hours that held (the cap's count)
    since: int  # epoch seconds of the first held sign-up of those hours
    waiting: int  # held sign-ups whose confirmation mail has not gone out yet

    def public(self) -> dict[str, Any]:
        return {
            "domain": self.domain,
            "held": self.held,
            "mailed_at_once": self.mailed_at_once,
            "since": _iso(self.since),
            "waiting": self.waiting,
        }


def held_domains(pending: PendingSignups, *, now: int | None = None) -> list[HeldDomain]:
    """The domains that held sign-ups (counters expire two hours after their hour) with the held
    sign-ups still waiting for their mail; most held first. One filtered Scan."""
    at = clock.epoch() if now is None else now
    hours, waiting = pending.held(now=at)
    found: dict[str, dict[str, int]] = {}
    for hour in hours:
        entry = found.setdefault(hour.domain, {"held": 0, "mails": 0, "since": 0, "waiting": 0})
        entry["held"] += hour.held
        entry["mails"] += hour.mails
        entry["since"] = min(entry["since"] or hour.held_since, hour.held_since or entry["since"])
    for signup in waiting:
        entry = found.setdefault(domain_of(signup.email), {"held": 0, "mails": 0, "since": 0, "waiting": 0})
        entry["waiting"] += 1
        entry["since"] = min(entry["since"] or signup.held_at, signup.held_at)
    domains = [
        HeldDomain(domain, e["held"], e["mails"], e["since"], e["waiting"]) for domain, e in found.items()
    ]
    return sorted(domains, key=lambda d: (-d.held, d.domain))


def domain_arg(value: str) -> str:
    """A recipient domain as the caps count it (``googlemail.com`` is ``gmail.com``)."""
    domain = (value or "").strip().lower().rstrip(".")
    if not domain or len(domain) > DOMAIN_MAX or "@" in domain or "#" in domain or "." not in domain:
        raise InvalidInput("not a domain", [FieldProblem("domain", "a mail domain, e.g. gmail.com")])
    return mailbox_domain(domain)


def release(ctx: ConsentContext, domain: str, *, now: datetime | None = None) -> int:
    """Mail now every held sign-up of ``domain`` whose confirmation mail has not gone out: its
    job goes on the send queue without delay. The send pipeline mails a sign-up once (its step
    names the sign-up; the pending item is marked ``mailed``), so its delayed job, a second
    release or a redelivered job sends nothing more. How many were queued."""
    wanted = domain_arg(domain)
    moment = now or clock.utc_now()
    _, waiting = ctx.pending.held(now=int(moment.timestamp()))
    queued = 0
    for signup in waiting:
        if domain_of(signup.email) != wanted:
            continue
        ctx.queue_send(confirmation_job(signup, ctx, moment), moment)
        queued += 1
    logger.info("held sign-ups released", domain=wanted, queued=queued)
    return queued
