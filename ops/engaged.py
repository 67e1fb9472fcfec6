"""Who engaged with one mail source (a broadcast or a sequence): the openers and clickers and
the clicks per link, who bounced, complained or unsubscribed, and the people's opens and clicks
per hour or day, from the source's events (a Query of the events table's ``SequenceIndex``:
``StatsStore.events``); and a broadcast's recipients who did not open it
(:func:`non_openers`: the audience a resend to non-openers has). The console's broadcast page
and its CSV exports."""

from __future__ import annotations

import copy
import csv
import io
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from shared.store.keys import email_from_sub
from shared.store.stats import StatsStore

KINDS = ("open", "click")
OUTCOMES = ("bounce", "complaint", "unsubscribe")  # who the mail lost, listed apart
HOURLY_SPAN_H = 72  # opens and clicks over at most this many hours are shown per hour, else per day


@dataclass
class Engaged:
    links: Counter[str] = field(default_factory=Counter)  # link -> clicks
    link_people: dict[str, set[str]] = field(default_factory=dict)  # link -> unique clickers
    people: dict[str, dict[str, Any]] = field(default_factory=dict)  # email -> first open/click, counts
    # bounce | complaint | unsubscribe -> [{email, at, detail}], oldest first
    lost: dict[str, list[dict[str, str]]] = field(default_factory=lambda: {kind: [] for kind in OUTCOMES})
    hours: dict[str, Counter[str]] = field(default_factory=dict)  # "2026-11-28T09" -> open/click -> n

    def over_time(self) -> dict[str, Any]:
        """People's opens and clicks per UTC hour (per day when they span more than
        :data:`HOURLY_SPAN_H` hours), every bucket from the first to the last, with the largest
        count (the bars' scale)."""
        from datetime import timedelta

        from shared.core.clock import parse_iso

        if not self.hours:
            return {"unit": "hour", "buckets": [], "most": 0}
        first, last = (parse_iso(f"{h}:00:00Z") for h in (min(self.hours), max(self.hours)))
        hourly = (last - first) <= timedelta(hours=HOURLY_SPAN_H)
        width = 13 if hourly else 10  # the bucket's key: the hour's or the day's prefix
        step = timedelta(hours=1) if hourly else timedelta(days=1)
        merged: dict[str, Counter[str]] = {}
        for hour, counts in self.hours.items():
            merged.setdefault(hour[:width], Counter()).update(counts)
        buckets: list[dict[str, Any]] = []
        moment = first
        while moment.isoformat()[:width] <= last.isoformat()[:width]:
            at = moment.isoformat()[:width]
            counts = merged.get(at, Counter())
            shown = at.replace("T", " ") + (":00" if hourly else "")
            buckets.append({"at": shown, **{k: counts[k] for k in KINDS}})
            moment += step
        most = max(int(b[k]) for b in buckets for k in KINDS)
        return {"unit": "hour" if hourly else "day", "buckets": buckets, "most": most}

    def public(self) -> dict[str, Any]:
        return {
            "over_time": self.over_time(),
            "links": [
                {"link": link, "clicks": n, "unique": len(self.link_people.get(link, ()))}
                for link, n in self.links.most_common()
            ],
            "people": [{"email": e, **v} for e, v in sorted(self.people.items())],
            "lost": self.lost,
        }

    def csv(self) -> str:
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["email", "opens", "clicks", "first_open", "first_click"])
        for email, row in sorted(self.people.items()):
            writer.writerow([email, row["opens"], row["clicks"], row["first_open"], row["first_click"]])
        return out.getvalue()


def engaged(stats: StatsStore, source: str) -> Engaged:
    """Openers, clickers and clicks per link of ``source`` (every event still stored)."""
    found = Engaged()
    for item in stats.events(source=source):
        kind = item.get("type")
        if kind in OUTCOMES:
            detail = item.get("bounce_type") or item.get("reason") or ""
            where = {
                "email": email_from_sub(str(item["PK"])),
                "at": str(item.get("at", "")),
                "detail": str(detail),
            }
            found.lost[str(kind)].append(where)
            continue
        if kind not in KINDS or item.get("machine"):
            continue  # machine opens and clicks are nobody's engagement (docs/hygiene.md)
        email = email_from_sub(str(item["PK"]))
        at = str(item.get("at", ""))
        row = found.people.setdefault(email, {"opens": 0, "clicks": 0, "first_open": "", "first_click": ""})
        row[f"{kind}s"] += 1
        found.hours.setdefault(at[:13], Counter())[str(kind)] += 1
        first = f"first_{kind}"
        if not row[first] or at < row[first]:
            row[first] = at
        if kind == "click" and item.get("link"):
            link = str(item["link"])
            found.links[link] += 1
            found.link_people.setdefault(link, set()).add(email)
    return found


def non_openers(resolver: Any, broadcast_id: str, limit: int | None = None) -> Iterator[str]:
    """The recipients of ``broadcast_id``'s last round who were sent it and did not open or
    click it as a person, in its pages' order (the first ``limit``): the audience of its resend
    to non-openers (``recipients_of`` and ``not_opened``, read by the broadcast resolver: its
    ``PAGE#`` items, then each recipient's profile and markers). Who has since unsubscribed or
    been suppressed is not among them (the bounced, complained and unsubscribed are listed apart)."""
    from shared.broadcasts.model import Audience

    audience = Audience.model_validate({"recipients_of": broadcast_id, "not_opened": [broadcast_id]})
    if limit is not None:  # pages the size of what is shown: the first ones only are read
        resolver = copy.copy(resolver)
        resolver.page_size = max(1, min(resolver.page_size, limit))
    found = resolver.iterate(audience)
    return islice(found, limit) if limit is not None else found


def emails_csv(emails: Iterable[str]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["email"])
    writer.writerows([e] for e in emails)
    return out.getvalue()
