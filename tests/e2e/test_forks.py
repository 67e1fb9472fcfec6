"""The e2e tier's forked ``mailstep`` calls (tests/e2e/forks.py) answer as fresh interpreters do:
the same output, errors and exit status, the call's own environment and folder, and a process
that can be stopped, killed or timed out like one."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import forks
from tests.e2e.conftest import ROOT, start_dev, subprocess_env, wait_for_state


def fresh(
    *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        cwd=cwd,
        env=env or subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def forked(
    *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return forks.COMMANDS.run(list(args), cwd=cwd, env=env or subprocess_env(), timeout=60)


def same(got: subprocess.CompletedProcess[str], expected: subprocess.CompletedProcess[str]) -> None:
    assert (got.returncode, got.stdout, got.stderr) == (expected.returncode, expected.stdout, expected.stderr)
    assert expected.stdout or expected.stderr  # the comparison compared something


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],  # the whole tree, exit 0
        ["webhooks", "list", "--help"],  # one command's help (the program's name included)
        ["no-such-command"],  # a usage error, exit 2
        ["broadcast", "send", "--template", "x", "--rate", "fast"],  # an unknown option, exit 2
        ["webhooks", "list", "--state-dir", "/nonexistent"],  # no runtime there: exit 1 and why
    ],
    ids=["help", "command help", "unknown command", "unknown option", "no runtime"],
)
def test_a_forked_call_answers_exactly_as_a_fresh_interpreter(args: list[str]) -> None:
    env = subprocess_env() | {"COLUMNS": "120"}
    same(forked(*args, env=env), fresh(*args, env=env))


def test_each_forked_call_has_its_own_environment_and_folder(tmp_path: Path) -> None:
    # rich lays out help and tables to the width the environment gives (a command module's
    # console reads it when the module is imported)
    for columns in ("60", "200"):
        env = subprocess_env() | {"COLUMNS": columns}
        for args in (["webhooks", "add", "--help"], ["sequences", "list"]):
            same(forked(*args, env=env), fresh(*args, env=env))
    # the default state folder is the working folder's .mailstep
    answer = forked("webhooks", "list", cwd=tmp_path)
    assert answer.returncode != 0 and str(tmp_path / ".mailstep") in answer.stderr
    same(answer, fresh("webhooks", "list", cwd=tmp_path))


def test_a_forked_runtime_stops_on_ctrl_c_and_a_killed_one_reports_the_signal(
    tmp_path: Path, artifact: Any
) -> None:
    # `mailstep dev` forked: Ctrl-C ends it with exit status 0, as a process of its own
    process = start_dev(tmp_path / "dev")
    wait_for_state(tmp_path / "dev", process, 60)
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=30) == 0
    # a killed one reports the signal, as subprocess does
    killed = start_dev(tmp_path / "killed")
    assert killed.poll() is None
    killed.kill()
    assert killed.wait(timeout=30) == -signal.SIGKILL


def test_a_forked_call_that_outlives_its_timeout_is_killed(tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        forks.COMMANDS.run(["dev", "--state-dir", str(tmp_path)], cwd=ROOT, env=subprocess_env(), timeout=1)
    assert time.monotonic() - started < 30


def test_a_shim_process_runs_the_forked_call_on_its_own_streams() -> None:
    # the command line a library starts as a process of its own (the MCP sessions' server)
    env = subprocess_env() | {"COLUMNS": "120"}
    command = forks.shim(["webhooks", "list", "--help"], cwd=ROOT, env=env)
    got = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    same(got, fresh("webhooks", "list", "--help", env=env))
    assert subprocess.run([*command[:-1], "no-such"], cwd=ROOT, env=env, capture_output=True).returncode == 2


def test_a_forked_call_ends_as_an_interpreter_does_without_its_teardown() -> None:
    """``forks._end``: the threads that are not daemons finish, the exit handlers run (the last
    registered first), what the streams still buffer is written, and the status is the call's."""
    program = """
import atexit, sys, threading, time
from tests.e2e import forks
atexit.register(lambda: sys.stdout.write("registered first, run last;"))
atexit.register(lambda: sys.stdout.write("registered last, run first;"))
threading.Thread(target=lambda: (time.sleep(0.2), sys.stdout.write("thread done;"))).start()
sys.stdout.write("buffered;")
forks._end(3)
"""
    ended = subprocess.run(
        [sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    assert ended.returncode == 3, ended.stderr
    assert ended.stdout == "buffered;thread done;registered last, run first;registered first, run last;"
