"""Target selection for every operator command: the local runtime or a stack, one resolution.

    mailstep subscribers list                      # the running `mailstep dev` (.mailstep/)
    mailstep subscribers list --stack Mailstep     # a deployed stack, found by name
    MAILSTEP_STACK=Mailstep mailstep doctor        # same, from the environment
    mailstep doctor --target local --state-dir /tmp/dev

Rules: ``--target local`` uses the local runtime (an error when none is running);
``--target stack`` or a stack name (``--stack`` / ``MAILSTEP_STACK``) uses that stack
(default name ``Mailstep``) with the usual AWS credentials, region (``--region`` /
``AWS_REGION``) and endpoint (``AWS_ENDPOINT_URL`` when set); with neither, the local runtime
is used when one is running, otherwise the command stops and says how to choose.

Both end in ``ops.targets.stack_target``: the local runtime registers itself in its
emulated CloudFormation as the stack ``Mailstep`` (``cli.local.cfn_stack``), so choosing it
only points the AWS clients at its endpoint first. This module is the only one of the CLI
that writes ``os.environ`` (where boto3 reads endpoint, region and credentials).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import typer

from cli.dev_cmd import DEFAULT_STATE_DIR

if TYPE_CHECKING:
    from ops.targets import Target

TARGET = typer.Option(None, "--target", help="local | stack (default: local when `mailstep dev` runs).")
STACK = typer.Option(None, "--stack", envvar="MAILSTEP_STACK", help="Name of a deployed stack.")
REGION = typer.Option(None, "--region", help="AWS region of the stack (default: AWS_REGION).")
STATE_DIR = typer.Option(DEFAULT_STATE_DIR, "--state-dir", help="State folder of the running `mailstep dev`.")
STATE_FILE = "runtime.json"  # written by cli.local.runtime (LocalRuntime._write_state)


class TargetError(Exception):
    """No usable target (exit code 2 with the message)."""


def local_state(state_dir: Path) -> dict[str, Any] | None:
    """The runtime.json of a RUNNING local runtime in ``state_dir``, else None.

    ``mailstep dev`` leaves runtime.json behind when it stops, so the endpoint must answer.
    """
    path = state_dir / STATE_FILE
    if not path.exists():
        return None
    state = dict(json.loads(path.read_text()))
    endpoint = urlparse(str(state.get("endpoint", "")))
    try:
        with socket.create_connection((endpoint.hostname or "127.0.0.1", endpoint.port or 80), timeout=1):
            return state
    except OSError:
        return None


def _point_at_local(state: dict[str, Any]) -> None:
    os.environ.update(
        {
            "AWS_ENDPOINT_URL": str(state["endpoint"]),
            "AWS_DEFAULT_REGION": str(state["region"]),
            "AWS_REGION": str(state["region"]),
            "AWS_ACCESS_KEY_ID": "mailstep-local",
            "AWS_SECRET_ACCESS_KEY": "mailstep-local",
        }
    )
    for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE"):
        os.environ.pop(name, None)


def quiet_logs() -> None:
    """The structured logs go to stderr (stdout carries command output: JSON, CSV, the MCP
    protocol), at WARNING unless POWERTOOLS_LOG_LEVEL asks for more."""
    import logging
    import sys

    from shared.core.observability import SERVICE

    log = logging.getLogger(SERVICE)
    for handler in log.handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(sys.stderr)
    log.setLevel(os.environ.get("POWERTOOLS_LOG_LEVEL", "WARNING").upper())


def resolve(target: str | None, stack: str | None, state_dir: Path, region: str | None = None) -> Target:
    """Resolve the options to a ``ops.targets.Target`` and point the AWS clients at it."""
    from botocore.exceptions import BotoCoreError, ClientError

    from ops import targets
    from shared.core import specs
    from shared.core.aws import reset_clients

    quiet_logs()
    if target not in (None, targets.LOCAL, targets.STACK):
        raise TargetError(f"--target must be 'local' or 'stack', not {target!r}")
    state_dir = state_dir.resolve()
    local = target == targets.LOCAL or (target is None and not stack)
    if local:
        state = local_state(state_dir)
        if state is None:
            hint = "start `mailstep dev`, or choose a deployed stack with --stack NAME (or MAILSTEP_STACK)"
            raise TargetError(f"no running local runtime in {state_dir}: {hint}")
        _point_at_local(state)
        region = str(state["region"])
    else:
        region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if not region:
            raise TargetError("no AWS region: pass --region or set AWS_REGION")
        os.environ["AWS_REGION"] = os.environ["AWS_DEFAULT_REGION"] = region
    reset_clients()
    name = specs.STACK_NAME if local else stack or specs.STACK_NAME
    try:
        if local:
            return targets.local_target(str(state_dir), region)
        return targets.stack_target(name, region)
    except targets.StackNotFound as exc:
        if local:
            raise TargetError(
                f"the local runtime in {state_dir} registered no stack {name!r}: restart it"
            ) from None
        where = f" at {os.environ['AWS_ENDPOINT_URL']}" if os.environ.get("AWS_ENDPOINT_URL") else ""
        hint = "check --stack (or MAILSTEP_STACK), --region (or AWS_REGION) and your credentials' account"
        raise TargetError(f"{exc} ({region}{where}): {hint}") from None
    except (BotoCoreError, ClientError) as exc:
        raise TargetError(f"cannot read stack {name!r} in {region}: {exc}") from None


def select(target: str | None, stack: str | None, state_dir: Path, region: str | None = None) -> Target:
    """:func:`resolve` for typer commands: a problem becomes a clean exit with code 2."""
    from shared.core.errors import MailstepError

    try:
        return resolve(target, stack, state_dir, region)
    except (TargetError, MailstepError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


@contextmanager
def errors_to_exit() -> Iterator[None]:
    """Domain errors become one line on stderr: exit 1 (not found, conflict), 2 (bad input)."""
    from shared.core.errors import InvalidInput, MailstepError

    try:
        yield
    except InvalidInput as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except MailstepError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
