"""The deploy recipe of README.md and docs/deploy.md works from a fresh shell: one whose first
``python`` on PATH is not the virtualenv's (here: one that only fails, or one without the
project's packages).

What broke was the command the CDK CLI runs to synthesize (cdk.json's ``"app"``, run by a shell
in the project folder), so these tests run exactly that: ``make synth`` (the app command the
Makefile also gives ``cdk bootstrap/diff/deploy`` through ``--app``), and cdk.json's ``"app"``
as a shell command. The CDK CLI itself (npx, from the network) is not run here; bundling is
skipped (no pip, no network), as in the other infra tests.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stacks.mailstep_stack import SKIP_BUNDLING

ROOT = Path(__file__).resolve().parents[2]
IDENTITY = {"mailstep:sesDomain": "example.com", "mailstep:fromAddress": "News <news@example.com>"}
# The same context as -c options, as the README shows them.
IDENTITY_ARGS = (
    "-c 'aws:cdk:bundling-stacks=[]' -c mailstep:sesDomain=example.com"
    " -c 'mailstep:fromAddress=News <news@example.com>'"
)
VENV = Path(sys.prefix)  # the virtualenv running the tests: the one the recipe must use

pytestmark = pytest.mark.skipif(
    os.name == "nt" or shutil.which("make") is None, reason="needs make and a POSIX shell"
)


def shell_env(tmp_path: Path, python_body: str) -> dict[str, str]:
    """The environment of a fresh shell whose ``python`` and ``python3`` run ``python_body``."""
    shims = tmp_path / "shims"
    shims.mkdir()
    for name in ("python", "python3"):
        shim = shims / name
        shim.write_text(f"#!/bin/sh\n{python_body}\n")
        shim.chmod(0o755)
    drop = (
        "CDK_CONTEXT_JSON",
        "CDK_OUTDIR",
        "VIRTUAL_ENV",
        "PYTHONPATH",
        "PYTHONHOME",
        "MAKEFLAGS",
        "MFLAGS",
    )
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PATH"] = f"{shims}{os.pathsep}{env.get('PATH', '')}"
    env["CDK_OUTDIR"] = str(tmp_path / "cdk.out")
    return env


def make(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    # VENV names this virtualenv (the documented override); -o: never rebuild it here
    command = ["make", "-s", "-o", f"{VENV}/.installed", f"VENV={VENV}", *args]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)  # noqa: S603


def ses_identities(outdir: Path) -> list[str]:
    template = json.loads((outdir / "Mailstep.template.json").read_text())
    return [
        r["Properties"]["EmailIdentity"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::SES::EmailIdentity"
    ]


def test_make_synth_uses_the_virtualenv_whatever_python_comes_first(tmp_path: Path) -> None:
    # Given a shell where `python` and `python3` only fail
    env = shell_env(tmp_path, 'echo "not the virtualenv python" >&2; exit 1')

    # When the documented command synthesizes with the sending identity on the command line
    result = make(env, "synth", f"ARGS={IDENTITY_ARGS}")

    # Then the virtualenv's interpreter ran the app, and the template has the identity
    assert result.returncode == 0, result.stderr[-3000:]
    assert "not the virtualenv python" not in result.stderr
    assert ses_identities(tmp_path / "cdk.out") == ["example.com"]


def test_cdk_json_app_reruns_itself_with_the_virtualenv(tmp_path: Path) -> None:
    # Given a shell whose `python` is a Python without the project's packages (no site-packages)
    env = shell_env(tmp_path, f'exec "{sys.executable}" -S "$@"')
    env["MAILSTEP_VENV"] = str(VENV)
    env["CDK_CONTEXT_JSON"] = json.dumps({**SKIP_BUNDLING, **IDENTITY})  # how the CDK CLI passes -c
    app = json.loads((ROOT / "cdk.json").read_text())["app"]

    # When the CDK CLI's app command runs as the CLI runs it: a shell command in the project folder
    result = subprocess.run(app, shell=True, cwd=ROOT, env=env, capture_output=True, text=True, check=False)  # noqa: S602 - cdk.json's own command

    # Then app.py ran itself again with the virtualenv's interpreter, which synthesized
    assert result.returncode == 0, result.stderr[-3000:]
    assert ses_identities(tmp_path / "cdk.out") == ["example.com"]


def test_without_a_virtualenv_the_app_says_what_to_run(tmp_path: Path) -> None:
    env = shell_env(tmp_path, f'exec "{sys.executable}" -S "$@"')
    env["MAILSTEP_VENV"] = str(tmp_path / "no-such-venv")
    app = json.loads((ROOT / "cdk.json").read_text())["app"]

    result = subprocess.run(app, shell=True, cwd=ROOT, env=env, capture_output=True, text=True, check=False)  # noqa: S602 - cdk.json's own command

    assert result.returncode == 1
    assert "make setup" in result.stderr and "make deploy" in result.stderr
    assert "Traceback" not in result.stderr


def test_make_synth_without_a_sending_identity_says_how_to_give_it(tmp_path: Path) -> None:
    # Given cdk.json as committed (no sesDomain, no fromAddress) and a shell whose python fails
    env = shell_env(tmp_path, "exit 1")

    result = make(env, "synth", "ARGS=-c 'aws:cdk:bundling-stacks=[]'")

    # Then it stops (non-zero, no traceback) naming the keys and the exact commands to give them
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "a deployment needs a sending identity" in result.stderr
    assert 'make synth ARGS="-c mailstep:sesDomain=' in result.stderr
    assert "make deploy" in result.stderr and "cdk.json" in result.stderr
    assert not (tmp_path / "cdk.out" / "Mailstep.template.json").exists()
