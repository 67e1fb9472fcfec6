"""``mailstep reputation status | resume [--force]``: the reputation guardrail (docs/reputation.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from cli.target import targeted

if TYPE_CHECKING:
    from ops.targets import Target

console = Console()
app = typer.Typer(
    help="The reputation guardrail: each configuration set's rates, the marketing pause, resume.",
    no_args_is_help=True,
)


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.2%}"


@app.command()
@targeted
def status(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    *,
    target: Target,
) -> None:
    """Each configuration set's bounce and complaint rates against the thresholds, paused or not."""
    import json

    from ops.reputation import Reputation

    reputation = Reputation(target)
    found = reputation.status()
    if as_json:
        console.print_json(json.dumps([s.public() for s in found]))
        return
    table = Table(title="Reputation (SES per configuration set; - : no data yet)")
    for column in ("mail", "configuration set", "sending", "bounce rate", "complaint rate"):
        table.add_column(column)
    for s in found:
        sending = "on" if s.sending_enabled else f"PAUSED since {s.paused_at or '?'}"
        table.add_row(
            s.kind,
            s.configuration_set,
            sending,
            f"{_rate(s.bounce_rate)} (pauses above {_rate(s.bounce_threshold)})",
            f"{_rate(s.complaint_rate)} (pauses above {_rate(s.complaint_threshold)})",
        )
    console.print(table)
    for s in found:
        for problem in s.above:
            console.print(f"[yellow]{s.kind}:[/yellow] {problem}")
    held = [r.id for r in reputation.paused_broadcasts()]
    if held:
        console.print(f"broadcasts paused by the guardrail (resumed by `resume`): {', '.join(held)}")


@app.command()
@targeted
def resume(
    force: bool = typer.Option(False, "--force", help="Resume even while a rate is above its threshold."),
    *,
    target: Target,
) -> None:
    """Re-enable marketing sending and resume the paused broadcasts (no one gets a mail twice)."""
    from ops.reputation import Reputation, resumed_line
    from shared.core.errors import Conflict

    try:
        answer = Reputation(target).resume(force=force)
    except Conflict as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
    console.print(resumed_line(answer))
