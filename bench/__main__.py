"""``python -m bench [scenario ...]``: run scenarios on a fresh local runtime, print tables.
``python -m bench capacity [--json] [scenario ...]``: the capacity model (docs/bench.md).
``python -m bench scale [--subscribers N] [--json]``: the scale tier (docs/bench-scale.md).
``python -m bench console [--subscribers N] [--repeats N] [--json]``: the console's pages
at size (docs/console.md).
``python -m bench coldstart [--repeats N] [--json] [function ...]``: each function's import from
the code asset, with and without its bytecode (docs/bench.md, "Cold starts")."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Before anything imports shared.core.observability: the bench prints tables, not handler logs.
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")

from rich.console import Console
from rich.table import Table

from bench.meter import PRICES, Measurement


def requests_table(measurements: list[Measurement]) -> Table:
    table = Table(title="AWS requests per unit")
    table.add_column("service / operation")
    for m in measurements:
        table.add_column(f"{m.label}\n(per {m.unit_name})", justify="right")
    keys = sorted({k for m in measurements for k in m.requests})
    for service, operation in keys:
        table.add_row(
            f"{service} {operation}",
            *[f"{m.requests.get((service, operation), 0) / m.units:.2f}" for m in measurements],
        )
    rows = [
        ("HTTP API requests", lambda m: m.http_requests),
        ("Lambda invocations", lambda m: m.lambda_invocations),
        ("SQS requests (incl. event source polls)", lambda m: m.sqs_requests()),
        ("Step Functions transitions", lambda m: m.sfn_transitions),
        ("SES sends", lambda m: m.ses_sends),
        ("AWS API requests (all of the above services)", lambda m: sum(m.requests.values())),
    ]
    for label, value in rows:
        table.add_row(f"[bold]{label}", *[f"{value(m) / m.units:.2f}" for m in measurements])
    table.add_row("[bold]DynamoDB WRU", *[f"{m.wru / m.units:.2f}" for m in measurements])
    table.add_row("[bold]DynamoDB RRU", *[f"{m.rru / m.units:.2f}" for m in measurements])
    table.add_row(
        "[bold]Lambda GB-s (CPU time at the vCPU share)",
        *[f"{m.lambda_gb_s / m.units:.4f}" for m in measurements],
    )
    table.add_row(
        "Lambda GB-s (local wall time, upper bound)",
        *[f"{m.lambda_gb_s_wall / m.units:.4f}" for m in measurements],
    )
    return table


def cost_table(measurements: list[Measurement]) -> Table:
    table = Table(title="Cost per 1000 units (USD, DESIGN.md section 9 list prices)")
    table.add_column("service")
    for m in measurements:
        table.add_column(f"{m.label}\n(per 1000 {m.unit_name}s)", justify="right")
    services = list(measurements[0].costs()) if measurements else []
    for service in services:
        table.add_row(service, *[f"${m.costs()[service] / m.units * 1000:.5f}" for m in measurements])
    table.add_row("[bold]total", *[f"[bold]${m.cost_per_1000():.5f}" for m in measurements])
    return table


def _rate(per_s: float | None) -> str:
    if per_s is None:
        return "no limit"
    return f"{per_s:,.1f}" if per_s < 100 else f"{per_s:,.0f}"


def capacity_table(results: dict[str, dict[str, Any]], quotas: str = "") -> Table:
    table = Table(title=f"Capacity model (per mail; subscribe and import: per subscriber) - {quotas}")
    for column in ("scenario", "ceiling /s", "limited by", "without SES /s", "hottest key (WCU per mail)",
                   "tx per item", "CPU ms per mail (function)"):  # fmt: skip
        table.add_column(
            column, justify="right" if column.endswith("/s") or column == "tx per item" else "left"
        )
    for name, r in results.items():
        table.add_row(
            name,
            _rate(r["ceiling_per_s"]),
            r["limited_by"],
            f"{_rate(r['ceiling_without_ses_per_s'])} ({r['limited_without_ses_by']})",
            f"{r['hottest_key_wcu_per_mail']:.3f} {r['hottest_key']}",
            f"{r['max_tx_per_item_per_mail']:.3f}",
            ", ".join(f"{f} {ms:.2f}" for f, ms in r["cpu_ms_per_mail"].items()) or "(operator's CLI)",
        )
    return table


DAY_ONE_REGION = "eu-central-2"  # a Region of the Step Functions quotas' "all other Regions"


def recompute(stored: dict[str, dict[str, Any]], q: Any) -> dict[str, dict[str, Any]]:
    """Measured scenarios (``--json`` output) under other quotas: the inputs and function shapes
    each scenario recorded, the ceilings derived again."""
    from bench import capacity as model

    found: dict[str, dict[str, Any]] = {}
    for name, scenario in stored.items():
        if "inputs" not in scenario:
            continue
        inputs = model.inputs_from(scenario["inputs"])
        found[name] = {**scenario, **model.result(inputs, shapes_of(scenario, q.ses_rate), q)}
    if "sequences" in found:  # a sign-up or import spike: the drip's first mails
        wave = model.trigger_wave(model.inputs_from(found["sequences"]["inputs"]))
        found["trigger-wave"] = {
            **found["sequences"],
            "description": "a sign-up or import spike: one StartExecution per subscriber's first mail",
            "inputs": wave.public(),
            **model.result(wave, shapes_of(found["sequences"], q.ses_rate), q),
        }
    return found


def shapes_of(scenario: dict[str, Any], ses_rate: float) -> dict[str, Any]:
    from bench import capacity as model

    shapes = {f: model.FunctionShape(**shape) for f, shape in scenario["shapes"].items()}
    return model.shapes_for(shapes, ses_rate)


def day_one(stored: dict[str, dict[str, Any]], region: str) -> dict[str, Any]:
    """Broadcast and sequences on a new account's first day: fresh tables, a smaller Region."""
    from bench import capacity as model

    q = model.quotas(region=region, account="new", table="fresh")
    found = recompute({n: s for n, s in stored.items() if n in ("broadcast", "sequences")}, q)
    return {"quotas": q.describe(), **{n: {k: r[k] for k in _CEILING_KEYS} for n, r in found.items()}}


