"""``python -m bench [scenario ...]``: run scenarios on a fresh local runtime, print tables."""

from __future__ import annotations

import argparse
import os
import sys

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
        "[bold]Lambda GB-s (local wall time)", *[f"{m.lambda_gb_s / m.units:.4f}" for m in measurements]
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


def main(argv: list[str] | None = None) -> int:
    from bench.scenarios import SCENARIOS

    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "scenarios", nargs="*", metavar="scenario", help=f"one of {sorted(SCENARIOS)}; default: all"
    )
    args = parser.parse_args(argv)

    from bench.harness import Bench
    from bench.meter import Meter
    from cli.local import LocalRuntime, RuntimeConfig

    console = Console()
    meter = Meter()
    meter.install()
    names = args.scenarios or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; known: {sorted(SCENARIOS)}")
    # The deployed shape: every function from the artifact in its own execution environments,
    # which report each request to the meter; the runtime's own requests reach its hooks.
    with LocalRuntime(RuntimeConfig(max_send_rate=10_000)) as runtime:
        assert runtime.environments is not None
        runtime.environments.on_request = meter.record
        bench = Bench(runtime=runtime, meter=meter)
        for name in names:
            scenario = SCENARIOS[name]
            console.rule(f"[bold]{name}[/bold]: {scenario.DESCRIPTION}")
            measurements = scenario.run(bench)
            console.print(requests_table(measurements))
            console.print(cost_table(measurements))
    meter.uninstall()
    console.print(f"Prices: {', '.join(f'{k}={v:.10g}' for k, v in PRICES.items())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
