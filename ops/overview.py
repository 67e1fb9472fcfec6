"""The numbers of the console's overview: engagement per day, totals with the bounce and
complaint rates against SES's thresholds, and active executions per sequence.

What it reads, and why no table is scanned:
- totals: one counters item per source, their shards read together (``StatsStore.sources_of``:
  100 keys per BatchGetItem): every sequence of the catalog, the newest broadcasts, sign-up
  confirmations and test sends;
- per day: the day counters (``StatsStore.daily``: every source's sends, deliveries, unique
  opens and clicks, bounces, complaints, unsubscribes, sign-ups and confirmations per UTC day,
  added in the same transactions as the sources' counters): one Query per shard for the window;
- active executions: each sequence's count kept with its EXEC pairs (``keys.active_key``), read in
  the same BatchGetItem requests as the totals; no ``EXEC#`` partition is read;
- list health: the subscribers by status (``STATS#~list`` / ``TOTAL``, in the same BatchGetItem
  requests) and their changes per day (``list_*`` of the day counters, in the same Queries), both
  folded from the main table's change stream (``shared.store.list_health``): no Scan.

The reads do not depend on one another: they are sent at once (:data:`READERS` at a time), so
the page waits about as long as its slowest read, not their sum.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from shared.core.errors import FieldProblem, InvalidInput
from shared.sequences.validate import Catalog
from shared.store import keys
from shared.store.list_health import total_key, totals_of
from shared.store.stats import Counters, StatsStore, active_count

WINDOWS = (7, 30, 90)
# SES puts an account under review, then may pause its sending, at these rates
# (bounces per send, complaints per send): docs/console.md.
THRESHOLDS = {"bounce": {"review": 0.05, "pause": 0.10}, "complaint": {"review": 0.001, "pause": 0.005}}
DAILY = ("send", "delivery", "open", "click", "bounce", "complaint", "unsubscribe", "signup", "confirm")
# the day counters' field of a metric where it is not the metric's name: opens and clicks per
# day are the subscribers who opened (clicked) a source's mail for the first time that day
DAILY_FIELDS = {"open": "open_unique", "click": "click_unique"}
EXTRA_SOURCES = ("signup", "test")
# the list's changes per day (shared.store.list_health), and the double opt-in confirmations
LIST_DAILY = (
    "list_new",
    "confirm",
    "list_resubscribed",
    "list_unsubscribed",
    "list_suppressed",
    "list_erased",
)
# a person's words for them (the overview's table and legend)
LIST_LABELS = {
    "list_new": "new",
    "confirm": "confirmed (double opt-in)",
    "list_resubscribed": "resubscribed",
    "list_unsubscribed": "unsubscribed",
    "list_suppressed": "suppressed",
    "list_erased": "erased",
    "net": "net growth",
}
MAX_BROADCASTS = 50
READERS = 8  # reads of the overview in flight at once


@dataclass(frozen=True)
class Overview:
    days: int
    dates: tuple[str, ...]
    daily: dict[str, list[int]]  # metric -> one value per date (opens and clicks: unique per day)
    daily_rates: dict[str, list[float | None]]  # bounce and complaint rate per date
    totals: Counters
    sources: tuple[str, ...]
    signups: dict[str, Any]
    active: dict[str, int]  # sequence id -> active executions
    list_health: ListHealth
    thresholds: dict[str, dict[str, float]] = field(default_factory=lambda: THRESHOLDS)

    def rate(self, metric: str) -> float | None:
        sent = self.totals.total("send")
        return self.totals.total(metric) / sent if sent else None

    def public(self) -> dict[str, Any]:
        return {
            "days": self.days,
            "dates": list(self.dates),
            "daily": self.daily,
            "daily_rates": self.daily_rates,
            "totals": {row["metric"]: row for row in self.totals.rows()},
            "rates": {m: self.rate(m) for m in THRESHOLDS},
            "thresholds": self.thresholds,
            "sources": list(self.sources),
            "signups": self.signups,
            "active_executions": self.active,
            "list": self.list_health.public(),
        }


@dataclass(frozen=True)
class ListHealth:
    """The subscribers now (``totals``: profiles, subscribed, unsubscribed, suppressed, mailable)
    and their changes per day of the window (``daily``: new, confirmed, resubscribed,
    unsubscribed by any path, suppressed, erased; ``net``: the change of the mailable count)."""

    totals: dict[str, int]
    daily: dict[str, list[int]]
    net: list[int]

    def window(self, metric: str) -> int:
        return sum(self.net) if metric == "net" else sum(self.daily.get(metric, []))

    @property
    def start(self) -> int:
        """The mailable subscribers when the window began (now, less the window's net change)."""
        return self.totals["mailable"] - sum(self.net)

    def rate(self, metric: str) -> float | None:
        """The window's ``metric`` per subscriber mailable at its start (None: there were none)."""
        return self.window(metric) / self.start if self.start > 0 else None

    @property
    def labels(self) -> dict[str, str]:
        return LIST_LABELS

    def public(self) -> dict[str, Any]:
        return {
            "totals": self.totals,
            "daily": {**self.daily, "net": self.net},
            "window": {m: self.window(m) for m in (*self.daily, "net")},
            "rates": {m: self.rate(m) for m in (*self.daily, "net")},
        }


def window_arg(days: int) -> int:
    if days not in WINDOWS:
        raise InvalidInput(f"days must be one of {WINDOWS}", [FieldProblem("days", str(days))])
    return days


def _sum(counters: Iterable[Counters]) -> Counters:
    totals: Counter[str] = Counter()
    uniques: Counter[str] = Counter()
    for c in counters:
        totals.update(c.totals)
        uniques.update(c.uniques)
    return Counters(totals=dict(totals), uniques=dict(uniques))


def overview(
    stats: StatsStore,
    catalog: Catalog,
    broadcast_ids: Iterable[str],
    *,
    days: int = 30,
    today: date | None = None,
) -> Overview:
    """The overview over the last ``days`` days (7, 30 or 90) up to ``today`` (UTC)."""
    days = window_arg(days)
    today = today or datetime.now(UTC).date()
    first = today - timedelta(days=days - 1)
    dates = tuple((first + timedelta(days=i)).isoformat() for i in range(days))
    sources = tuple(
        dict.fromkeys([*(s.id for s in catalog), *list(broadcast_ids)[:MAX_BROADCASTS], *EXTRA_SOURCES])
    )
    sequence_ids = [s.id for s in catalog]
    counted = [(keys.stats_pk(s), keys.COUNTERS) for s in sources]
    running = [keys.active_key(s) for s in sequence_ids]
    with ThreadPoolExecutor(max_workers=READERS) as pool:
        daily = pool.submit(stats.daily, first, days)
        signups = pool.submit(stats.signups)
        read = pool.submit(stats.summed, [*counted, *running, total_key()])  # shared BatchGetItem requests
        per_day = daily.result()
        found = read.result()
        totals = _sum(Counters.from_item(found[item]) for item in counted)
        active = {s: active_count(found[item]) for s, item in zip(sequence_ids, running, strict=True)}
    counts: dict[str, list[int]] = {m: [day.get(DAILY_FIELDS.get(m, m), 0) for day in per_day] for m in DAILY}
    rates: dict[str, list[float | None]] = {"bounce": [], "complaint": []}
    for i in range(days):
        delivered, bounced = counts["delivery"][i], counts["bounce"][i]
        attempted = delivered + bounced  # mails SES answered for that day
        rates["bounce"].append(bounced / attempted if attempted else None)
        rates["complaint"].append(counts["complaint"][i] / attempted if attempted else None)
    return Overview(
        days=days,
        dates=dates,
        daily=counts,
        daily_rates=rates,
        totals=totals,
        sources=sources,
        signups=signups.result().public(),
        active=active,
        list_health=ListHealth(
            totals=totals_of(found[total_key()]),
            daily={m: [day.get(m, 0) for day in per_day] for m in LIST_DAILY},
            net=[day.get("list_net", 0) for day in per_day],
        ),
    )


def backfill_list(profiles: Iterable[Any], store: Any) -> dict[str, int]:
    """Count ``profiles`` (``SubscriberAdmin.iter()``: every profile) into the list-health totals,
    once (``shared.store.list_health.backfill``; docs/data-model.md, "List health")."""
    from shared.store.list_health import State, backfill

    return backfill(store, (State(status=p.status, suppressed=bool(p.suppressed)) for p in profiles))


def count_by_status(profiles: Iterable[Any]) -> dict[str, int]:
    """Subscribers by status (subscribed, unsubscribed) and how many are suppressed, from
    ``profiles`` (``SubscriberAdmin.iter()``: a read of the whole table, so the console runs it
    only when the operator asks)."""
    found: Counter[str] = Counter()
    for profile in profiles:
        found[profile.status] += 1
        found["suppressed"] += bool(profile.suppressed)
    return dict(found)


@dataclass(frozen=True)
class BroadcastReport:
    """A broadcast as a row of the console's broadcasts list: its record and its engagement
    counters, with the rates of ``shared.store.stats.REPORT_ROWS`` (None: nothing to divide by)."""

    record: Any  # shared.broadcasts.model.Broadcast
    counters: Counters

    def rate(self, label: str) -> float | None:
        found = next((row for row in self.counters.rows() if row["metric"] == label), None)
        return None if found is None else found["rate"]

    @property
    def rates(self) -> dict[str, float | None]:
        """opened, clicked, bounced, unsubscribed: the list's four rates."""
        return {label: self.rate(label) for label in ("opened", "clicked", "bounced", "unsubscribed")}


def source_counters(stats: StatsStore, sources: Iterable[str]) -> dict[str, Counters]:
    """The counters of each source (a broadcast, a sequence): every counters item in the same
    BatchGetItem requests (``StatsStore.summed``), none read one by one."""
    wanted = {source: (keys.stats_pk(source), keys.COUNTERS) for source in sources}
    found = stats.summed(wanted.values()) if wanted else {}
    return {source: Counters.from_item(found.get(item)) for source, item in wanted.items()}


def broadcast_reports(stats: StatsStore, records: Iterable[Any]) -> list[BroadcastReport]:
    """The broadcasts ``records`` with their counters (:func:`source_counters`)."""
    records = list(records)
    counters = source_counters(stats, (r.id for r in records))
    return [BroadcastReport(r, counters[r.id]) for r in records]
