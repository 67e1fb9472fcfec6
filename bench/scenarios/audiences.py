"""Audiences on engagement: what each kind of condition adds to resolving an audience.

1,000 subscribers of one tag; 30% opened broadcast ``bench-src`` as people (its unique open
marker, ``UNIQ#open#source#bench-src``), 5% of them clicked too, 10% only by machine (an ``open``
event with ``machine``, no marker), and every one of them was sent it (its send-once claim);
40% have an ``ENGAGEMENT`` item with a last human engagement 3 days ago. The items are written as
the engagement consumer and the sender write them, before measuring.

Each step reads the whole audience as ``mailstep broadcast send --dry-run`` does
(``ops.broadcasts.Broadcasts.preview``: the resolver's pages, without the sending), so the
requests and read units per 1,000 candidates are those of the resolver's reads; the tag audience
alone is the baseline. Each step's label carries what a million candidates would take at
DynamoDB's latency: the rounds of requests a page waits for in turn (the resolver's own and the
condition's), with ``bench.capacity``'s latency and the resolver's CPU per recipient as
``bench/capacity_last.json`` last measured it.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import capacity
from bench.harness import Bench
from bench.meter import Measurement
from bench.scenarios.broadcast import TEMPLATE, broadcasts_service, seed_tagged, write_items
from shared.broadcasts.audience import QUERY_CHUNK
from shared.broadcasts.engagement import CHUNK
from shared.broadcasts.model import STEP, parse_request
from shared.store import keys
from shared.store.hygiene import backfilled_item
from shared.store.stats import SOURCE_SCOPE

NAME = "audiences"
DESCRIPTION = "audiences on engagement: requests and read units per 1,000 candidates of each condition"
CANDIDATES = 1000
TAG = "bench-aud"
SOURCE = "bench-src"
# (label, audience beyond the tag, request rounds a page waits for in turn beyond the tag's)
CONDITIONS: tuple[tuple[str, dict[str, Any], int], ...] = (
    ("tag only", {}, 0),
    ("opened X", {"opened": [SOURCE]}, 1),
    ("clicked X", {"clicked": [SOURCE]}, 1),
    ("not opened X", {"not_opened": [SOURCE]}, 1),
    ("engaged within 30 days", {"engaged_within_days": 30}, 1),
    ("not engaged within 30 days", {"not_engaged_within_days": 30}, 1),
    # a Query per candidate, as many at once as the page's read threads
    ("opened X, machine opens too", {"opened": [SOURCE], "machine_opens": True}, 0),
)


# The resolver's CPU per recipient as the capacity model last measured it (the emulator's CPU in
# this process would be counted with it here).
RESOLVER_CPU_MS = json.loads((Path(__file__).parents[1] / "capacity_last.json").read_text())["broadcast"][
    "cpu_ms_per_mail"
]["broadcast-resolver"]


def _who(i: int) -> str:
    return f"{TAG}{i:05d}@example.com"


def _seed_engagement(bench: Bench) -> None:
    """Markers, claims, machine opens and ENGAGEMENT items as their writers leave them."""
    resources = bench.runtime.resources
    main, events = resources.tables["table_name"], resources.tables["events_table_name"]
    now = datetime.now(UTC)
    at = (now - timedelta(days=3)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    since = (now - timedelta(days=60)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    main_items: list[dict[str, Any]] = []
    event_items: list[dict[str, Any]] = []
    for i in range(CANDIDATES):
        email = _who(i)
        pk = keys.sub_pk(email)
        main_items.append({"PK": pk, "SK": keys.send_claim_sk(SOURCE, STEP)})
        if i % 10 < 3:  # 30% opened as people, the first in twenty of them clicked too
            main_items.append({"PK": pk, "SK": keys.unique_marker_sk("open", SOURCE_SCOPE, SOURCE)})
            if i % 20 == 0:
                main_items.append({"PK": pk, "SK": keys.unique_marker_sk("click", SOURCE_SCOPE, SOURCE)})
        elif i % 10 == 3:  # 10% opened only by machine: an event, no marker
            sk = f"{keys.EVT}{keys.SEP}{at}{keys.SEP}bench-{i}"
            event_items.append(
                {"PK": pk, "SK": sk, "type": "open", "source": SOURCE, "at": at, "machine": "mpp"}
            )
        if i % 10 < 4:  # 40% last engaged 3 days ago
            event_items.append(backfilled_item(email, since, at))
    write_items(bench.aws, main, main_items)
    write_items(bench.aws, events, event_items)


def million_s(rounds: int, machine: bool, cpu_ms_per_candidate: float) -> float:
    """Seconds to resolve a million candidates, page after page of 1,000: the page's CPU, the
    resolver's own rounds of requests and the condition's (``rounds``; a Query per candidate for
    machine opens, as many at once as a page's read threads), at DynamoDB's latency."""
    latency = capacity.LIMITS["ddb_latency_ms"].value / 1000
    threads = max(16, QUERY_CHUNK // CHUNK)
    extra = rounds + (math.ceil(CANDIDATES / threads) if machine else 0)
    page_s = 1000.0 / capacity.resolution_rate(cpu_ms_per_candidate, 1.0) + extra * latency
    return 1000 * page_s


def run(bench: Bench) -> list[Measurement]:
    table = bench.runtime.resources.tables["table_name"]
    seed_tagged(bench.aws, table, TAG, CANDIDATES)
    _seed_engagement(bench)
    service = broadcasts_service(bench)
    found: list[Measurement] = []
    for label, extra, rounds in CONDITIONS:
        request = parse_request(id="bench-aud", template=TEMPLATE, audience={"tags": [TAG], **extra})
        size: list[int] = []
        measured = bench.measure(
            label, 1, f"{CANDIDATES:,} candidates", lambda r=request, s=size: s.append(service.preview(r)[0])
        )
        estimate = million_s(rounds, bool(extra.get("machine_opens")), RESOLVER_CPU_MS)
        found.append(
            replace(
                measured,
                label=f"{label}: {size[0]:,} of {CANDIDATES:,}; 1M candidates ~{estimate / 60:.1f} min",
            )
        )
    return found
