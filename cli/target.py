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

A command gets the four options by the :func:`targeted` decorator, which declares them once
for every command (they stay options of the command itself: ``mailstep subscribers list
--stack Mailstep``, which a group callback could not accept) and hands the command the
resolved :class:`ops.targets.Target` as its ``target`` parameter: the settings and the
configured clients (``shared.core.aws.ClientFactory``) of that deployment, which the command
passes on to ``ops`` and to the adapters. Both kinds end in ``ops.targets.stack_target``: the
local runtime registers itself in its emulated CloudFormation as the stack ``Mailstep``
(``local_aws.cfn_stack``), so choosing it only means clients aimed at its endpoint.
The process environment is read (``AWS_REGION``, ``AWS_ENDPOINT_URL``), never written.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ops.targets import DEFAULT_STATE_DIR

if TYPE_CHECKING:
    from ops.targets import Target

TargetKind = Annotated[
    str | None, typer.Option("--target", help="local | stack (default: local when `mailstep dev` runs).")
]
StackName = Annotated[
    str | None, typer.Option("--stack", envvar="MAILSTEP_STACK", help="Name of a deployed stack.")
]
Region = Annotated[
    str | None, typer.Option("--region", help="AWS region of the stack (default: AWS_REGION).")
]
StateDir = Annotated[Path, typer.Option("--state-dir", help="State folder of the running `mailstep dev`.")]
AS_JSON = typer.Option(False, "--json", help="Print JSON.")
# The options :func:`targeted` adds to a command: (parameter, annotation, default).
TARGET_OPTIONS = (
    ("target_kind", TargetKind, None),
    ("stack", StackName, None),
    ("state_dir", StateDir, DEFAULT_STATE_DIR),
    ("region", Region, None),
)


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


def select(target: str | None, stack: str | None, state_dir: Path, region: str | None = None) -> Target:
    """``ops.targets.resolve`` for typer commands, the logs on stderr: a problem becomes a clean
    exit with code 2."""
    from ops.targets import TargetError, resolve
    from shared.core.errors import MailstepError

    quiet_logs()
    try:
        return resolve(target, stack, state_dir, region)
    except (TargetError, MailstepError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def local(state_dir: Path) -> Target:
    """The running local runtime in ``state_dir`` (``mailstep local ...``), or exit 2."""
    from ops.targets import LOCAL

    return select(LOCAL, None, state_dir)


def targeted(command: Callable[..., None]) -> Callable[..., None]:
    """Give a typer command the target options (``--target``, ``--stack``, ``--state-dir``,
    ``--region``); the command declares ``target: Target`` and receives the resolved target.

        @app.command()
        @targeted
        def get(email: str = EMAIL, *, target: Target) -> None: ...

    Typer builds the command from the signature this returns: the command's own parameters
    (``target`` left out) followed by the four options.
    """
    # (``Target`` is imported for type checking only: ops loads when a command runs)
    signature = inspect.signature(command, locals={"Target": Any}, eval_str=True)
    if "target" not in signature.parameters:
        raise TypeError(f"{command.__name__} needs a `target: Target` parameter")
    own = [p for p in signature.parameters.values() if p.name != "target"]
    options = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
        for name, annotation, default in TARGET_OPTIONS
    ]

    @functools.wraps(command)
    def run(
        *, target_kind: str | None, stack: str | None, state_dir: Path, region: str | None, **params: Any
    ) -> None:
        command(**params, target=select(target_kind, stack, state_dir, region))

    run.__signature__ = signature.replace(parameters=[*own, *options])  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in [*own, *options]} | {"return": None}
    del run.__wrapped__  # typer reads the signature above, not the command's
    return run


def print_json(data: Any) -> None:
    """Command output as indented JSON on stdout."""
    typer.echo(json.dumps(data, indent=2, default=str))


def json_or(render: Callable[[Any], None]) -> Callable[[Callable[..., Any]], Callable[..., None]]:
    """Give a command the ``--json`` option (before the target options): with it, what the
    command returns (plain data) is printed as indented JSON; without it, ``render`` prints it.

        @app.command("list")
        @targeted
        @json_or(_topics_table)
        def list_(*, target: Target) -> dict[str, Any]: ...
    """

    def decorate(command: Callable[..., Any]) -> Callable[..., None]:
        signature = inspect.signature(command, locals={"Target": Any}, eval_str=True)
        own = list(signature.parameters.values())
        at = next((i for i, p in enumerate(own) if p.kind is p.KEYWORD_ONLY), len(own))
        option = inspect.Parameter(
            "as_json", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=AS_JSON, annotation=bool
        )
        parameters = [*own[:at], option, *own[at:]]

        @functools.wraps(command)
        def run(*, as_json: bool, **params: Any) -> None:
            data = command(**params)
            if as_json:
                print_json(data)
            else:
                render(data)

        run.__signature__ = signature.replace(parameters=parameters, return_annotation=None)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": None}
        del run.__wrapped__  # ``targeted`` and typer read the signature above
        return run

    return decorate


def email_param(raw: str) -> str:
    """An address from the command line, normalised like every other entry point; one that is
    no address is a usage error (exit 2)."""
    from shared.core.models import normalise_email

    try:
        return normalise_email(raw)
    except ValueError as exc:
        raise typer.BadParameter(f"email: {exc}") from None


def name_param(raw: str, what: str) -> str:
    """A name (sequence id, tag, ...) from the command line, checked like every other entry
    point; a bad one is a usage error (exit 2)."""
    from shared.core.models import validate_name

    try:
        return validate_name(raw, what)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


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
