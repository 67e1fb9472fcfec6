"""A broadcast request from an operator's input, the one way the CLI (``mailstep broadcast
send``), the MCP tools (``broadcast_dry_run``, ``broadcast_send``) and the console build it."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError as PydanticValidationError

from shared.broadcasts.abtest import (
    MAX_DECIDE_S,
    MAX_MIN_SAMPLE,
    MAX_SHARE,
    MAX_VARIANTS,
    METRICS,
    MIN_DECIDE_S,
    MIN_SHARE,
    Variant,
)
from shared.broadcasts.model import Broadcast, BroadcastRequest, parse_request
from shared.broadcasts.records import SEND_WINDOW_DAYS
from shared.core import clock
from shared.core.errors import FieldProblem, InvalidInput
from shared.core.models import invalid_input

NON_OPENERS = "non-openers"  # the one audience a resend has (``--to``)
_AFTER = re.compile(r"^\s*(\d{1,6})\s*([mhd])\s*$")
_UNITS = {"m": 60, "h": 3600, "d": 86400}
MIN_AFTER = timedelta(hours=1)  # time for people to open the original
MAX_AFTER = timedelta(days=SEND_WINDOW_DAYS - 2)  # the original's pages expire after its window
MIN_VARIANTS = 2


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


def parse_duration(name: str, text: str, low: timedelta, high: timedelta, why: str) -> timedelta:
    """``48h``, ``90m``, ``2d`` within [low, high]; ``InvalidInput`` names option ``name``."""
    match = _AFTER.fullmatch(text if isinstance(text, str) else "")
    if not match:
        raise _refused(name, f"{text!r} is not a duration: use e.g. 90m, 48h or 2d")
    duration = timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2)])
    if not low <= duration <= high:
        raise _refused(name, f"must be between {_shown(low)} and {_shown(high)} ({why})")
    return duration


def _shown(duration: timedelta) -> str:
    seconds = int(duration.total_seconds())
    for unit in ("d", "h", "m"):
        if seconds % _UNITS[unit] == 0:
            return f"{seconds // _UNITS[unit]}{unit}"
    return f"{seconds}s"  # pragma: no cover - the bounds are whole minutes


def parse_after(text: str) -> timedelta:
    """``48h``, ``90m``, ``2d``: how long after the original's start its resend goes out."""
    expire = "the original's recipients expire after its send window"
    return parse_duration("after", text, MIN_AFTER, MAX_AFTER, expire)


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


# ----- A/B tests (docs/broadcasts.md, "A/B tests") --------------------------------------------
def parse_variant(text: str, number: int, template: str, subject: str | None) -> dict[str, Any]:
    """One ``--variant``: ``template=KEY``, ``subject=TEXT`` or ``template=KEY,subject=TEXT``;
    what it does not name comes from ``--template`` / ``--subject``."""
    name = f"variant {number}"
    if not isinstance(text, str) or not text.strip():
        raise _refused(
            "variant", f"{name} is empty: use template=KEY, subject=TEXT or template=KEY,subject=TEXT"
        )
    variant: dict[str, Any] = {"template": template, "subject": subject}
    rest = text.strip()
    if rest.startswith("template="):
        chosen, _, rest = rest.removeprefix("template=").partition(",")
        variant["template"] = chosen.strip()
        if not rest:
            return variant
    if not rest.startswith("subject="):
        raise _refused(
            "variant", f"{name} {text!r}: use template=KEY, subject=TEXT or template=KEY,subject=TEXT"
        )
    variant["subject"] = rest.removeprefix("subject=").strip()
    return variant


