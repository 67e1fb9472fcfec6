"""Engagement conditions of an audience: which of a page's candidates opened or clicked what.

Only for the candidates a page already matched on tags and attributes, in batches (never a
scan):

- ``opened X`` / ``clicked X`` (as a person): the subscriber's unique markers of that source,
  ``SUB#<email>`` / ``UNIQ#open#source#X`` and ``UNIQ#click#source#X`` in the main table,
  written by the engagement consumer with the first human open (click) of any mail of
  broadcast or sequence ``X``; machine opens and clicks never write one
  (shared.engagement.machine). A click counts as an open (the mail was read, its images
  blocked or not). One keys-only BatchGetItem per 100 keys.
- ``not opened X``: the send-once claim of broadcast ``X``, ``SEND#X#broadcast`` (it was sent to
  them; a released claim is deleted), and neither marker of ``X``. Same BatchGetItem.
- ``engaged within N days`` (and ``not``): the subscriber's ``ENGAGEMENT`` item in the events
  table (shared.store.hygiene), whose ``engaged_at`` is the last human open or click: one
  BatchGetItem per 100 subscribers. No item (a subscriber from before list hygiene) or no
  ``engaged_at``: not engaged.
- ``machine_opens``: a condition a person's engagement did not already settle looks at the
  subscriber's own events too, one Query of their ``EVT#`` range (from the earliest day a
  condition needs) filtered on opens and clicks a machine made; the Queries run at once.

``now`` is read once per call: "within N days" counts back from when the page is resolved.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from shared.broadcasts.model import STEP, Audience
from shared.core import clock
from shared.store import keys
from shared.store.dynamo import batch_get, deserialize, key, query_all, values
from shared.store.stats import SOURCE_SCOPE

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

CHUNK = 100  # keys per BatchGetItem (DynamoDB's maximum)
OPEN, CLICK = "open", "click"


@dataclass(frozen=True)
class Engagement:
    """What is known of one subscriber for the conditions at hand."""

    markers: frozenset[tuple[str, str]]  # (metric, source) of their human opens/clicks asked for
    sent: frozenset[str]  # the broadcasts asked for that were sent to them
    engaged_at: str | None  # their last human open or click
    machine: tuple[tuple[str, str, str], ...] = ()  # (type, source, at) of machine opens/clicks


def holds(audience: Audience, found: Engagement, now: datetime) -> bool:
    """Whether one subscriber meets every engagement condition of ``audience``."""
    machine = audience.machine_opens

    def did(metric: str, source: str) -> bool:
        """``click``: clicked; ``open``: opened or clicked (a click shows the mail was read,
        images blocked or not)."""
        metrics = {metric} if metric == CLICK else {OPEN, CLICK}
        if any((m, source) in found.markers for m in metrics):
            return True
        return machine and any(t in metrics and s == source for t, s, _ in found.machine)

    def engaged_since(days: int) -> bool:
        since = clock.iso(now - timedelta(days=days))
        if found.engaged_at is not None and found.engaged_at >= since:
            return True
        return machine and any(at >= since for _, _, at in found.machine)

    return (
        all(did(OPEN, s) for s in audience.opened)
        and all(did(CLICK, s) for s in audience.clicked)
        and all(s in found.sent and not did(OPEN, s) for s in audience.not_opened)
        and (audience.engaged_within_days is None or engaged_since(audience.engaged_within_days))
        and (audience.not_engaged_within_days is None or not engaged_since(audience.not_engaged_within_days))
    )


class EngagementReader:
    """Reads what :func:`holds` needs for a page's candidates (main and events tables)."""

    def __init__(
        self,
        client: DynamoDBClient,
        table: str,
        events_table: str,
        now: Callable[[], datetime] = clock.utc_now,
    ) -> None:
        self.client, self.table, self.events_table, self.now = client, table, events_table, now

    def passing(self, audience: Audience, emails: Iterable[str], pool: ThreadPoolExecutor) -> set[str]:
        """Those of ``emails`` that meet every engagement condition (all of them when none)."""
        wanted = list(dict.fromkeys(emails))
        if not audience.engagement or not wanted:
            return set(wanted)
        if not self.events_table:
            raise RuntimeError("engagement conditions need the events table (EVENTS_TABLE_NAME)")
        now = self.now()
        markers, sent = self._markers(audience, wanted, pool)
        engaged = self._engaged_at(audience, wanted, pool)
        machine = self._machine(audience, wanted, now, pool)
        return {
            email
            for email in wanted
            if holds(
                audience,
                Engagement(
                    markers=frozenset(markers.get(email, ())),
                    sent=frozenset(sent.get(email, ())),
                    engaged_at=engaged.get(email),
                    machine=tuple(machine.get(email, ())),
                ),
                now,
            )
        }

    # ----- reads ------------------------------------------------------------------------------
    def _batches(
        self, table: str, wanted: list[dict[str, Any]], pool: ThreadPoolExecutor, **extra: Any
    ) -> list[dict[str, Any]]:
        chunks = [wanted[i : i + CHUNK] for i in range(0, len(wanted), CHUNK)]

        def read(chunk: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return [deserialize(item) for item in batch_get(self.client, table, chunk, **extra)]

        futures = [pool.submit(read, chunk) for chunk in chunks]
        return [item for future in futures for item in future.result()]

    def _markers(
        self, audience: Audience, emails: list[str], pool: ThreadPoolExecutor
    ) -> tuple[dict[str, set[tuple[str, str]]], dict[str, set[str]]]:
        """Per subscriber: the (metric, source) markers that exist, and the broadcasts sent."""
        asked: dict[str, tuple[str, str, str]] = {}  # SK -> (kind, metric, source)
        opened = (*audience.opened, *audience.not_opened)
        for source in dict.fromkeys(opened):
            asked[keys.unique_marker_sk(OPEN, SOURCE_SCOPE, source)] = ("marker", OPEN, source)
        for source in dict.fromkeys((*opened, *audience.clicked)):  # a click counts as an open too
            asked[keys.unique_marker_sk(CLICK, SOURCE_SCOPE, source)] = ("marker", CLICK, source)
        for source in audience.not_opened:
            asked[keys.send_claim_sk(source, STEP)] = ("sent", "", source)
        markers: dict[str, set[tuple[str, str]]] = {}
        sent: dict[str, set[str]] = {}
        if not asked:
            return markers, sent
        wanted = [key(keys.sub_pk(e), sk) for e in emails for sk in asked]
        for item in self._batches(self.table, wanted, pool, ProjectionExpression="PK, SK"):
            kind, metric, source = asked[item["SK"]]
            email = keys.email_from_sub(item["PK"])
            if kind == "sent":
                sent.setdefault(email, set()).add(source)
            else:
                markers.setdefault(email, set()).add((metric, source))
        return markers, sent

    def _engaged_at(self, audience: Audience, emails: list[str], pool: ThreadPoolExecutor) -> dict[str, str]:
        if audience.engaged_within_days is None and audience.not_engaged_within_days is None:
            return {}
        wanted = [key(keys.sub_pk(e), keys.ENGAGEMENT) for e in emails]
        items = self._batches(self.events_table, wanted, pool, ProjectionExpression="email, engaged_at")
        return {i["email"]: i["engaged_at"] for i in items if i.get("engaged_at")}

    def _machine(
        self, audience: Audience, emails: list[str], now: datetime, pool: ThreadPoolExecutor
    ) -> dict[str, list[tuple[str, str, str]]]:
        """Machine opens and clicks of each subscriber (one Query each, all at once), from the
        earliest day a "within N days" condition needs, else from their first event."""
        if not audience.machine_opens:
            return {}
        days = [d for d in (audience.engaged_within_days, audience.not_engaged_within_days) if d is not None]
        per_source = audience.opened or audience.clicked or audience.not_opened
        start = keys.EVT + keys.SEP
        if days and not per_source:
            start += clock.iso(now - timedelta(days=max(days)))
        futures = {e: pool.submit(self._machine_events, e, start) for e in emails}
        return {e: f.result() for e, f in futures.items()}

    def _machine_events(self, email: str, start: str) -> list[tuple[str, str, str]]:
        items = query_all(
            self.client,
            TableName=self.events_table,
            KeyConditionExpression="PK = :pk AND SK BETWEEN :start AND :end",
            FilterExpression="#type IN (:open, :click) AND attribute_exists(machine)",
            ExpressionAttributeNames={"#type": "type", "#source": "source", "#at": "at"},
            ExpressionAttributeValues=values(
                pk=keys.sub_pk(email), start=start, end=keys.EVT + keys.SEP + "~", open=OPEN, click=CLICK
            ),
            ProjectionExpression="#type, #source, #at",
        )
        found = [deserialize(i) for i in items]
        return [(str(i["type"]), str(i.get("source", "")), str(i.get("at", ""))) for i in found]
