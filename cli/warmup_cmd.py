"""``mailstep warmup status | plan SIZE | restart | finish``: the sending domain's warm-up
(docs/sending.md, "Warm-up")."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from cli.target import targeted

if TYPE_CHECKING:
    from ops.targets import Target

console = Console()
app = typer.Typer(
    help="The sending domain's warm-up: today's allowance, a broadcast's plan, restart, finish.",
    no_args_is_help=True,
)


def _print(status: dict[str, object], as_json: bool) -> None:
    if as_json:
        console.print_json(json.dumps(status))
        return
    if not status["on"]:
        reason = "finished" if status["finished"] else f"schedule {status['schedule']}"
        console.print(f"warm-up of {status['domain']}: off ({reason}); no daily limit")
        return
    since = status["start_day"] or "the first send"
    console.print(
        f"warm-up of {status['domain']}: day {status['day'] or 1} (since {since}), "
        f"today {status['used']:,} of {status['allowance']:,} sent, {status['left']:,} left; "
        f"schedule {status['schedule']}",
        soft_wrap=True,
    )


@app.command()
@targeted
def status(
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    *,
    target: Target,
) -> None:
    """The domain's ramp: which day, today's allowance, what was sent today."""
    from ops.warmup import WarmupService

    _print(WarmupService.of(target).status(), as_json)


@app.command()
@targeted
def plan(
    size: int = typer.Argument(..., min=1, help="Recipients of the broadcast."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    *,
    target: Target,
) -> None:
    """How a broadcast of SIZE recipients spreads over days under the ramp."""
    from ops.warmup import WarmupService

    found = WarmupService.of(target).plan(size)
    if as_json:
        console.print_json(
            json.dumps(found.public() if found else {"size": size, "line": f"all {size:,} today"})
        )
        return
    console.print(
        f"warm-up: {found.line}" if found else f"no warm-up limit: all {size:,} today", soft_wrap=True
    )


@app.command()
@targeted
def restart(*, target: Target) -> None:
    """Day 1 is today (after a long pause in sending, say)."""
    from ops.warmup import WarmupService

    _print(WarmupService.of(target).restart(), False)


@app.command()
@targeted
def finish(*, target: Target) -> None:
    """End the ramp now: no daily limit from here on (an established domain)."""
    from ops.warmup import WarmupService

    _print(WarmupService.of(target).finish(), False)