def ab_request(
    base: BroadcastRequest,
    *,
    variants: Sequence[str],
    test_share: int | None,
    metric: str | None,
    decide_after: str | None,
    min_sample: int | None,
) -> BroadcastRequest:
    """The test broadcast of an A/B test of ``base`` (its id, audience and time): its audience's
    ``test_share`` per cent get the variants; the rest (:func:`rest_request`, written with it)
    gets the winner ``decide_after`` past its start. ``InvalidInput`` names the first bad option."""
    if base.audience.recipients_of is not None or base.audience.split is not None:
        raise _refused("variant", "a resend cannot be an A/B test")
    if not MIN_VARIANTS <= len(variants) <= MAX_VARIANTS:
        raise _refused(
            "variant", f"an A/B test takes {MIN_VARIANTS} to {MAX_VARIANTS} variants (got {len(variants)})"
        )
    if (
        not isinstance(test_share, int)
        or isinstance(test_share, bool)
        or not MIN_SHARE <= test_share <= MAX_SHARE
    ):
        raise _refused("test_share", f"{test_share!r}: a whole per cent from {MIN_SHARE} to {MAX_SHARE}")
    if metric not in METRICS:
        raise _refused("metric", f"{metric!r}: one of {', '.join(METRICS)} (human opens or clicks)")
    if decide_after is None:
        raise _refused("decide_after", "missing: when the winner goes to the rest, e.g. 4h")
    window = timedelta(seconds=MAX_DECIDE_S)
    after = parse_duration(
        "decide_after", decide_after, timedelta(seconds=MIN_DECIDE_S), window, "the test's window"
    )
    if (
        not isinstance(min_sample, int)
        or isinstance(min_sample, bool)
        or not 1 <= min_sample <= MAX_MIN_SAMPLE
    ):
        raise _refused("min_sample", f"{min_sample!r}: a whole number from 1 to {MAX_MIN_SAMPLE}")
    parsed = [_variant(v, i + 1, base.template, base.subject) for i, v in enumerate(variants)]
    first = parsed[0]
    values = base.model_dump()
    values["audience"]["split"] = {"test_of": base.id, "share": test_share, "side": "test"}
    values |= {
        "template": first["template"],
        "subject": first["subject"],
        "ab": {
            "variants": parsed,
            "share": test_share,
            "metric": metric,
            "decide_after_s": int(after.total_seconds()),
            "min_sample": min_sample,
            "rest_id": f"{base.id[:59]}-rest",
        },
    }
    return _variants_checked(values)


def _variant(text: str, number: int, template: str, subject: str | None) -> dict[str, Any]:
    """One ``--variant``, parsed and validated (``InvalidInput`` names it)."""
    variant = parse_variant(text, number, template, subject)
    try:
        Variant.model_validate(variant)
    except PydanticValidationError as exc:
        problem = invalid_input(exc, "variant").problems[0]
        raise _refused("variant", f"variant {number} {problem.field}: {problem.message}") from None
    return variant


def _variants_checked(values: dict[str, Any]) -> BroadcastRequest:
    """``parse_request``, its problems with the test's settings named ``--variant``."""
    try:
        return parse_request(**values)
    except InvalidInput as exc:
        problem = exc.problems[0] if exc.problems else None
        if problem is None or not problem.field.startswith("ab"):
            raise
        raise _refused("variant", problem.message) from None


def rest_request(test: Broadcast) -> BroadcastRequest:
    """The rest of A/B test ``test`` (its record): the same audience minus the test groups, at
    its decision time, with variant A until the decision gives it the winner."""
    assert test.ab is not None and test.audience.split is not None
    start = clock.parse_iso(test.at or test.created_at)
    split = test.audience.split.model_copy(update={"side": "rest"})
    return parse_request(
        id=test.ab.rest_id,
        template=test.ab.variants[0].template,
        subject=test.ab.variants[0].subject,
        audience=test.audience.model_copy(update={"split": split}),
        at=start + timedelta(seconds=test.ab.decide_after_s),
    )


# ----- the new-broadcast form's tag suggestions ----------------------------------------------------
def suggested_tags(broadcasts: Iterable[Broadcast], sequences: Iterable[Any]) -> list[str]:
    """Tags worth offering when an audience is built, from what is at hand without reading a
    subscriber: the tags the given broadcasts' audiences named (all, any, none) and the tags the
    sequences set, remove or test (``tag`` steps and ``if: {tag: ...}`` conditions), sorted."""
    found: set[str] = set()
    for record in broadcasts:
        found.update((*record.audience.tags, *record.audience.any_tags, *record.audience.exclude_tags))

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for name, inner in value.items():
                if name == "tag" and isinstance(inner, str):
                    found.add(inner)
                elif name == "tag" and isinstance(inner, dict):
                    found.update(str(t) for t in (*inner.get("add", ()), *inner.get("remove", ())))
                else:
                    walk(inner)
        elif isinstance(value, list | tuple):
            for inner in value:
                walk(inner)

    for sequence in sequences:
        walk(sequence.model_dump(by_alias=True, mode="json"))
    return sorted(found)
