"""List hygiene for operators (``mailstep hygiene report|run|backfill``, the MCP tools
hygiene_report, hygiene_run and hygiene_backfill): the sunset's report, the daily run and the
backfill of subscribers from before it, through the same logic the hygiene function runs
(``shared.engagement.sunset``), against a target.

"Now" is the target's: the wall clock for a deployed stack, the runtime's calendar for the local
runtime (``mailstep local advance``), or the day an operator names (``at``).
"""

from __future__ import annotations

import json
import urllib.request
from dataclasses import asdict
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ops.targets import read_state
from shared.core.errors import FieldProblem, InvalidInput
from shared.engagement import sunset

if TYPE_CHECKING:
    from ops.targets import Target
    from shared.store.stats import StatsStore

RUN_HOUR = 4  # the schedule's hour (shared.core.specs.HYGIENE_SCHEDULE): an `at` day runs at 04:00 UTC
MACHINE_WINDOW_DAYS = 30  # the report's share of machine opens and clicks: the last 30 days


def policy(target: Target) -> sunset.SunsetPolicy:
    return sunset.SunsetPolicy.from_settings(target.settings)


def now(target: Target, at: str | None = None) -> datetime:
    """``at`` (a day, ``YYYY-MM-DD``: that day's scheduled time) or the target's now."""
    if at:
        try:
            day = date.fromisoformat(at)
        except ValueError:
            raise InvalidInput(
                "at: a day as YYYY-MM-DD", [FieldProblem("at", "a day as YYYY-MM-DD")]
            ) from None
        return datetime(day.year, day.month, day.day, RUN_HOUR, tzinfo=UTC)
    if target.kind == "local":  # the runtime's calendar (its state folder names its API)
        state = read_state(Path(target.name))
        with urllib.request.urlopen(state["api_url"] + "/_local/status", timeout=10) as answer:  # noqa: S310
            return datetime.fromisoformat(json.loads(answer.read())["clock"]["calendar"])
    return datetime.now(UTC)


def report(
    target: Target, *, at: str | None = None, live: bool = True, readers: int = sunset.AT_RISK_READERS
) -> dict[str, Any]:
    """Cold subscribers, those at risk within 14 days, what the next daily run would change, and
    the share of the last 30 days' opens and clicks that machines made. ``live=False``: the
    at-risk forecast of the last daily run and no dry run (``sunset.report``: the console's page
    as it opens, reading no day bucket). ``readers``: the at-risk buckets' Queries in flight at
    once (the console, reading in the background, asks for fewer: ``console.jobs``)."""
    found = sunset.report(
        target.subscriber_store(), policy(target), now(target, at), live=live, readers=readers
    )
    return {**asdict(found), "machines": machine_share(target.stats_store(), found.day)}


def machine_share(stats: StatsStore, day: str, days: int = MACHINE_WINDOW_DAYS) -> dict[str, Any]:
    """Of the opens and clicks of the ``days`` days up to ``day``, how many machines made (MPP
    prefetches, security scanners: docs/hygiene.md), from the day counters (``StatsStore.daily``:
    one Query per shard, the 16 at once)."""
    per_day = stats.daily(date.fromisoformat(day) - timedelta(days=days - 1), days)
    share: dict[str, Any] = {"days": days}
    for kind in ("open", "click"):
        people = sum(d.get(kind, 0) for d in per_day)
        machines = sum(d.get(f"{kind}_machine", 0) for d in per_day)
        seen = people + machines
        share[kind] = {"people": people, "machines": machines, "share": machines / seen if seen else None}
    return share


def run(target: Target, *, dry_run: bool = True, at: str | None = None) -> dict[str, Any]:
    """The daily run for the target's day (or ``at``'s): with ``dry_run`` only what it would
    change; otherwise it changes it, applying each event as POST /v1/events does (idempotent by
    its id, as the hygiene function's are)."""
    from shared.sequences import SEQUENCES_DIR
    from shared.web.ingest import IngestContext, make_idempotency

    store = target.subscriber_store()
    moment = now(target, at)
    if dry_run:
        report = sunset.run(store, policy(target), moment, dry_run=True)
    else:
        settings = target.settings
        idempotency, persistence = make_idempotency(
            settings.table_name, settings.idempotency_ttl_seconds, client=target.client("dynamodb")
        )
        context = IngestContext(
            store=store,
            data_ttl_days=settings.data_ttl_days,
            idempotency=idempotency,
            persistence=persistence,
            sequences=target.sequence_engine(store, SEQUENCES_DIR),
        )
        report = sunset.run(store, policy(target), moment, sunset.ingest_emitter(context))
    return {
        **report.summary(),
        "to_mark_cold_emails": report.to_mark_cold,
        "to_unsubscribe_emails": report.to_unsubscribe,
    }


def backfill(
    target: Target,
    *,
    dry_run: bool = True,
    restart: bool = False,
    progress: sunset.Progress | None = None,
) -> dict[str, Any]:
    """Create the ``ENGAGEMENT`` items subscribers from before list hygiene lack, from their
    recorded events (``sunset.backfill``): idempotent, resumable where an unfinished run stopped
    (``restart``: from the first subscriber). ``progress(looked at, total)`` after each page."""
    found = sunset.backfill(target.subscriber_store(), dry_run=dry_run, restart=restart, progress=progress)
    return asdict(found)
