"""Rich tables for the terminal fronts (the CLI's commands and ``make demo``'s story): they only
lay out what ``shared.store.stats``, ``ops.admin`` and the local outbox give."""

from __future__ import annotations

import json
from typing import Any

from rich.table import Table


def percent(rate: float | None) -> str:
    return "" if rate is None else f"{rate * 100:.1f}%"


def counters_table(title: str, rows: list[dict[str, Any]]) -> Table:
    table = Table(title=title)
    for column, justify in (("metric", "left"), ("total", "right"), ("unique", "right"), ("rate", "right")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for row in rows:
        unique = "" if row["unique"] is None else str(row["unique"])
        total = "n/a" if row["total"] is None else str(row["total"])  # sends in a --since report
        table.add_row(row["metric"], total, unique, percent(row["rate"]))
    return table


def signups_table(counts: dict[str, Any]) -> Table:
    table = Table(title="Sign-ups")
    for column, justify in (("metric", "left"), ("total", "right"), ("rate", "right")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    table.add_row("signed up (double opt-in)", str(counts["signups"]), "")
    table.add_row("confirmed", str(counts["confirmed"]), percent(counts["confirmation_rate"]))
    table.add_row("subscribed at once (single opt-in)", str(counts["single_opt_in"]), "")
    return table


def outbox_table(messages: list[dict[str, Any]]) -> Table:
    table = Table(title=f"Outbox ({len(messages)} messages)")
    for column in ("time", "to", "subject", "outcome", "message id"):
        table.add_column(column)
    for message in messages:
        outcomes = message.get("outcomes", {})
        table.add_row(
            message["timestamp"][11:19],
            ", ".join(message["destination"]),
            message.get("subject", ""),
            ", ".join(sorted(set(outcomes.values()))),
            message["message_id"],
        )
    return table


def profiles_table(title: str, rows: list[dict[str, Any]]) -> Table:
    """Subscribers as ``ops.admin`` lists them, one per row."""
    table = Table(title=title)
    for column in ("email", "status", "first name", "tags", "suppressed", "updated"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row["email"],
            row["status"],
            row["first_name"] or "",
            " ".join(row["tags"]),
            "yes" if row["suppressed"] else "",
            row["updated_at"][:19].replace("T", " "),
        )
    return table


def subscriber_grid(detail: dict[str, Any]) -> Table:
    """One subscriber as ``ops.admin`` details them: profile, active sequences, suppression."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    for name in ("email", "status", "first_name", "suppressed", "created_at", "updated_at"):
        grid.add_row(name, str(detail[name]))
    grid.add_row("tags", " ".join(detail["tags"]) or "-")
    grid.add_row(
        "attributes", json.dumps(detail["attributes"], sort_keys=True) if detail["attributes"] else "-"
    )
    sequences = ", ".join(
        e["sequence"] + (" (transactional)" if e["transactional"] else "") for e in detail["executions"]
    )
    grid.add_row("sequences", sequences or "-")
    suppression = detail["suppression"]
    grid.add_row("suppression", f"{suppression['reason']} at {suppression['at']}" if suppression else "-")
    return grid
