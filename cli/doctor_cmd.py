"""``mailstep doctor``: SES identity and DKIM, sandbox, quota, configuration set, alarms, DLQs,
open Step Functions executions against their quota, Lambda concurrency, replies' inbound
identity and receipt rule set (ops/doctor.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from cli.target import errors_to_exit, print_json, targeted

if TYPE_CHECKING:
    from ops.targets import Target

console = Console()
STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


@targeted
def doctor(
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    executions_quota: int = typer.Option(
        1_000_000,
        "--executions-quota",
        min=1,
        help="The account's open Step Functions executions quota in this region (1,000,000 unless raised).",
    ),
    executions_counted: int = typer.Option(
        20_000,
        "--executions-counted",
        min=1,
        max=10_000_000,
        help="Count at most this many open executions (ListExecutions: one call per 1,000); past it "
        "doctor says 'at least N'.",
    ),
    *,
    target: Target,
) -> None:
    """Check a deployment's health: each check passes or fails with a hint; exit 1 when one fails."""
    from ops import doctor as checks

    with errors_to_exit():
        report = checks.run(target, executions_quota=executions_quota, executions_counted=executions_counted)
    if as_json:
        print_json(report.public())
    else:
        table = Table(title=f"mailstep doctor: {report.target}")
        for column in ("check", "result", "detail", "hint"):
            table.add_column(column)
        for check in report.checks:
            style = STYLE[check.status]
            table.add_row(check.name, f"[{style}]{check.status}[/{style}]", check.detail, check.hint)
        console.print(table)
        console.print(
            "[green]all checks passed[/green]" if report.ok else "[bold red]some checks failed[/bold red]"
        )
    if not report.ok:
        raise typer.Exit(1)
