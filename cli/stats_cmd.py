"""``mailstep stats``: sent, delivered, opened, clicked, bounced, complained, unsubscribed;
and sign-ups, confirmations and the confirmation rate (``--signups``, and below the sources).
``--broadcast`` of an A/B test shows its decision too (per variant: delivered, human opens or
clicks, rate; the winner and why: docs/broadcasts.md, "A/B tests").

Works against the running local runtime (``--state-dir``, the default) or a deployed stack
(``--stack``): the options of ``cli.target.targeted``. The numbers come from
``shared.store.stats``; this module only formats them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from cli.target import targeted
from ops.tables import counters_table, percent, signups_table

if TYPE_CHECKING:
    from ops.targets import Target
    from shared.broadcasts.abtest import Decision

console = Console()
app = typer.Typer(help="Engagement statistics per sequence, broadcast or template; sign-ups.")


@app.command()
@targeted
def stats(
    sequence: str | None = typer.Option(None, help="A sequence id."),
    broadcast: str | None = typer.Option(None, help="A broadcast id."),
    template: str | None = typer.Option(None, help="A template key, e.g. onboarding/welcome."),
    since: str | None = typer.Option(None, help="Only events from this date on (2026-01-31)."),
    signups: bool = typer.Option(
        False, "--signups", help="Only sign-ups, confirmations and the confirmation rate."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    *,
    target: Target,
) -> None:
    """Engagement totals, unique opens/clicks and rates (every source when none is named); sign-ups."""
    import json

    from shared.store.stats import report

    chosen = [v for v in (sequence, broadcast, template) if v] + (["signups"] if signups else [])
    if len(chosen) > 1:
        raise typer.BadParameter("name at most one of --sequence, --broadcast, --template, --signups")
    store = target.stats_store()
    source = sequence or broadcast
    if signups:
        if since:
            raise typer.BadParameter("--since needs --sequence, --broadcast or --template")
        counts = store.signups().public()
        if as_json:
            console.print_json(json.dumps(counts))
        else:
            console.print(signups_table(counts))
        return
    if not chosen:
        if since:
            raise typer.BadParameter("--since needs --sequence, --broadcast or --template")
        everything = {name: c.rows() for name, c in store.sources().items()}
        if as_json:  # the sources only, as before: --signups --json has the sign-ups
            console.print_json(json.dumps(everything))
            return
        if not everything:
            console.print("no engagement recorded yet")
        for name, rows in everything.items():
            console.print(counters_table(name, rows))
        console.print(signups_table(store.signups().public()))
        return
    try:
        counters = report(store, source=source, template=template, since=since)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    label = f"{'template ' + template if template else source}" + (f" since {since}" if since else "")
    decision = _ab_decision(target, broadcast) if broadcast else None
    if as_json:
        shown = {"scope": label, "rows": counters.rows()}
        console.print_json(json.dumps(shown | ({"ab_decision": decision.model_dump()} if decision else {})))
        return
    console.print(counters_table(label, counters.rows()))
    if decision is not None:
        console.print(ab_table(broadcast or "", decision))


def _ab_decision(target: Target, broadcast_id: str) -> Decision | None:
    """The A/B test decision recorded on the broadcast (docs/broadcasts.md, "A/B tests")."""
    from shared.broadcasts.records import BroadcastStore

    record = BroadcastStore(target.settings.table_name, client=target.client("dynamodb")).get(broadcast_id)
    return record.ab_decision if record is not None else None


def ab_table(broadcast_id: str, decision: Decision) -> Table:
    """Per variant: delivered, human opens or clicks and their rate; the winner and why."""
    table = Table(
        title=f"A/B test {broadcast_id}: {decision.winner} won ({decision.reason}), "
        f"sent to the rest as {decision.rest_id}"
    )
    for column in ("variant", "template", "subject", "delivered", f"human {decision.metric}", "rate"):
        table.add_column(column)
    for row in decision.variants:
        mark = " (winner)" if row.variant == decision.winner else ""
        table.add_row(f"{row.variant}{mark}", row.template, row.subject or "", str(row.delivered),
                      str(row.engaged), percent(row.rate))  # fmt: skip
    return table


if __name__ == "__main__":
    app()
