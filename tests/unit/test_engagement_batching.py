"""Building the batch transaction (no AWS): counters folded per item, markers once, chunks."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from shared.engagement.consumer import Correlation, EventWrite, chunks, event_write, transaction
from shared.engagement.ses_events import parse_record
from shared.store import keys
from shared.store.stats import day_key

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "ses"
CORRELATED = Correlation(template="onboarding/welcome", source="onboarding", via="tags")


def write(
    kind: str, email: str, *, at: str = "2026-01-01T10:00:00.000Z", correlation: Correlation = CORRELATED
) -> EventWrite:
    record = copy.deepcopy(json.loads((FIXTURES / f"{kind}.json").read_text()))
    record["mail"]["destination"] = [email]
    body = next(k for k in record if k not in ("eventType", "mail"))
    if "recipients" in record[body]:
        record[body]["recipients"] = [email]
    if "timestamp" in record[body]:
        record[body]["timestamp"] = at
    return event_write(parse_record(record), email, correlation, 30)


def updates(actions: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, int]]:
    """Counters updates as {(PK, SK): {attribute: amount}}, PK the counters item's (whichever
    of its shards the update went to)."""
    out = {}
    for action in actions:
        if "Update" in action:
            update = action["Update"]
            names, vals = update["ExpressionAttributeNames"], update["ExpressionAttributeValues"]
            adds = {names[f"#c{i}"]: int(vals[f":c{i}"]["N"]) for i in range(len(names))}
            scope, _ = keys.counter_scope(update["Key"]["PK"]["S"])
            out[(keys.stats_pk(scope), update["Key"]["SK"]["S"])] = adds
    return out


def test_the_events_of_a_transaction_fold_into_one_update_per_counters_item() -> None:
    writes = [
        write("delivery", "a@example.com"),
        write("open", "a@example.com"),
        write("open", "a@example.com", at="2026-01-01T11:00:00.000Z"),  # same subscriber: not unique
        write("open", "b@example.com"),
        write("delivery", "c@example.com", correlation=Correlation()),  # uncorrelated: no counters
    ]
    actions, owners, claimed = transaction(writes, set(), "main", "events")
    assert owners[:5] == writes and owners[5:] == [None] * (len(actions) - 5)
    puts = [a["Put"] for a in actions if "Put" in a]
    assert [p["TableName"] for p in puts] == ["events"] * 5 + ["main"] * 4
    assert all(p["ConditionExpression"] == "attribute_not_exists(PK)" for p in puts)
    assert len(claimed) == 4  # (a, b) x (source, template)
    expected = {"delivery": 1, "open": 3, "open_unique": 2}
    assert updates(actions) == {
        (keys.stats_pk("onboarding"), keys.COUNTERS): expected,
        keys.template_stats_key("onboarding/welcome"): expected,
        day_key("2026-01-01T10:00:00.000Z"): expected,  # every source's day counters repeat them
    }
    latest = {a["Update"]["ExpressionAttributeValues"][":at"]["S"] for a in actions if "Update" in a}
    assert latest == {"2026-01-01T11:00:00.000Z"}


def test_markers_already_present_add_no_unique() -> None:
    opener = write("open", "a@example.com")
    source_marker, template_marker = opener.markers()
    actions, _, claimed = transaction([opener], {source_marker}, "main", "events")
    assert claimed == {template_marker}
    adds = updates(actions)
    assert adds[(keys.stats_pk("onboarding"), keys.COUNTERS)] == {"open": 1}
    assert adds[keys.template_stats_key("onboarding/welcome")] == {"open": 1, "open_unique": 1}


def test_chunks_hold_at_most_the_limit_and_keep_the_order() -> None:
    writes = [write(kind, f"s{n}@example.com") for n in range(30) for kind in ("delivery", "open")]
    for limit in (6, 12, 100):  # an open: its Put, 3 counters items, 2 markers
        groups = chunks(writes, set(), limit)
        assert [w for g in groups for w in g] == writes
        assert all(len(transaction(g, set(), "main", "events")[0]) <= limit for g in groups)
        assert all(len(transaction(g, set(), "main", "events")[0]) > limit - 5 for g in groups[:-1])
    assert len(chunks(writes, set())) == 2  # 60 Puts + 60 markers + 2 counters items > 100
