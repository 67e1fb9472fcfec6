"""``mailstep doctor``: SES identity and DKIM, sandbox, quota, configuration set, alarms, DLQs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from cli.target import errors_to_exit, print_json, targeted

if TYPE_CHECKING:
    from ops.targets import Target

console = Console()
STYLE = {"pass": "green", "fail": "bold red", "skip": "dim"}


@targeted
def doctor(
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    *,
    target: Target,
) -> None:
    """Check a deployment's health: each check passes or fails with a hint; exit 1 when one fails."""
    from ops import doctor as checks

    with errors_to_exit():
        report = checks.run(target)
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
