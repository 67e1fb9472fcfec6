"""A broadcast request from an operator's input, the one way the CLI (``mailstep broadcast
send``), the MCP tools (``broadcast_dry_run``, ``broadcast_send``) and the console build it."""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from datetime import UTC, datetime

from shared.broadcasts.model import BroadcastRequest, parse_request


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
        },
        at=at,
    )
