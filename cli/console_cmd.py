"""``mailstep console``: the web console on 127.0.0.1, against the local runtime or a stack
(the target options of ``cli.target.targeted``). The server is ``console``."""

from __future__ import annotations

import webbrowser
from typing import TYPE_CHECKING

import typer

from cli.target import targeted

if TYPE_CHECKING:
    from ops.targets import Target

DEFAULT_PORT = 8790


@targeted
def console(
    port: int = typer.Option(DEFAULT_PORT, "--port", help="Port on 127.0.0.1 (0: a free port)."),
    no_open: bool = typer.Option(False, "--no-open", help="Do not open a browser."),
    *,
    target: Target,
) -> None:
    """The web console on 127.0.0.1 with your credentials: overview, subscribers, broadcasts,
    templates, sequences, topics, suppression (Ctrl-C stops)."""
    from console.server import local_outbox, serve

    try:
        served = serve(target, port, outbox=local_outbox(target))
    except OSError as exc:
        typer.echo(f"error: cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"console: {served.url}")
    typer.echo(f"target: {target.label}  (the link signs this browser in; Ctrl-C stops)")
    if not no_open:
        webbrowser.open(served.url)
    served.run()
