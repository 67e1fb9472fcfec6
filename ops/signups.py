"""Held sign-ups for operators (docs/signup.md, "Over a domain's cap: held, then try again"):
which recipient domains hold sign-ups, how many and since when, and releasing a domain's held
sign-ups now. The logic is ``shared.consent.held``; the CLI (``mailstep signups held`` /
``release``), the MCP server and the console call this."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from shared.consent.context import ConsentConfig, ConsentContext, send_queue
from shared.consent.held import domain_arg, held_domains, release
from shared.core import clock
from shared.core.topics import TOPICS_FILE, require_topics
from shared.store.pending import PendingSignups

if TYPE_CHECKING:
    from ops.targets import Target


@dataclass(frozen=True)
class HeldSignups:
    ctx: ConsentContext

    @classmethod
    def of(cls, target: Target) -> HeldSignups:
        """Wired to ``target``: its table, its send queue and its token secret (the links of a
        released confirmation mail are the sign-up function's)."""
        settings = target.settings
        store = target.subscriber_store()
        return cls(
            ConsentContext(
                store=store,
                pending=PendingSignups(settings.table_name, client=target.client("dynamodb")),
                send=target.send_context(),
                topics=require_topics(TOPICS_FILE),
                config=ConsentConfig.from_settings(settings),
                queue=send_queue(settings.send_queue_url, target.client("sqs")),
            )
        )

    def held(self, *, now: datetime | None = None) -> dict[str, Any]:
        """The domains holding sign-ups (the last two hours), most held first."""
        domains = held_domains(self.ctx.pending, now=clock.epoch(now))
        return {"domains": [d.public() for d in domains]}

    def release(self, domain: str, *, now: datetime | None = None) -> dict[str, Any]:
        """Queue the confirmation mails of ``domain``'s waiting held sign-ups now."""
        return {"domain": domain_arg(domain), "released": release(self.ctx, domain, now=now)}
