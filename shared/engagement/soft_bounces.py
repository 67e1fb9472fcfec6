"""Soft-bounce escalation: an address that soft-bounces again and again is suppressed.

A transient bounce (SES ``bounceType: Transient``: mailbox full, message too large, a
receiving server's temporary refusal) is counted, not suppressed: the next mail may arrive.
An address that soft-bounces ``limit`` mails (default 3) within ``window_days`` days
(default 30) is suppressed with reason ``soft_bounce_escalation``, as a permanent bounce would
be (``shared.engagement.suppression``): the mail keeps failing, and every further attempt
counts against the account's reputation.

How it is decided, so that duplicate and out-of-order SES events give the same answer:
- the evidence is the subscriber's own event items (the events table, ``SUB#<email>``), which
  the consumer writes once per SES event (its key is the event's identity). Nothing else is
  stored: no counter to drift;
- what counts is *mails* (distinct SES message ids) with a transient bounce: one message
  reported twice, or redelivered by SQS, counts once;
- after the consumer wrote (or found) a transient bounce at time ``t``, it reads the
  subscriber's transient bounces from ``t - window`` to ``t + window`` (one Query of that key
  range, a FilterExpression on the type) and suppresses when any ``window`` within it holds
  ``limit`` mails. Whichever of the bounces is written last sees all the others, whatever the
  order they came in; a redelivery of a bounce whose suppression did not happen (a crash in
  between) runs the check again and repairs it.

Cost: nothing for mail that does not soft-bounce; per transient bounce, one Query of one
subscriber's events over twice the window (a few items, about 0.5-1 RRU).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from shared.core import clock
from shared.store import keys
from shared.store.dynamo import deserialize, query_all, values
from shared.store.subscribers import SubscriberStore

SOFT_BOUNCE_ESCALATION = "soft_bounce_escalation"  # the suppression reason
TRANSIENT = "Transient"


@dataclass(frozen=True)
class SoftBouncePolicy:
    limit: int = 3  # soft-bounced mails ...
    window_days: int = 30  # ... within this many days suppress the address

    @property
    def window(self) -> timedelta:
        return timedelta(days=self.window_days)

    def describe(self) -> str:
        return f"{self.limit} soft-bounced mails within {self.window_days} days"


def _parse(at: str) -> datetime:
    return datetime.fromisoformat(at.replace("Z", "+00:00"))


def events_around(
    store: SubscriberStore,
    email: str,
    at: str,
    window: timedelta,
    *,
    condition: str,
    projection: str,
    consistent: bool = False,
    **placeholders: object,
) -> Iterator[dict[str, Any]]:
    """The subscriber's event items from ``at - window`` to ``at + window`` that meet
    ``condition`` (a FilterExpression: ``#type`` and ``#at`` name the type and the time,
    ``placeholders`` give its values), as plain dicts: one Query of the subscriber's key range."""
    moment = clock.parse_iso(at)
    low = f"{keys.EVT}{keys.SEP}{clock.iso(moment - window)}"
    high = f"{keys.EVT}{keys.SEP}{clock.iso(moment + window)}{keys.SEP}\uffff"
    for raw in query_all(
        store.client,
        TableName=store.events_table,
        KeyConditionExpression="PK = :pk AND SK BETWEEN :low AND :high",
        FilterExpression=condition,
        ExpressionAttributeNames={"#type": "type", "#at": "at"},
        ExpressionAttributeValues=values(pk=keys.sub_pk(email), low=low, high=high, **placeholders),
        ProjectionExpression=projection,
        ConsistentRead=consistent,
    ):
        yield deserialize(raw)


def soft_bounces_around(store: SubscriberStore, email: str, at: str, window: timedelta) -> dict[str, str]:
    """The subscriber's soft-bounced mails from ``at - window`` to ``at + window``: SES message
    id -> the earliest transient bounce of it (ISO time)."""
    found: dict[str, str] = {}
    for item in events_around(
        store,
        email,
        at,
        window,
        condition="#type = :bounce AND bounce_type = :transient",
        projection="ses_message_id, #at",
        consistent=True,
        bounce="bounce",
        transient=TRANSIENT,
    ):
        message, when = str(item.get("ses_message_id", "")), str(item.get("at", ""))
        if message and when and (message not in found or when < found[message]):
            found[message] = when
    return found


def escalates(bounces: Iterable[str], policy: SoftBouncePolicy) -> bool:
    """Whether some ``window`` of time holds ``limit`` of these bounce times."""
    times = sorted(_parse(at) for at in bounces)
    n = policy.limit
    return any(times[i + n - 1] - times[i] <= policy.window for i in range(len(times) - n + 1))
