"""``mailstep webhooks add | list | remove | enable | test | deliveries | replay | rotate``:
signed Standard Webhooks to your app (docs/webhooks.md). The logic is ``ops.webhooks``."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.table import Table

from cli.target import errors_to_exit, json_or, targeted

if TYPE_CHECKING:
    from ops.targets import Target
    from ops.webhooks import Webhooks

console = Console()
app = typer.Typer(help="Webhooks: signed events to your app's endpoints.", no_args_is_help=True)
ENDPOINT = typer.Argument(..., help="The endpoint id (ep_...).")
AS_JSON = typer.Option(False, "--json", help="Print JSON instead of a table.")


def _webhooks(target: Target) -> Webhooks:
    from ops.webhooks import Webhooks

    return Webhooks.for_target(target)


@app.command()
@targeted
def add(
    url: str = typer.Argument(..., help="The receiver's https URL."),
    events: str = typer.Option(
        ..., "--events", help="Comma-separated types or families: subscriber.*,email.bounced"
    ),
    description: str = typer.Option("", "--description", help="What this endpoint is for."),
    *,
    target: Target,
) -> None:
    """Add an endpoint; prints its signing secret, once."""
    with errors_to_exit():
        added = _webhooks(target).add(url, events, description)
    console.print(f"endpoint [bold]{added.endpoint.id}[/bold] -> {added.endpoint.url}")
    console.print(f"events: {', '.join(added.endpoint.events)}")
    console.print("signing secret (shown once; keep it in your app's configuration):")
    typer.echo(added.secret)


def _endpoints_table(found: list[dict[str, Any]]) -> None:
    table = Table(title=f"Webhook endpoints ({len(found)})")
    for column in ("id", "url", "events", "status", "description"):
        table.add_column(column)
    for e in found:
        status = e["status"] if e["status"] == "enabled" else f"{e['status']}: {e['disabled_reason']}"
        if e["failing_since"] and e["status"] == "enabled":
            status += f" (failing since {e['failing_since'][:19]})"
        table.add_row(e["id"], e["url"], ", ".join(e["events"]), status, e["description"])
    console.print(table)


@app.command("list")
@targeted
@json_or(_endpoints_table)
def list_(*, target: Target) -> list[dict[str, Any]]:
    """Every endpoint, its events and its state."""
    with errors_to_exit():
        return [e.public() for e in _webhooks(target).endpoints()]


@app.command()
@targeted
def remove(endpoint_id: str = ENDPOINT, *, target: Target) -> None:
    """Remove an endpoint and its secret (nothing more is delivered to it)."""
    with errors_to_exit():
        removed = _webhooks(target).remove(endpoint_id)
    console.print(f"removed {removed.id} ({removed.url})")


@app.command()
@targeted
def enable(endpoint_id: str = ENDPOINT, *, target: Target) -> None:
    """Enable a disabled endpoint again (after a 410, or 5 days of failures)."""
    with errors_to_exit():
        endpoint = _webhooks(target).enable(endpoint_id)
    console.print(f"{endpoint.id} enabled")


@app.command()
@targeted
def test(endpoint_id: str = ENDPOINT, *, target: Target) -> None:
    """Send a webhook.test event to one endpoint."""
    with errors_to_exit():
        message_id = _webhooks(target).test(endpoint_id)
    console.print(
        f"queued webhook.test {message_id}; `mailstep webhooks deliveries {endpoint_id}` shows the answer"
    )


@app.command()
@targeted
def deliveries(
    endpoint_id: str = ENDPOINT,
    failed: bool = typer.Option(False, "--failed", help="Only the dead letters (every attempt failed)."),
    limit: int = typer.Option(50, "--limit", min=1, max=500),
    as_json: bool = AS_JSON,
    *,
    target: Target,
) -> None:
    """The endpoint's deliveries, newest first, with their attempts."""
    with errors_to_exit():
        found = _webhooks(target).deliveries(endpoint_id, failed=failed, limit=limit)
    if as_json:
        console.print_json(json.dumps([d.public() for d in found]))
        return
    table = Table(title=f"Deliveries of {endpoint_id} ({len(found)}{', failed' if failed else ''})")
    for column in ("created", "webhook-id", "event", "status", "attempts", "last answer"):
        table.add_column(column)
    for d in found:
        answer = str(d.last_status) if d.last_status is not None else (d.last_error or "")
        table.add_row(d.created_at[:19], d.message_id, d.event_type, d.status, str(d.attempts), answer[:60])
    console.print(table)


@app.command()
@targeted
def replay(
    endpoint_id: str = ENDPOINT,
    since: str = typer.Option(..., "--since", help="ISO time: failed deliveries of events from then on."),
    *,
    target: Target,
) -> None:
    """Deliver the failed deliveries since TIME again (same webhook-id, same body)."""
    with errors_to_exit():
        replayed = _webhooks(target).replay(endpoint_id, since)
    console.print(f"{len(replayed)} deliveries queued again")


@app.command()
@targeted
def rotate(endpoint_id: str = ENDPOINT, *, target: Target) -> None:
    """A new signing secret; the previous one keeps signing for 24 hours. Prints it once."""
    with errors_to_exit():
        rotated = _webhooks(target).rotate(endpoint_id)
    console.print(f"{rotated.endpoint.id}: new signing secret (the previous one signs too for 24 hours):")
    typer.echo(rotated.secret)


if __name__ == "__main__":
    app()
