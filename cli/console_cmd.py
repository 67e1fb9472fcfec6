"""``mailstep console``: the web console on 127.0.0.1, against the local runtime or a stack
(the target options of ``cli.target``), and ``mailstep console token``: a fresh sign-in link for
a console that runs (each link signs in once). The server is ``console``."""

from __future__ import annotations

import webbrowser
from pathlib import Path

import typer

from cli.target import Region, StackName, StateDir, TargetKind, select
from ops.targets import DEFAULT_STATE_DIR

DEFAULT_PORT = 8790

app = typer.Typer(
    help="The web console on 127.0.0.1 with your credentials; `mailstep console token`: a fresh sign-in link."
)


@app.callback(invoke_without_command=True)
def console(
    ctx: typer.Context,
    port: int = typer.Option(DEFAULT_PORT, "--port", help="Port on 127.0.0.1 (0: a free port)."),
    no_open: bool = typer.Option(False, "--no-open", help="Do not open a browser."),
    target_kind: TargetKind = None,
    stack: StackName = None,
    state_dir: StateDir = DEFAULT_STATE_DIR,
    region: Region = None,
) -> None:
    """The web console on 127.0.0.1 with your credentials: overview, subscribers, broadcasts,
    templates, sequences, topics, suppression (Ctrl-C stops). The link it prints signs in once;
    `mailstep console token` prints a fresh one."""
    if ctx.invoked_subcommand is not None:
        return
    from console.server import local_outbox, serve

    target = select(target_kind, stack, state_dir, region)
    try:
        served = serve(target, port, state_dir=state_dir.resolve(), outbox=local_outbox(target))
    except OSError as exc:
        typer.echo(f"error: cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"console: {served.url}")
    typer.echo(f"target: {target.label}  (the link signs this browser in, once; Ctrl-C stops)")
    if not no_open:
        webbrowser.open(served.url)
    served.run()


@app.command("token")
def token(
    port: int | None = typer.Option(
        None, "--port", help="Port of the console (default: the only one running from --state-dir)."
    ),
    state_dir: Path = typer.Option(
        DEFAULT_STATE_DIR, "--state-dir", help="State folder the console was started with."
    ),
    open_browser: bool = typer.Option(False, "--open", help="Open it in a browser too."),
) -> None:
    """A fresh sign-in link for the running console: it signs in once, within 10 minutes."""
    from console.control import ControlError, fresh_url
    from console.guard import FRESH_TOKEN_TTL_S

    try:
        url, console = fresh_url(state_dir.resolve(), port)
    except ControlError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"console: {url}")
    typer.echo(f"target: {console.target}  (signs in once, within {FRESH_TOKEN_TTL_S // 60} minutes)")
    if open_browser:
        webbrowser.open(url)
