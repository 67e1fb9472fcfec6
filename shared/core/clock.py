"""The clock: "now" as mailstep writes it, epoch seconds and TTLs.

Every timestamp mailstep stores is ``YYYY-MM-DDTHH:MM:SS.mmmZ`` (UTC, milliseconds), so that
sort keys built from it sort by time; every ``ttl`` attribute is epoch seconds (DynamoDB TTL).
Code that has a clock of its own (``now=`` parameters, ``deps.now``) passes its moment in.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

DAY_SECONDS = 86_400


def utc_now() -> datetime:
    """The current moment, timezone-aware (UTC)."""
    return datetime.now(UTC)


# The local runtime's calendar (`mailstep local advance`) is this far ahead of the wall clock; its
# execution environments set it per invocation. Always 0 in Lambda.
CALENDAR_OFFSET_S = 0.0


def calendar_now() -> datetime:
    """The moment whose date counts as "today" for per-day budgets (the warm-up): the wall
    clock in Lambda; locally, the runtime's calendar, so a test can move to the next day."""
    return datetime.now(UTC) + timedelta(seconds=CALENDAR_OFFSET_S)


def iso(moment: datetime | None = None) -> str:
    """``moment`` (default: now) as ``YYYY-MM-DDTHH:MM:SS.mmmZ`` in UTC."""
    return (moment or utc_now()).astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_iso(value: str) -> datetime:
    """An ISO 8601 time (``Z`` or an offset; none means UTC) -> an aware datetime.
    Raises ValueError when ``value`` is not one."""
    moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def epoch_seconds() -> float:
    """Wall time in epoch seconds (deadlines, token expiry)."""
    return time.time()


def epoch(moment: datetime | None = None) -> int:
    """``moment`` (default: now) in whole epoch seconds."""
    return int((moment or utc_now()).timestamp())


def ttl_after(days: float, moment: datetime | str | None = None) -> int:
    """The ``ttl`` (epoch seconds) of an item that expires ``days`` after ``moment``
    (a datetime, an ISO string as mailstep stores them, or now)."""
    start = parse_iso(moment) if isinstance(moment, str) else (moment or utc_now())
    return int((start + timedelta(days=days)).timestamp())
