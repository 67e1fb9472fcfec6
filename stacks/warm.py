"""Warm throughput for an expected peak (``mailstep:expectedPeakMailsPerSecond``, docs/deploy.md
"Warm tables for a known peak"): plain Python, so the capacity model (bench/capacity.py) reads
the same numbers without loading the CDK."""

from __future__ import annotations

import math

# A new on-demand table (and each new GSI) serves at once up to 4,000 write or 12,000 read
# request units per second, or a linear mix; a table's warm throughput can be raised up to the
# per-table quota, 40,000 each (bench/capacity.py's LIMITS table uses these and names sources).
NEW_TABLE_WRU = 4000
NEW_TABLE_RRU = 12000
TABLE_QUOTA_RU = 40000
# Per table id: write units + read units / 3 per mail (a partition serves 1,000 WCU or 3,000 RCU
# or a linear mix), the largest over the capacity model's scenarios (docs/bench.md, "Warm
# tables"); a unit test fails when a measurement in bench/capacity_last.json needs more.
WARM_UNITS_PER_MAIL: dict[str, float] = {"MainTable": 16.5, "EventsTable": 3.5}


def warm_throughput(peak_mails_per_s: float) -> dict[str, tuple[int, int]]:
    """Table id -> (write, read) units per second to pre-warm it to for ``peak_mails_per_s``:
    writes = peak x the table's units per mail, reads 3x that (so the peak's mix of reads and
    writes fits), each at most the per-table quota. Only the tables that need more than a new
    table's 4,000/12,000 (0 or a small peak: none, nothing to pay)."""
    found: dict[str, tuple[int, int]] = {}
    for table, units in WARM_UNITS_PER_MAIL.items():
        write = min(TABLE_QUOTA_RU, math.ceil(peak_mails_per_s * units))
        read = min(TABLE_QUOTA_RU, 3 * write)
        if write > NEW_TABLE_WRU or read > NEW_TABLE_RRU:
            found[table] = (max(write, NEW_TABLE_WRU), max(read, NEW_TABLE_RRU))
    return found
