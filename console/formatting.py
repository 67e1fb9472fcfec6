"""How the console writes numbers, times and the platform's internal words for people: the
Jinja2 filters of :class:`console.site.Console`.

- ``num``: thousands separated (``12,345``);
- ``when``: a time with its zone, on one line (``2026-12-01 09:00 UTC``, in a ``<time>``
  element that carries the exact ISO value); ``ago``: the same time from now (``in 12 days``,
  ``3 hours ago``);
- ``words``: an internal key in words (``topic_opt_out`` -> "opted out of the topic",
  ``paused_reputation`` -> "held by the reputation pause"); ``tone``: the colour class of a
  status (good, busy, warn, bad, off);
- ``breakable``: an address or id that may break after ``@ . - _ /`` (and nowhere else) when
  a narrow screen has no room for it on one line.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from markupsafe import Markup, escape

from shared.core import clock

WORDS = {
    # broadcast statuses (shared.broadcasts.model)
    "scheduled": "scheduled",
    "resolving": "finding the audience",
    "sending": "sending",
    "done": "sent",
    "cancelled": "cancelled",
    "failed": "failed",
    "paused_reputation": "held by the reputation pause",
    "held": "held: SES says not yet",
    # why a broadcast waits (HOLD_*)
    "identity_unverified": "SES has not verified the sending identity yet",
    "daily_quota": "the account's 24-hour SES quota is spent",
    "warmup": "today's warm-up allowance is used",
    # why a recipient was skipped (SKIP_REASONS)
    "no_profile": "no such subscriber",
    "suppressed": "suppressed",
    "unsubscribed": "unsubscribed",
    "topic_opt_out": "opted out of the topic",
    # events of a subscriber's timeline
    "send": "sent",
    "delivery": "delivered",
    "open": "opened",
    "click": "clicked",
    "bounce": "bounced",
    "complaint": "complained",
    "unsubscribe": "unsubscribed",
    "subscribe": "subscribed",
    "signup": "signed up",
    "confirm": "confirmed",
    "reject": "rejected",
    "delivery_delay": "delayed",
    # how a sequence's execution ended early (ops.sequence_view.ended)
    "exit": "exited",
    "stopped": "stopped",
}
TONES = {
    "good": ("done", "subscribed", "delivery", "open", "click", "on", "active", "confirm", "exit"),
    "busy": ("scheduled", "resolving", "sending", "send"),
    "warn": ("paused_reputation", "held", "delivery_delay", "failing"),
    "bad": ("failed", "bounce", "complaint", "suppressed", "disabled", "reject"),
    "off": ("cancelled", "unsubscribed", "unsubscribe", "stopped"),
}
TONE = {key: tone for tone, found in TONES.items() for key in found}
_BREAK_AFTER = re.compile(r"([@._/-])")


def num(value: Any) -> str:
    """``12345`` -> ``12,345``; None -> ``-``; anything not a number as it is."""
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    return f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"


def pct(rate: float | None) -> str:
    return "-" if rate is None else f"{rate * 100:.2f}%"


def moment(value: Any) -> datetime | None:
    """An ISO 8601 string (a trailing ``Z`` too) or a datetime as an aware UTC datetime (one
    without a zone is UTC, as the platform stores them); None when it is none of these."""
    if isinstance(value, datetime):
        found = value if value.tzinfo else value.replace(tzinfo=UTC)
    else:
        try:
            found = clock.parse_iso(str(value or "").strip())
        except ValueError:
            return None
    return found.astimezone(UTC)


def when(value: Any) -> Markup | str:
    """``2026-12-01 09:00 UTC`` in a ``<time>`` element (never broken across lines); ``""`` for
    no time, the value itself when it is not a time."""
    found = moment(value)
    if found is None:
        return str(value or "")
    iso = found.isoformat(timespec="seconds")
    return Markup('<time datetime="{}">{}</time>').format(iso, found.strftime("%Y-%m-%d %H:%M UTC"))


def ago(value: Any, now: datetime | None = None) -> str:
    """``in 12 days``, ``3 hours ago``, ``just now``: ``value`` from ``now``; ``""`` for no time."""
    found = moment(value)
    if found is None:
        return ""
    seconds = (found - (now or datetime.now(UTC))).total_seconds()
    size = abs(seconds)
    if size < 60:
        return "just now"
    for unit, length in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if size >= length:
            n = round(size / length)
            words = f"{n} {unit}{'' if n == 1 else 's'}"
            return f"in {words}" if seconds > 0 else f"{words} ago"
    return "just now"  # pragma: no cover - the loop always answers from 60 s on


def took(start: Any, end: Any) -> str:
    """How long from ``start`` to ``end``: ``45 s``, ``12 min``, ``3 h 20 min``, ``2 days 4 h``."""
    first, last = moment(start), moment(end)
    if first is None or last is None:
        return "-"
    seconds = max(0, round((last - first).total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    minutes, hours = seconds // 60, seconds // 3600
    if hours < 1:
        return f"{minutes} min"
    if hours < 24:
        return f"{hours} h {minutes % 60} min"
    return f"{hours // 24} day{'' if hours // 24 == 1 else 's'} {hours % 24} h"


def words(value: Any) -> str:
    """An internal key in words; one this module does not know, with its underscores as spaces."""
    key = str(value or "")
    return WORDS.get(key, key.replace("_", " "))


def tone(value: Any) -> str:
    """The colour class (``tone-good`` ...) of a status or event key."""
    return f"tone-{TONE.get(str(value or ''), 'plain')}"


def breakable(value: Any) -> Markup:
    """``value`` escaped, with a line-break opportunity (``<wbr>``) after each ``@ . - _ /``."""
    escaped = str(escape(str(value or "")))  # no markup left but the <wbr> added here
    return Markup(_BREAK_AFTER.sub(r"\1<wbr>", escaped))  # noqa: S704


def condition_words(data: Any) -> str:
    """A sequence's ``if`` condition (``condition_to_data``'s JSON) in words: ``{"tag": "pro"}``
    -> ``tagged pro``, ``{"opened": "news/x"}`` -> ``opened news/x``; what it does not know, as
    compact JSON."""
    import json

    if not isinstance(data, dict):
        return json.dumps(data, ensure_ascii=False)
    joiner = {"all": " and ", "any": " or "}
    for key, value in data.items():
        if key in joiner and isinstance(value, list):
            return "(" + joiner[key].join(condition_words(v) for v in value) + ")"
        if key == "not":
            return "not " + condition_words(value)
        if key == "tag":
            return f"tagged {value}"
        if key in ("opened", "clicked", "sent"):
            return f"{key} {value}"
    if "attribute" in data:
        tests = {"equals": "=", "greater": ">", "less": "<", "in": "in"}
        for key, sign in tests.items():
            if key in data:
                return f"{data['attribute']} {sign} {json.dumps(data[key], ensure_ascii=False)}"
        if "exists" in data:
            return f"{'has' if data['exists'] else 'has no'} {data['attribute']}"
    return json.dumps(data, ensure_ascii=False, sort_keys=True)


FILTERS = {
    "num": num,
    "pct": pct,
    "when": when,
    "ago": ago,
    "took": took,
    "words": words,
    "tone": tone,
    "breakable": breakable,
    "condition": condition_words,
}
