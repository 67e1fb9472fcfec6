"""Events-table records: the one builder of a subscriber's timeline items.

Every writer of the events table (events ingestion, the send pipeline, unsubscribe pages,
sequence failures, SES engagement) builds its item here, so each item has the same key
shape (``SUB#<email>`` / ``EVT#<at>#<type>#<suffix>``), the same ``at`` format and a ``ttl``
of ``DATA_TTL_DAYS`` after ``at``.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from shared.core import clock
from shared.core.specs import TTL_ATTRIBUTE
from shared.store import keys

SUFFIX_LEN = 16


def event_record(
    email: str,
    kind: str,
    *,
    at: datetime | str,
    ttl_days: int,
    suffix: str | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """The events-table item of one ``kind`` event of ``email`` at ``at`` (a moment, or an
    ISO time as mailstep stores them), expiring ``ttl_days`` later. ``suffix`` makes the sort
    key unique (random when not given; a stable one makes a rewrite land on the same item).
    ``fields`` are stored as given; a field whose value is None is left out."""
    ts = at if isinstance(at, str) else clock.iso(at)
    item: dict[str, Any] = {
        "PK": keys.sub_pk(email),
        "SK": keys.event_sk(ts, kind, suffix or uuid.uuid4().hex[:SUFFIX_LEN]),
        "type": kind,
        "at": ts,
        TTL_ATTRIBUTE: clock.ttl_after(ttl_days, at),
    }
    item.update({name: value for name, value in fields.items() if value is not None})
    return item
