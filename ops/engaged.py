"""Who engaged with one mail source (a broadcast or a sequence): the openers and clickers and
the clicks per link, and who bounced, complained or unsubscribed, from the source's events (a
Query of the events table's ``SequenceIndex``: ``StatsStore.events``). The console's broadcast
page and its CSV export."""

from __future__ import annotations

import csv
import io
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from shared.store.keys import email_from_sub
from shared.store.stats import StatsStore

KINDS = ("open", "click")
OUTCOMES = ("bounce", "complaint", "unsubscribe")  # who the mail lost, listed apart


@dataclass
class Engaged:
    links: Counter[str] = field(default_factory=Counter)  # link -> clicks
    link_people: dict[str, set[str]] = field(default_factory=dict)  # link -> unique clickers
    people: dict[str, dict[str, Any]] = field(default_factory=dict)  # email -> first open/click, counts
    # bounce | complaint | unsubscribe -> [{email, at, detail}], oldest first
    lost: dict[str, list[dict[str, str]]] = field(default_factory=lambda: {kind: [] for kind in OUTCOMES})

    def public(self) -> dict[str, Any]:
        return {
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
        first = f"first_{kind}"
        if not row[first] or at < row[first]:
            row[first] = at
        if kind == "click" and item.get("link"):
            link = str(item["link"])
            found.links[link] += 1
            found.link_people.setdefault(link, set()).add(email)
    return found
