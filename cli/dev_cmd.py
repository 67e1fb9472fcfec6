"""``mailstep dev``: the whole stack on an embedded emulated AWS, until Ctrl-C."""

from __future__ import annotations

import json
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from ops.targets import DEFAULT_STATE_DIR


def dev(
    port: int = typer.Option(4566, help="Port of the emulated AWS endpoint (0: a free port)."),
    api_port: int = typer.Option(8787, help="Port of the local HTTP API, plain http (0: a free port)."),
    public_port: int = typer.Option(
        8443, help="Port of the same API over https: the base of links in mail (0: a free port)."
    ),
    speed: float = typer.Option(
        3600.0, help="Step Functions Wait/Retry speed-up (3600: an hour per second; 0: instant)."
    ),
    max_send_rate: float | None = typer.Option(
        None, help="SES MaxSendRate (messages per second); default 14, with --ses-sandbox 1."
    ),
    max_24_hour_send: int | None = typer.Option(
        None, help="SES Max24HourSend quota; default 50,000, with --ses-sandbox 200."
    ),
    state_dir: Path = typer.Option(DEFAULT_STATE_DIR, help="Where runtime.json and the outbox/ live."),
    ses_sandbox: bool = typer.Option(
        False,
        "--ses-sandbox",
        help="Emulate an SES account in the sandbox: mail only to verified identities "
        "(`mailstep local verify ADDRESS`) and the mailbox simulator, 200 a day, 1 a second.",
    ),
    identity_pending: bool = typer.Option(
        False,
        "--identity-pending",
        help="Emulate a new sending domain that SES has not verified yet: its sends are refused "
        "as SES refuses them (mail is held, not lost) until `mailstep local verify DOMAIN`.",
    ),
    warmup: str | None = typer.Option(
        None,
        "--warmup",
        help="The sending domain's warm-up (docs/sending.md): daily volumes of day 1, 2, ... "
        "('200,400,800'), 'default' or 'off' (the local default: off).",
    ),
    console_port: int = typer.Option(
        8790, "--console-port", help="Port of the web console on 127.0.0.1 (another free one when taken)."
    ),
    reputation_min_sends: int = typer.Option(
        200,
        "--reputation-min-sends",
        help="Sends a configuration set needs in the window before its local reputation rates count "
        "(docs/reputation.md).",
    ),
    reputation_alarms: bool = typer.Option(
        True,
        "--reputation-alarms/--no-reputation-alarms",
        help="Evaluate the stack's reputation alarms locally (the guardrail pauses marketing sending).",
    ),
    template: Path | None = typer.Option(
        None,
        "--template",
        help="Run this synthesized template (JSON) instead of the one synthesized from this checkout "
        "(e.g. to try a policy change); the code asset is still this checkout's.",
    ),
) -> None:
    """Run mailstep locally: emulated AWS, the deployed artifact's Lambdas, local SES and the HTTP API."""
    from local_aws import LocalRuntime, RuntimeConfig

    # Redirected to a file (a log), long paths and commands must stay on one line each.
    console = Console() if sys.stdout.isatty() else Console(width=400)
    stop = threading.Event()

    def _stop(signum: int, frame: Any) -> None:
        stop.set()

    if warmup is not None:
        from shared.core.specs import parse_warmup

        try:
            parse_warmup(warmup)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--warmup") from None
    config = RuntimeConfig(
        port=port,
        api_port=api_port,
        public_port=public_port,
        speed=None if speed <= 0 else speed,
        # the sandbox's quotas: 200 messages in 24 hours, 1 a second (SES Developer Guide,
        # "Request production access"); a production account's default here: 50,000 and 14
        max_send_rate=max_send_rate if max_send_rate is not None else (1.0 if ses_sandbox else 14.0),
        max_24_hour_send=max_24_hour_send
        if max_24_hour_send is not None
        else (200 if ses_sandbox else 50_000),
        state_dir=state_dir.resolve(),
        template_override=json.loads(template.read_text()) if template else None,
        ses_sandbox=ses_sandbox,
        identity_pending=identity_pending,
        context={"mailstep:warmup": warmup} if warmup is not None else None,
        reputation_min_sends=reputation_min_sends,
        reputation_alarms=reputation_alarms,
    )
    from local_aws.artifact import ArtifactError

    previous = {s: signal.signal(s, _stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with LocalRuntime(config) as runtime:
            console.print(_banner(runtime), soft_wrap=True)
            served = _console(state_dir.resolve(), console_port)
            if served is not None:
                console.print(
                    f"console: {served.url}  (signs in once; `mailstep console token` prints a fresh link)",
                    soft_wrap=True,
                    highlight=False,
                )
            while not stop.wait(0.5):
                pass
            if served is not None:
                served.stop()
            console.print("[bold]stopping[/bold] ...")
    except ArtifactError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    console.print("stopped.")


def _console(state_dir: Path, port: int) -> Any:
    """``mailstep console`` for this runtime on a thread (None, with a warning, when it
    cannot start: the runtime runs without it)."""
    from cli.target import quiet_logs
    from console.server import local_outbox, serve
    from ops.targets import TargetError, resolve
    from shared.core.errors import MailstepError

    quiet_logs()
    try:
        target = resolve("local", None, state_dir)
        served = serve(target, port, state_dir=state_dir, fallback=True, outbox=local_outbox(target))
    except (TargetError, MailstepError, OSError) as exc:
        typer.echo(f"warning: no web console: {exc}", err=True)
        return None
    served.start()
    return served


def _banner(runtime: Any) -> Panel:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    table.add_row("AWS endpoint", runtime.endpoint)
    table.add_row("HTTP API", f"{runtime.api_url}  (routes: POST /v1/events ...)")
    table.add_row("HTTPS API", f"{runtime.public_url}  (same routes; links in mail, e.g. /u/<token>)")
    table.add_row("Certificate", f"{runtime.tls.cert}  (self-signed: curl --cacert <this file>, or -k)")
    table.add_row("API key", runtime.api_key)
    table.add_row("Outbox", str(runtime.outbox))
    table.add_row("Region", runtime.config.region)
    speed = runtime.clock.speed
    if runtime.artifact is not None:
        table.add_row("Lambdas", f"from {runtime.artifact.asset_dir} on Python 3.12, IAM enforced")
        table.add_row("Function logs", f"{runtime.logs_dir}/<function>.log")
    else:
        table.add_row("Lambdas", "in this process, from the source tree (no IAM checks)")
    table.add_row("Wait states", "instant" if speed is None else f"{speed:g}x real time")
    table.add_row("Started in", f"{runtime.started_in_s:.2f} s")
    table.add_row(
        "Try",
        f"curl -X POST {runtime.api_url}/v1/events -H 'Authorization: Bearer {runtime.api_key}' "
        '-d \'{"type":"subscriber.subscribed","email":"ada@example.com"}\'',
    )
    table.add_row(
        "",
        f"AWS_ACCESS_KEY_ID=x AWS_SECRET_ACCESS_KEY=x aws --region {runtime.config.region} "
        f"--endpoint-url {runtime.endpoint} dynamodb scan "
        f"--table-name {runtime.resources.tables['table_name']}",
    )
    table.add_row("", "mailstep local open|click|bounce|complain <message-id or email>")
    return Panel(table, title="mailstep dev: serving (Ctrl-C stops)", expand=False)
