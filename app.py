#!/usr/bin/env python3
"""CDK entry point: writes the mailstep stack to cdk.out/.

Run it through the Makefile (``make synth``, ``make diff``, ``make deploy``: the virtualenv's
interpreter runs this file, whatever ``python`` is first on PATH), or through the CDK CLI, which
runs cdk.json's ``"app"``, ``python app.py``. When that ``python`` lacks the project's packages
(a fresh shell that did not activate the virtualenv), this file runs itself again with the
project's virtualenv interpreter (``$MAILSTEP_VENV``, else ``.venv``; ``bin/python``, or
``Scripts\\python.exe`` on Windows) and says how to fix it when there is none.

Context for one run, as the CDK CLI takes it: ``python app.py -c mailstep:sesDomain=example.com
-c 'mailstep:fromAddress=News <news@example.com>'`` (a value that is a JSON list or object is
read as JSON, e.g. ``-c 'aws:cdk:bundling-stacks=[]'``). Under the CDK CLI the context arrives
in ``CDK_CONTEXT_JSON`` instead.

Needs no AWS credentials: the stack is environment-agnostic. Bundling the Lambda code runs
pip (package index access); synthesize with ``-c 'aws:cdk:bundling-stacks=[]'`` to skip it.
An invalid configuration (the sending identity unset, a bad value) stops with a message that
names the key and how to set it, exit status 2, no traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
# Set in the environment of the virtualenv's run, so a broken virtualenv is not run again.
RERUN_MARK = "MAILSTEP_APP_RERUN"
CONFIG_EXIT = 2
HOW_TO_CONFIGURE = """\
Give the values for one run:
  make synth ARGS="-c mailstep:sesDomain=mail.example.com \\
                  -c 'mailstep:fromAddress=Acme <hello@mail.example.com>'"
  make deploy ARGS="..."        (the same -c options; make bootstrap and make diff take them too)
  cdk deploy -c mailstep:sesDomain=... -c 'mailstep:fromAddress=...'   (the CDK CLI itself)
or set them in cdk.json under "context" ("mailstep:sesDomain": "mail.example.com",
"mailstep:fromAddress": "Acme <hello@mail.example.com>"). Every key: docs/configuration.md;
the first deployment step by step: docs/deploy.md."""


def venv_python(root: Path = ROOT) -> Path:
    """The project's virtualenv interpreter (it may not exist)."""
    venv = Path(os.environ.get("MAILSTEP_VENV") or root / ".venv")
    if not venv.is_absolute():
        venv = root / venv
    windows = venv / "Scripts" / "python.exe"
    return windows if os.name == "nt" else venv / "bin" / "python"


def rerun_in_venv(missing: str) -> int:
    """Run this file again with the virtualenv's interpreter; its exit status."""
    python = venv_python()
    if os.environ.get(RERUN_MARK) or not python.exists():
        print(
            f"mailstep: {sys.executable} cannot import {missing!r}: the CDK app needs the project's "
            f"packages. Run `make setup`, then `make synth` / `make deploy` (they use {python}), "
            "or activate the virtualenv before running the CDK CLI; another virtualenv: "
            "MAILSTEP_VENV=/path/to/venv.",
            file=sys.stderr,
        )
        return 1
    env = {**os.environ, RERUN_MARK: "1"}
    return subprocess.run([str(python), str(Path(__file__).resolve()), *sys.argv[1:]], env=env).returncode  # noqa: S603 - the project's own interpreter and file


def context_from_args(args: list[str]) -> dict[str, Any]:
    """``-c KEY=VALUE`` / ``--context KEY=VALUE`` pairs, as the CDK CLI takes them."""
    context: dict[str, Any] = {}
    rest = list(args)
    while rest:
        flag = rest.pop(0)
        if flag in ("-c", "--context") and rest:
            pair = rest.pop(0)
        elif flag.startswith("--context="):
            pair = flag.removeprefix("--context=")
        else:
            raise SystemExit(f"mailstep: app.py takes only -c KEY=VALUE options, got {flag!r}")
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"mailstep: -c needs KEY=VALUE, got {pair!r}")
        context[key] = json.loads(value) if value[:1] in ("[", "{") else value
    return context


def main() -> int:
    try:
        from stacks.config import ConfigError
        from stacks.mailstep_stack import build_app
    except ModuleNotFoundError as exc:
        return rerun_in_venv(exc.name or str(exc))
    try:
        app, _ = build_app(context_from_args(sys.argv[1:]) or None)
    except ConfigError as exc:
        print(f"mailstep: {exc}\n\n{HOW_TO_CONFIGURE}", file=sys.stderr)
        return CONFIG_EXIT
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())