_CEILING_KEYS = ("ceiling_per_s", "limited_by", "ceiling_without_ses_per_s", "limited_without_ses_by")


def capacity(argv: list[str]) -> int:
    """``python -m bench capacity [--region R] [--account new|mature] [--table fresh|warm] [--json]
    [--inputs FILE] [scenario ...]``."""
    from bench import capacity as model
    from bench import capacity_runs

    parser = argparse.ArgumentParser(
        prog="python -m bench capacity",
        description="The capacity model: ceilings in mails per second and what sets them (docs/bench.md).",
    )
    parser.add_argument("scenarios", nargs="*", metavar="scenario",
                        help=f"of {list(capacity_runs.SCENARIOS)}; default: all")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print one JSON object keyed by scenario")
    parser.add_argument("--region", default="us-east-1", help="the Region (Step Functions quotas)")
    parser.add_argument("--account", choices=("new", "mature"), default="mature",
                        help="new: SES at 14/s, Lambda and Step Functions at their defaults")  # fmt: skip
    parser.add_argument("--table", choices=("fresh", "warm"), default="fresh",
                        help="fresh: a new table's throughput; warm: pre-warmed for --peak")  # fmt: skip
    parser.add_argument("--peak", type=float, help="warm: the expected peak (mails/s); default the SES rate")
    parser.add_argument("--ses-rate", type=float,
                        help="the account's SES MaxSendRate (mails/s); default 1,000, new: 14")  # fmt: skip
    parser.add_argument("--lambda-concurrency", type=int, help="the account's Lambda concurrency")
    parser.add_argument("--sfn-transitions", type=float, help="the account's state transitions refill/s")
    parser.add_argument("--inputs", type=Path, metavar="FILE",
                        help="derive from a previous --json output, without running")  # fmt: skip
    parser.add_argument("--day-one-region", default=DAY_ONE_REGION, help="the day-one variant's Region")
    args = parser.parse_args(argv)
    q = model.quotas(args.region, args.account, args.table, args.ses_rate, args.peak, args.lambda_concurrency,
                     args.sfn_transitions)  # fmt: skip
    names = args.scenarios or list(capacity_runs.SCENARIOS)
    unknown = [n for n in names if n not in capacity_runs.SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; known: {list(capacity_runs.SCENARIOS)}")
    if "engagement" in names and "broadcast" not in names:
        names.insert(names.index("engagement"), "broadcast")  # the events of its mails
    console = Console(stderr=args.json)
    if args.inputs:
        stored = json.loads(args.inputs.read_text())
    else:
        stored = {}
        # The template a deployment for that account rate gets (the broadcast workers are sized by it).
        with _runtime({"mailstep:sesMaxSendRate": q.ses_rate}) as bench:
            for name in names:
                console.rule(f"[bold]capacity: {name}")
                stored[name] = capacity_runs.derive(capacity_runs.SCENARIOS[name](bench), q)
    results = recompute({n: stored[n] for n in names if n in stored}, q)
    if "broadcast" in results:
        results["broadcast"]["at_a_million"] = capacity_runs.at_a_million(results)
    wanted = {n: results[n] for n in [*(args.scenarios or names), "trigger-wave"] if n in results}
    first_day = day_one(results, args.day_one_region)
    if args.json:
        print(json.dumps({**wanted, "quotas": q.describe(), "day_one": first_day}, indent=2))
    else:
        console.print(capacity_table(wanted, q.describe()))
        if "at_a_million" in results.get("broadcast", {}):
            console.print("A broadcast to a million recipients:", results["broadcast"]["at_a_million"])
        console.print(f"Day one ({first_day.pop('quotas')}):", first_day)
    return 0


BENCH_MAX_24_HOUR_SEND = 10_000_000  # above any tier's mails (scale: 100,000 by default)


@contextlib.contextmanager
def _runtime(context: dict[str, Any] | None = None) -> Iterator[Any]:
    """A fresh local runtime in the deployed shape, its requests metered: a :class:`Bench`."""
    from bench.harness import Bench
    from bench.meter import Meter
    from local_aws import LocalRuntime, RuntimeConfig

    meter = Meter()
    meter.install()
    try:
        # The deployed shape: every function from the artifact in its own execution environments,
        # which report each request to the meter; the runtime's own requests reach its hooks.
        # SES is not what the bench measures: a rate and a 24-hour quota it never reaches (the
        # local SES's default 50,000 a day stopped the scale tier's 100,000 mails half-way).
        config = RuntimeConfig(max_send_rate=10_000, max_24_hour_send=BENCH_MAX_24_HOUR_SEND, context=context)
        with LocalRuntime(config) as runtime:
            assert runtime.environments is not None
            runtime.environments.on_request = meter.record
            yield Bench(runtime=runtime, meter=meter)
    finally:
        meter.uninstall()


def main(argv: list[str] | None = None) -> int:
    from bench.scenarios import SCENARIOS

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["capacity"]:
        return capacity(argv[1:])
    if argv[:1] == ["scale"]:
        from bench import scale

        return scale.main(argv[1:], _runtime)
    if argv[:1] == ["coldstart"]:
        from bench import coldstart

        return coldstart.main(argv[1:])
    if argv[:1] == ["console"]:
        from bench import console_pages

        return console_pages.main(argv[1:], _runtime)

    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "scenarios", nargs="*", metavar="scenario", help=f"one of {sorted(SCENARIOS)}; default: all"
    )
    args = parser.parse_args(argv)

    console = Console()
    names = args.scenarios or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; known: {sorted(SCENARIOS)}")
    with _runtime() as bench:
        for name in names:
            scenario = SCENARIOS[name]
            console.rule(f"[bold]{name}[/bold]: {scenario.DESCRIPTION}")
            measurements = scenario.run(bench)
            console.print(requests_table(measurements))
            console.print(cost_table(measurements))
    console.print(f"Prices: {', '.join(f'{k}={v:.10g}' for k, v in PRICES.items())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
