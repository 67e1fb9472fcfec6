"""List hygiene for operators (``mailstep hygiene report|run``, the MCP tools hygiene_report and
hygiene_run): the sunset's report and the daily run, through the same logic the hygiene function
runs (``shared.engagement.sunset``), against a target.

"Now" is the target's: the wall clock for a deployed stack, the runtime's calendar for the local
runtime (``mailstep local advance``), or the day an operator names (``at``).
"""

from __future__ import annotations

import json
import urllib.request
from dataclasses import asdict
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shared.core.errors import FieldProblem, InvalidInput
from shared.engagement import sunset

if TYPE_CHECKING:
    from ops.targets import Target

RUNTIME_STATE = "runtime.json"  # the running local runtime's state file (cli.local.runtime)
RUN_HOUR = 4  # the schedule's hour (shared.core.specs.HYGIENE_SCHEDULE): an `at` day runs at 04:00 UTC


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
        state = json.loads((Path(target.name) / RUNTIME_STATE).read_text())
        with urllib.request.urlopen(state["api_url"] + "/_local/status", timeout=10) as answer:  # noqa: S310
            return datetime.fromisoformat(json.loads(answer.read())["clock"]["calendar"])
    return datetime.now(UTC)


def report(target: Target, *, at: str | None = None) -> dict[str, Any]:
    """Cold subscribers, those at risk within 14 days, what the next daily run would change."""
    found = sunset.report(target.subscriber_store(), policy(target), now(target, at))
    return asdict(found)


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
