"""Events-table records: the one builder of a subscriber's timeline items.

Every writer of the events table (events ingestion, the send pipeline, unsubscribe pages,
sequence failures, SES engagement) builds its item here, so each item has the same key
shape (``SUB#<email>`` / ``EVT#<at>#<type>#<suffix>``), the same ``at`` format and a ``ttl``
of ``DATA_TTL_DAYS`` after ``at``. An item with a ``source`` or ``template`` is in the events
indexes under ``source_key`` / ``template_key``: ``<value>#<shard>``, the shard picked by the
address (16 shards, so no index key takes more than 1/16 of a broadcast's events); a
Delivery is not indexed (:data:`UNINDEXED_TYPES`).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from shared.core import clock
from shared.core.specs import TTL_ATTRIBUTE
from shared.store import keys

SUFFIX_LEN = 16
# field -> the attribute that puts the item in an events index (sharded: keys.index_key)
INDEXED = {"source": "source_key", "template": "template_key"}
# Event types kept out of the indexes: one Delivery per mail is most of the events, and two
# index writes would double its cost (4 write units instead of 2). Its count is in the
# counters; the subscriber's timeline still has it.
UNINDEXED_TYPES = frozenset({"delivery"})


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
    if kind not in UNINDEXED_TYPES:
        shard = keys.index_shard(email)
        for field, index_attribute in INDEXED.items():
            if item.get(field):
                item[index_attribute] = keys.index_key(str(item[field]), shard)
    return item
