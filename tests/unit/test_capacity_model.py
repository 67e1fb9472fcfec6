"""The capacity model's limits (bench.capacity): for each limit, inputs where it binds first, so
``limited_by`` names it (dropping the limit from the model fails its case); the quotas of a
Region, an account and the tables; the trigger wave; the sourced limits table and docs/bench.md
kept equal; the stack's warm throughput covering the last measurement. Pure: no runtime."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest

from bench.capacity import (
    LIMITS,
    FunctionShape,
    HotKey,
    Inputs,
    Quotas,
    ceiling,
    ceilings,
    inputs_from,
    limiter_writes_per_s,
    limits_markdown,
    quotas,
    resolution_rate,
    trigger_wave,
)
from stacks.warm import NEW_TABLE_RRU, NEW_TABLE_WRU, TABLE_QUOTA_RU, WARM_UNITS_PER_MAIL, warm_throughput

ROOT = Path(__file__).resolve().parents[2]
# Nothing but one SES send per mail: SES at 1,000/s binds unless a case adds a lower limit.
BASE = Inputs(None, None, {}, ses_sends_per_mail=1.0, starts_per_mail=0.0, transitions_per_mail=0.0,
              http_per_mail=0.0)  # fmt: skip
MATURE = quotas("us-east-1", "mature", "fresh")
FULL_VCPU = 1769  # MB: one vCPU


def shape(name: str, concurrency: int = 1000, source: str = "account default") -> FunctionShape:
    return FunctionShape(name, FULL_VCPU, concurrency, source)


CASES = [
    pytest.param(replace(BASE, hot_write=HotKey("MainTable", "TAG#<tag>", 2.0)), {}, MATURE,
                 "DynamoDB MainTable key TAG#<tag> (1,000 WCU/s)", 500.0, id="partition-write"),
    pytest.param(replace(BASE, hot_read=HotKey("MainTable", "BROADCAST#<broadcast>", 4.0)), {}, MATURE,
                 "DynamoDB MainTable key BROADCAST#<broadcast> (3,000 RCU/s)", 750.0, id="partition-read"),
    # the broadcast's main table at 1,000/s: 2,333 WRU + 6,603 RRU, 1.13 x a new table's mix
    pytest.param(replace(BASE, table_units={"MainTable": (2.333, 6.603)}), {}, MATURE,
                 "DynamoDB MainTable table, fresh (4,000 WRU/s or 12,000 RRU/s)",
                 1 / (2.333 / 4000 + 6.603 / 12000), id="fresh-table"),
    # 1,012/s on the table alone: the limiter's 62.5 UpdateItems/s (a lease of 16 each) make it bind
    pytest.param(replace(BASE, table_units={"MainTable": (2.12, 5.5)}, broadcast=True), {}, MATURE,
                 "DynamoDB MainTable table, fresh (4,000 WRU/s or 12,000 RRU/s, limiter 62 WRU/s)",
                 (1 - 62.5 / 4000) / (2.12 / 4000 + 5.5 / 12000), id="limiter-polling"),
    pytest.param(replace(BASE, table_units={"EventsTable/SequenceIndex": (5.0, 0.0)}), {}, MATURE,
                 "DynamoDB EventsTable/SequenceIndex index (GSI back-pressure", 800.0,
                 id="gsi-back-pressure"),
    pytest.param(replace(BASE, cpu_ms_per_mail={"broadcast-worker": 40.0}),
                 {"broadcast-worker": shape("broadcast-worker", 20, "event source maximum")}, MATURE,
                 "Lambda CPU of broadcast-worker (20 x 1.00 vCPU", 500.0, id="lambda-cpu"),
    # 30 + 30 ms of CPU and 5 requests of 10 ms: 0.11 s of an environment per mail, 100 environments
    pytest.param(replace(BASE, cpu_ms_per_mail={"a": 30.0, "b": 30.0}, requests_per_mail=5.0),
                 {"a": shape("a"), "b": shape("b")}, replace(MATURE, lambda_concurrency=100),
                 "Lambda account concurrency (100 shared by every function)", 100 / 0.11,
                 id="lambda-shared-concurrency"),
    # a page: 2 s of CPU, 27 requests x 10 ms, a 50 ms hop
    pytest.param(replace(BASE, cpu_ms_per_mail={"broadcast-resolver": 2.0}),
                 {"broadcast-resolver": shape("broadcast-resolver", 1, "reserved")}, MATURE,
                 "broadcast resolver (pages one", 1000 / (2.05 + 0.05 / 29), id="resolver-chain"),
    pytest.param(BASE, {}, MATURE, "SES rate (1000/s)", 1000.0, id="ses"),
    pytest.param(replace(BASE, starts_per_mail=0.2), {}, quotas("eu-central-2"),
                 "Step Functions StartExecution (150/s, eu-central-2)", 750.0, id="sfn-start-other-region"),
    # 4.9 transitions entered per mail fit 5,000/s at 1,020 mails/s; their 5% retries do not
    pytest.param(replace(BASE, transitions_per_mail=4.9), {}, MATURE,
                 "Step Functions state transitions (5,000/s, us-east-1, retries included)",
                 5000 / (4.9 * 1.05), id="sfn-transitions-with-retries"),
    pytest.param(replace(BASE, transitions_per_mail=1.1), {}, quotas("ap-southeast-3"),
                 "Step Functions state transitions (800/s, ap-southeast-3", 800 / (1.1 * 1.05),
                 id="sfn-transitions-other-region"),
    pytest.param(replace(BASE, http_per_mail=20.0), {}, MATURE, "HTTP API throttle", 500.0, id="http-api"),
    # the drip's steady 0.2 starts per mail fit 300/s at 1,500 mails/s; a wave's first mails do not
    pytest.param(trigger_wave(replace(BASE, starts_per_mail=0.2)), {}, MATURE,
                 "Step Functions StartExecution (300/s, us-east-1)", 300.0, id="trigger-wave"),
    pytest.param(BASE, {}, quotas("eu-central-2", "new"), "SES rate (14/s)", 14.0, id="day-one-ses"),
    # callback Tasks: the linear drip's 0.8 resumes per mail reach 500 SendTaskSuccess/s at 625 mails/s
    pytest.param(replace(BASE, resumes_per_mail=0.8), {}, MATURE,
                 "Step Functions SendTaskSuccess (500/s, us-east-1)", 500 / 0.8, id="sfn-task-success"),
    pytest.param(replace(BASE, resumes_per_mail=0.8), {}, quotas("eu-central-2"),
                 "Step Functions SendTaskSuccess (300/s, eu-central-2)", 300 / 0.8,
                 id="sfn-task-success-other-region"),
    # retried Tasks update their schedule: 1.2 CreateSchedule/UpdateSchedule per mail outside the
    # Scheduler's primary Regions (250/s)
    pytest.param(replace(BASE, schedules_per_mail=1.2), {}, quotas("eu-north-1"),
                 "EventBridge Scheduler CreateSchedule (250/s, eu-north-1)", 250 / 1.2,
                 id="scheduler-create-other-region"),
    pytest.param(replace(BASE, schedules_per_mail=0.3), {}, replace(MATURE, scheduler_create=200),
                 "EventBridge Scheduler CreateSchedule (200/s, us-east-1)", 200 / 0.3,
                 id="scheduler-create"),
    # with SendTaskSuccess raised (a quota increase), the Scheduler's invocations bind next
    pytest.param(replace(BASE, resumes_per_mail=1.25), {}, replace(MATURE, sfn_task_success=10_000),
                 "EventBridge Scheduler invocations (1,000/s)", 1000 / 1.25, id="scheduler-invocations"),
]  # fmt: skip


@pytest.mark.parametrize(("inputs", "shapes", "q", "limit", "rate"), CASES)
def test_each_limit_binds_first_where_it_is_the_lowest(
    inputs: Inputs, shapes: dict[str, FunctionShape], q: Quotas, limit: str, rate: float
) -> None:
    found, limited_by = ceiling(ceilings(inputs, shapes, q))

    assert limited_by.startswith(limit)
    assert found == pytest.approx(rate)


def test_warm_tables_take_the_broadcasts_mix_that_a_fresh_table_cannot() -> None:
    inputs = replace(BASE, table_units={"MainTable": (2.333, 6.603)}, broadcast=True)

    fresh = ceiling(ceilings(inputs, {}, MATURE))
    warm = ceiling(ceilings(inputs, {}, quotas("us-east-1", "mature", "warm")))

    assert fresh[1].startswith("DynamoDB MainTable table, fresh") and fresh[0] < 1000
    assert warm == (pytest.approx(1000.0), "SES rate (1000/s)")


def test_quotas_by_region_account_and_tables() -> None:
    big, other = quotas("us-west-2"), quotas("eu-central-2", "new")

    assert (big.sfn_start, big.sfn_transitions, big.ses_rate, big.lambda_concurrency) == (
        300,
        5000,
        1000,
        1000,
    )
    assert (other.sfn_start, other.sfn_transitions, other.ses_rate) == (150, 800, 14)
    assert (big.sfn_task_success, big.scheduler_create, big.scheduler_invocations) == (500, 5000, 1000)
    assert (other.sfn_task_success, other.scheduler_create) == (300, 250)  # not a primary Region
    assert quotas("eu-central-1").scheduler_create == 5000
    assert quotas(account="new", lambda_concurrency=10, sfn_transitions=400).lambda_concurrency == 10
    assert big.table_capacity("MainTable") == (NEW_TABLE_WRU, NEW_TABLE_RRU)
    warm = quotas(table="warm", peak=1000)
    assert warm.table_capacity("MainTable") == tuple(float(u) for u in warm_throughput(1000)["MainTable"])
    assert warm.table_capacity("EventsTable/SequenceIndex") == (NEW_TABLE_WRU, NEW_TABLE_RRU)


def test_the_limiter_writes_once_per_lease() -> None:
    assert limiter_writes_per_s(1000) == pytest.approx(1000 / 16)  # leases of 8 in flight x 2
    assert limiter_writes_per_s(14) == pytest.approx(14 / 7)  # at most half a second of the rate


def test_resolution_rate_adds_cpu_and_serial_requests_per_page_and_one_hop_per_invocation() -> None:
    assert resolution_rate(0.0, 1.0) == pytest.approx(1000 / (0.05 + 0.05 / 1200))  # 1,200 pages in 60 s
    assert resolution_rate(0.35, 0.5) == pytest.approx(1000 / (0.75 + 0.05 / 80))
    assert resolution_rate(70.0, 1.0) == pytest.approx(1000 / (70.05 + 0.05))  # a page longer than 60 s


def test_warm_throughput_is_none_for_no_peak_and_at_most_the_table_quota() -> None:
    assert warm_throughput(0) == {}
    main = warm_throughput(500)["MainTable"]
    assert main == (math.ceil(500 * WARM_UNITS_PER_MAIL["MainTable"]), 3 * main[0])
    assert warm_throughput(100_000)["MainTable"] == (TABLE_QUOTA_RU, TABLE_QUOTA_RU)


def test_tables_warmed_for_a_peak_serve_the_last_measurement_at_that_peak() -> None:
    """stacks/warm.py's units per mail cover what the last ``python -m bench capacity --json``
    (bench/capacity_last.json) measured: every mail scenario's tables, warmed for 1,000 mails/s
    (the broadcast's limiter polling included), serve at least 1,000 mails/s. A measurement that
    needs more fails here until the units are raised."""
    last = json.loads((ROOT / "bench" / "capacity_last.json").read_text())
    warm = quotas("us-east-1", "mature", "warm", peak=1000)
    for name in ("sequences", "broadcast", "engagement", "subscribe"):
        inputs = inputs_from(last[name]["inputs"])
        tables = {limit: rate for limit, rate in ceilings(inputs, {}, warm).items() if " table, " in limit}

        assert len(tables) == len(WARM_UNITS_PER_MAIL), name
        assert min(tables.values()) >= 1000, (name, tables)


def test_docs_bench_md_shows_the_limits_table() -> None:
    text = (ROOT / "docs" / "bench.md").read_text()
    found = re.search(r"<!-- limits:start -->\n(.*?)\n<!-- limits:end -->", text, re.S)

    assert found, "docs/bench.md has no limits table between its markers"
    assert found.group(1) == limits_markdown(), "regenerate: python -c 'from bench.capacity import ..."
    assert all(limit.source for limit in LIMITS.values())


def test_a_derived_run_recomputes_under_other_quotas_with_its_trigger_wave() -> None:
    """``python -m bench capacity --inputs FILE``: the inputs a run recorded, derived again for
    another Region, account and tables, without running anything."""
    from collections import Counter

    from bench.__main__ import day_one, recompute
    from bench.capacity import compact
    from bench.capacity_runs import Run, derive
    from bench.meter import Measurement, Request

    def put(i: int) -> dict:
        return {"TableName": "mailstep-main", "Item": {"PK": {"S": f"SUB#{i}@x.io"}, "SK": {"S": "EXEC"}}}

    log = [compact(Request("function", "dynamodb", "PutItem", put(i), {})) for i in range(10)]
    log.append(compact(Request("function", "stepfunctions", "StartExecution", {}, {})))
    measurement = Measurement("sequences", 10, "mail", Counter({("dynamodb", "PutItem"): 10}), wru=10.0,
                              rru=0.0, lambda_invocations=10, lambda_gb_s=0.0, sfn_transitions=20,
                              ses_sends=10, http_requests=0, sqs_platform_requests=0)  # fmt: skip
    step = shape("sequence-step")
    run = Run("sequences", "a drip", "mail", measurement, log, {"sequence-step": 0.4},
              shapes={"sequence-step": step})  # fmt: skip

    stored = {"sequences": json.loads(json.dumps(derive(run, MATURE)))}
    again = recompute(stored, quotas("eu-central-2", "new"))

    assert stored["sequences"]["limited_by"] == "SES rate (1000/s)"
    assert stored["sequences"]["inputs"]["table_units"] == {"MainTable": [1.0, 0.0]}
    assert again["sequences"]["limited_by"] == "SES rate (14/s)"
    assert again["trigger-wave"]["inputs"]["starts_per_mail"] == 1.0
    first = day_one(stored, "eu-central-2")
    assert first["quotas"] == "eu-central-2, new account, fresh tables, SES 14/s"
    # 2 transitions per mail and their retries: 800/s in a smaller Region gives 381 mails/s
    assert first["sequences"]["limited_without_ses_by"].startswith("Step Functions state transitions (800/s")
