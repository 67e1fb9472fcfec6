"""The list-hygiene items of the events table (docs/hygiene.md, shared.engagement.sunset).

``SUB#<email>`` / ``ENGAGEMENT``, one per subscriber, written when a profile starts (or starts
again) being subscribed, and moved by each day's first human open or click:

- ``since``: when the subscriber (re)subscribed: the starting point of a reader who never engaged;
- ``engaged_at`` / ``day``: the last human open or click (``day``: its UTC date, else ``since``'s);
- ``hygiene_key``: the sparse ``HygieneIndex`` key, ``E#<day>#<shard>`` while warm (the day of the
  last engagement), ``C#<cold day>#<shard>`` once cold; removed when the sunset unsubscribed them;
- ``cold_at`` (cold since), ``cold_pending`` (marked cold, its ``subscriber.cold`` event not yet
  confirmed written), ``sunset_at`` (unsubscribed by the sunset).

A separate item, not attributes of the profile: profile writes replace the whole profile under its
version, and the main table's stream sends every profile change to the webhook dispatcher; this
item is written at most once per subscriber per day and reaches neither. In the events table
(beside the subscriber's events, whose partition it shares; erasing the subscriber deletes it):
the main table holds no index (DESIGN.md), and a broadcast's Scan of the main table does not read
it. The events table's stream filter passes only event items (``type``) to the webhooks.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

from shared.store import keys


def day_of(at: str) -> str:
    """The UTC date (``YYYY-MM-DD``) of a stored time (``YYYY-MM-DDTHH:MM:SS.mmmZ``)."""
    return date.fromisoformat(at[:10]).isoformat()


def shift(day: str, days: int) -> str:
    return (date.fromisoformat(day) + timedelta(days=days)).isoformat()


def days_between(first: str, last: str) -> int:
    return (date.fromisoformat(last) - date.fromisoformat(first)).days


def engagement_key(email: str) -> tuple[str, str]:
    return keys.sub_pk(email), keys.ENGAGEMENT


def warm_key(email: str, day: str) -> str:
    return keys.hygiene_key(keys.HYGIENE_WARM, day, keys.index_shard(email))


def cold_key(email: str, day: str) -> str:
    return keys.hygiene_key(keys.HYGIENE_COLD, day, keys.index_shard(email))


def engagement_item(email: str, since: str) -> dict[str, Any]:
    """The item of a subscriber who (re)subscribed at ``since`` and has not engaged since."""
    pk, sk = engagement_key(email)
    day = day_of(since)
    return {
        "PK": pk,
        "SK": sk,
        "email": email,
        "since": since,
        "day": day,
        "hygiene_key": warm_key(email, day),
    }


def backfilled_item(email: str, since: str, engaged_at: str | None) -> dict[str, Any]:
    """The item of a subscriber from before list hygiene (``mailstep hygiene backfill``), from
    what their records say: subscribed at ``since``, last engaged as a person at ``engaged_at``
    (None: never). Its day is the later of the two days, as the consumer would have kept it."""
    item = engagement_item(email, since)
    if engaged_at is not None:
        item["engaged_at"] = engaged_at
        if day_of(engaged_at) > item["day"]:
            item["day"] = day_of(engaged_at)
            item["hygiene_key"] = warm_key(email, item["day"])
    return item
