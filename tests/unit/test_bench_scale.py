"""The scale tier's report (bench.scale): the CSV it imports, the peak memory per function, the
rates, the JSON object and its text. Pure (no runtime), so it runs in the unit tier; the run
itself is ``python -m bench scale``."""

from __future__ import annotations

import csv
from pathlib import Path

from bench.scale import BroadcastFigures, ImportFigures, peak_memory, rate, report, text, write_csv

MODEL = {
    "ceiling_per_s": 9.6,
    "limited_by": "Lambda CPU of broadcast-worker",
    "hottest_key_wcu_per_mail": 0.096,
    "hottest_key": "MainTable: BROADCAST#<broadcast>",
    "hottest_key_rcu_per_mail": 0.01,
    "hottest_read_key": "MainTable: TAG#<tag>",
    "max_tx_per_item_per_mail": 0.0215,
    "max_tx_item": "MainTable: BROADCAST / <ts>#<broadcast>",
    "cpu_ms_per_mail": {"broadcast-resolver": 0.73, "broadcast-worker": 45.26},
    "functions": {},
    "per_mail": {"wru": 6.0},
    "ceilings_per_s": {"cpu": 9.6},
    "description": "left out of the report",
}


def test_the_csv_has_a_new_address_per_row(tmp_path: Path) -> None:
    path = tmp_path / "scale.csv"
    write_csv(path, 25)
    rows = list(csv.DictReader(path.open()))
    assert len(rows) == 25 and len({r["email"] for r in rows}) == 25
    assert rows[3] == {"email": "reader000003@example.com", "first_name": "Reader 3", "plan": "free"}


def test_peak_memory_is_reported_per_function_against_its_configured_memory() -> None:
    found = peak_memory(
        peak_rss_kb={"mailstep-worker": 102_400, "mailstep-resolver": 81_920},
        physical={"mailstep-worker": "broadcast-worker", "mailstep-resolver": "broadcast-resolver"},
        configured_mb={"mailstep-worker": 256, "mailstep-resolver": 1769},
        environments={"mailstep-worker": 3, "mailstep-resolver": 1},
    )
    assert list(found) == ["broadcast-resolver", "broadcast-worker"]  # by name
    assert found["broadcast-worker"] == {
        "peak_rss_mb": 100.0,
        "memory_mb": 256,
        "used": 0.391,
        "environments": 3,
    }
    assert found["broadcast-resolver"]["peak_rss_mb"] == 80.0


def test_a_function_without_a_configured_memory_has_no_share() -> None:
    found = peak_memory({"other": 2048}, physical={}, configured_mb={}, environments={})
    assert found == {"other": {"peak_rss_mb": 2.0, "memory_mb": None, "used": None, "environments": 0}}


def test_rates_are_counts_per_second_and_none_without_time() -> None:
    assert rate(1000, 8.0) == 125.0
    assert rate(10, 0.0) is None


def test_the_report_holds_the_run_s_figures_and_the_model_s_numbers() -> None:
    result = report(
        2000,
        ImportFigures(rows=2000, created=2000, rejected=0, seconds=20.0),
        BroadcastFigures(
            recipients=2000, sent=2000, failed=0, resolution_s=3.04, send_s=100.0, events_s=104.0
        ),
        {"broadcast-worker": {"peak_rss_mb": 100.0, "memory_mb": 256, "used": 0.391, "environments": 3}},
        MODEL,
        runtime_peak_rss_mb=415.94,
    )

    assert result["import"] == {
        "rows": 2000,
        "created": 2000,
        "rejected": 0,
        "seconds": 20.0,
        "rows_per_s": 100.0,
    }
    assert result["broadcast"]["resolution_s"] == 3.0 and result["broadcast"]["send_rate_per_s"] == 20.0
    assert result["broadcast"]["with_events_s"] == 104.0
    assert result["runtime_peak_rss_mb"] == 415.9
    assert result["model"]["max_tx_per_item_per_mail"] == 0.0215
    assert "description" not in result["model"]

    shown = text(result)
    assert "2,000 recipients resolved in 3.0 s" in shown
    assert "20.0 mails/s" in shown and "100.0 rows/s" in shown
    assert "broadcast-worker" in shown and "(39% of 256 MB)" in shown
    assert "9.6 mails/s (limited by Lambda CPU of broadcast-worker)" in shown


def test_the_text_says_when_nothing_limits() -> None:
    result = report(
        1,
        ImportFigures(1, 1, 0, 1.0),
        BroadcastFigures(1, 1, 0, 1.0, 1.0, 1.0),
        {},
        {**MODEL, "ceiling_per_s": None},
        1.0,
    )
    assert "ceiling            no limit" in text(result)
