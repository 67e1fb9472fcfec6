"""The console bench's report (``bench.console_pages``): medians, the budget verdict, the
DynamoDB requests per answer and the Scan flag, from answers given to it."""

from __future__ import annotations

import pytest

from bench.console_pages import Samples, more_link, pages, row, summary, text


def samples(name: str, ms: list[float], operations: list[list[str]], status: int = 200) -> Samples:
    found = Samples(name, "/" + name)
    for took, ops in zip(ms, operations, strict=True):
        found.add(took, status, ops)
    return found


def test_a_row_has_the_median_the_largest_and_the_requests_of_the_costliest_answer() -> None:
    # Given five answers, one slow, and an answer that read one more page than the others
    page = samples("overview", [120, 80, 100, 400, 90], [["Query", "BatchGetItem"]] * 4 + [["Query"] * 2])

    # When the row is built
    built = row(page)

    # Then the median is the middle answer, the max the slow one, and the median alone is under
    assert built["median_ms"] == 100 and built["max_ms"] == 400
    assert built["under_budget"] == "median only"
    assert built["dynamodb"] == {"BatchGetItem": 1, "Query": 2}
    assert built["dynamodb_requests"] == 3 and built["scan"] is False


def test_the_verdict_is_yes_only_when_every_answer_is_under_the_budget() -> None:
    assert row(samples("a", [10, 299.9], [[], []]))["under_budget"] == "yes"
    assert row(samples("b", [300, 301, 10], [[], [], []]))["under_budget"] == "no"
    assert row(samples("c", [10, 12, 20], [[], [], []]), budget_ms=15)["under_budget"] == "median only"


def test_a_scan_is_flagged_and_the_summary_names_the_pages_over_budget_scanning_or_failing() -> None:
    rows = [
        row(samples("fast", [5, 6], [["GetItem"], ["GetItem"]])),
        row(samples("scanning", [50, 60], [["Scan", "Scan"], ["Scan"]])),
        row(samples("slow", [500, 600], [[], []])),
        row(samples("broken", [5], [[]], status=500)),
    ]

    found = summary(rows)

    assert rows[1]["scan"] is True and rows[1]["dynamodb"] == {"Scan": 2}
    assert found == {
        "pages": 4,
        "budget_ms": 300.0,
        "over_budget": ["slow"],
        "scans": ["scanning"],
        "failed": ["broken"],
    }
    report = text({"subscribers": 10_000, "repeats": 2, "rows": rows, "summary": found})
    assert "scanning" in report and "SCAN" in report and "HTTP 500" in report and "10,000" in report


def test_a_page_without_answers_is_an_error_not_a_zero() -> None:
    with pytest.raises(ValueError, match="no answers"):
        row(Samples("empty", "/"))


def test_the_next_page_link_is_read_from_the_subscribers_page() -> None:
    html = '<a href="?q=reader&amp;cursor=abc%3D">more</a>'
    assert more_link(html) == "/subscribers?q=reader&cursor=abc%3D"
    assert more_link("<p>no more</p>") is None


def test_every_page_is_listed_once_with_the_bench_data_in_it() -> None:
    listed = pages(10_000)
    names = [p.name for p in listed]
    assert len(names) == len(set(names))
    paths = " ".join(p.path for p in listed)
    assert "reader005000%40example.com" in paths and "/subscribers/reader000003@example.com" in paths
    assert {p.name for p in listed if p.form is not None} == {"dry-run count (20)", "dry-run count (10k)"}
    assert [p.name for p in listed if p.background] == ["hygiene: forecast now"]


def test_a_background_reads_row_tells_its_first_answers_refreshes_and_answers_apart() -> None:
    # Given two forecasts followed to their end: a first answer, refreshes, then the answer shown
    page = Samples("forecast", "/hygiene?live=1")
    page.reads = [
        {"answers_ms": [40.0, 90.0, 120.0, 60.0], "read_s": 3.1, "requests": ["Query"] * 530},
        {"answers_ms": [50.0, 310.0, 70.0], "read_s": 3.5, "requests": ["Query"] * 529},
    ]
    for read in page.reads:
        for n, ms in enumerate(read["answers_ms"]):
            page.add(ms, 200, read["requests"] if n == 0 else ())

    built = row(page)

    # Then the slow refresh is named as a refresh, the reads' own time is the page's figure, and
    # the request count is the whole read's (once, not per answer)
    assert built["background_reads"] == {
        "reads": 2,
        "first_max_ms": 50.0,
        "refresh_max_ms": 310.0,
        "shown_max_ms": 70.0,
        "median_s": 3.3,
        "max_s": 3.5,
        "dynamodb_requests": 530,
    }
    assert built["under_budget"] == "median only" and built["dynamodb"] == {"Query": 530}
    report = text({"subscribers": 10, "repeats": 2, "rows": [built], "summary": summary([built])})
    assert (
        "forecast: 2 reads in the background, each 3.3 s" in report
        and "refresh while reading 310.0 ms" in report
    )


def test_the_forecast_through_a_console_of_its_own_is_reported_under_the_table() -> None:
    built = row(samples("fast", [5], [[]]))
    apart = {"reads": 3, "median_s": 2.9, "max_s": 3.0, "first_max_ms": 12.0}
    apart |= {"refresh_max_ms": 40.5, "shown_max_ms": 8.0, "max_ms": 40.5}
    result = {"subscribers": 10, "repeats": 3, "rows": [built], "forecast_apart": apart}
    report = text({**result, "summary": summary([built])})
    assert "in its own process: 3 reads, each 2.9 s (median); the slowest answer 40 ms" in report
