"""The sending domain's warm-up for operators (docs/sending.md, "Warm-up"): its status, the plan
of a broadcast of a given size, restart and finish. One implementation for the CLI (`mailstep
warmup`, `mailstep broadcast send`), the MCP server and the console."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from shared.core import clock
from shared.core.specs import parse_warmup, warmup_text
from shared.sending.mime import parse_mailbox
from shared.sending.warmup import Day, Warmup, allowance, describe, plan

if TYPE_CHECKING:
    from ops.targets import Target


@dataclass(frozen=True)
class WarmupPlan:
    size: int
    today: date
    days: list[Day]

    @property
    def line(self) -> str:
        return describe(self.days, self.size, self.today)

    @property
    def spread(self) -> bool:
        return any(d.day != self.today for d in self.days)

    def public(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "line": self.line,
            "days": [
                {"day": d.day.isoformat(), "count": d.count, "allowance": d.allowance} for d in self.days
            ],
        }


class WarmupService:
    def __init__(self, warmup: Warmup, now: Callable[[], datetime] = clock.calendar_now) -> None:
        self.warmup = warmup
        self.now = now  # the target's "today" (a local runtime's calendar)

    @classmethod
    def of(cls, target: Target) -> WarmupService:
        settings = target.settings
        domain = parse_mailbox(settings.default_from, "DEFAULT_FROM")[1].rsplit("@", 1)[-1]
        schedule = parse_warmup(settings.warmup_schedule)
        return cls(
            Warmup(settings.table_name, domain, schedule, client=target.client("dynamodb")),
            target.calendar_now,
        )

    @property
    def on(self) -> bool:
        return self.warmup.on

    def status(self, now: datetime | None = None) -> dict[str, Any]:
        today = (now or self.now()).date()
        state = self.warmup.state()
        limit = allowance(self.warmup.schedule, state, today)
        used = self.warmup.used(today) if self.on else 0
        day = None if state.start_day is None else (today - state.start_day).days + 1
        return {
            "domain": self.warmup.domain,
            "schedule": warmup_text(self.warmup.schedule),
            "on": self.on and not state.finished and (limit is not None),
            "finished": state.finished,
            "start_day": state.start_day.isoformat() if state.start_day else None,
            "day": day,
            "today": today.isoformat(),
            "allowance": limit,
            "used": used,
            "left": None if limit is None else max(0, limit - used),
        }

    def plan(self, size: int, now: datetime | None = None) -> WarmupPlan | None:
        """How a broadcast of ``size`` spreads over days; None when no ramp limits it today or later."""
        if not self.on:
            return None
        today = (now or self.now()).date()
        state = self.warmup.state()
        if allowance(self.warmup.schedule, state, today) is None and state.start_day is not None:
            return None
        return WarmupPlan(
            size, today, plan(size, self.warmup.used(today), self.warmup.schedule, state, today)
        )

    def restart(self, now: datetime | None = None) -> dict[str, Any]:
        self.warmup.restart((now or self.now()).date())
        return self.status(now)

    def finish(self) -> dict[str, Any]:
        self.warmup.finish()
        return self.status()
