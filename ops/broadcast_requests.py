"""A broadcast request from an operator's input, the one way the CLI (``mailstep broadcast
send``), the MCP tools (``broadcast_dry_run``, ``broadcast_send``) and the console build it."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from shared.broadcasts.model import Broadcast, BroadcastRequest, parse_request
from shared.broadcasts.records import SEND_WINDOW_DAYS
from shared.core import clock
from shared.core.errors import FieldProblem, InvalidInput

NON_OPENERS = "non-openers"  # the one audience a resend has (``--to``)
_AFTER = re.compile(r"^\s*(\d{1,6})\s*([mhd])\s*$")
_UNITS = {"m": 60, "h": 3600, "d": 86400}
MIN_AFTER = timedelta(hours=1)  # time for people to open the original
MAX_AFTER = timedelta(days=SEND_WINDOW_DAYS - 2)  # the original's pages expire after its window


def new_broadcast_id(now: datetime | None = None) -> str:
    """``bc-<UTC date>-<time>-<4 hex>``: the id of a broadcast sent without one."""
    return f"bc-{(now or datetime.now(UTC)):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def broadcast_request(
    *,
    template: str,
    subject: str | None = None,
    tags: Iterable[str] = (),
    any_tags: Iterable[str] = (),
    exclude_tags: Iterable[str] = (),
    where: Iterable[str] = (),
    topic: str | None = None,
    at: str | None = None,
    broadcast_id: str | None = None,
    opened: Iterable[str] = (),
    clicked: Iterable[str] = (),
    not_opened: Iterable[str] = (),
    engaged_within_days: int | None = None,
    not_engaged_within_days: int | None = None,
    machine_opens: bool = False,
) -> BroadcastRequest:
    """The validated request (``InvalidInput`` names the first bad field); a fresh id when
    ``broadcast_id`` is None."""
    return parse_request(
        id=broadcast_id or new_broadcast_id(),
        template=template,
        subject=subject,
        audience={
            "tags": list(tags),
            "any_tags": list(any_tags),
            "exclude_tags": list(exclude_tags),
            "where": list(where),
            "topic": topic,
            "opened": list(opened),
            "clicked": list(clicked),
            "not_opened": list(not_opened),
            "engaged_within_days": engaged_within_days,
            "not_engaged_within_days": not_engaged_within_days,
            "machine_opens": machine_opens,
        },
        at=at,
    )


def _refused(name: str, message: str) -> InvalidInput:
    return InvalidInput(f"--{name.replace('_', '-')}: {message}", [FieldProblem(name, message)])


def parse_after(text: str) -> timedelta:
    """``48h``, ``90m``, ``2d``: how long after the original's start its resend goes out."""
    match = _AFTER.fullmatch(text or "")
    if not match:
        raise _refused("after", f"{text!r} is not a duration: use e.g. 90m, 48h or 2d")
    after = timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2)])
    if not MIN_AFTER <= after <= MAX_AFTER:
        expire = "the original's recipients expire after its send window"
        raise _refused("after", f"must be between 1h and {MAX_AFTER.days}d ({expire})")
    return after


def resend_request(
    original: Broadcast,
    *,
    to: str = NON_OPENERS,
    after: str,
    subject: str | None = None,
    template: str | None = None,
    broadcast_id: str | None = None,
    now: datetime | None = None,
) -> BroadcastRequest:
    """The follow-up of ``original`` to its recipients who did not open it as a person, at
    ``after`` past its start (now when that has passed): same topic, its template and subject
    unless given. Its id defaults to ``<original>-resend`` (cut to fit the 64 characters)."""
    if to != NON_OPENERS:
        raise _refused("to", f"{to!r}: a resend goes to {NON_OPENERS!r}")
    start = clock.parse_iso(original.at or original.created_at)
    moment = start + parse_after(after)
    return parse_request(
        id=broadcast_id or f"{original.id[:57]}-resend",
        template=template or original.template,
        subject=subject if subject is not None else original.subject,
        audience={
            "recipients_of": original.id,
            "not_opened": [original.id],
            "topic": original.audience.topic,
        },
        at=moment if moment > (now or clock.utc_now()) else None,
    )
