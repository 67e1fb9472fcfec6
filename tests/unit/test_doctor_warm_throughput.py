"""``mailstep doctor``'s table-warm-throughput line (ops/doctor.py): each table's DescribeTable
``WarmThroughput`` as reported, "not reported" where the answer leaves it out (an endpoint that
does not implement it). Pure: DescribeTable is given as a function."""

from __future__ import annotations

from typing import Any

from ops import doctor

ANSWERS: dict[str, dict[str, Any]] = {
    "mailstep-main": {"WarmThroughput": {"ReadUnitsPerSecond": 40000, "WriteUnitsPerSecond": 15000,
                                         "Status": "UPDATING"}},
    "mailstep-events": {"TableName": "mailstep-events"},  # no WarmThroughput in the answer
}  # fmt: skip


def test_each_tables_warm_throughput_or_not_reported() -> None:
    check = doctor.warm_throughput_check(
        {"main": "mailstep-main", "events": "mailstep-events"}, ANSWERS.__getitem__
    )

    assert check.name == "table-warm-throughput" and check.status == doctor.PASS
    assert check.detail == (
        "main (mailstep-main): 15,000 WRU/s, 40,000 RRU/s (UPDATING); events (mailstep-events): not reported"
    )


def test_no_table_skips() -> None:
    assert doctor.warm_throughput_check({}, ANSWERS.__getitem__).status == doctor.SKIP
