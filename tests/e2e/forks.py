"""The e2e tier's ``mailstep`` processes, each forked from a process that has already imported
what the command line uses.

A ``mailstep`` call spends most of its CPU importing (boto3, pydantic, typer, the command's
module: about 0.4 of 0.5 s), and a ``mailstep dev`` start spends about half of its own importing
moto and the local runtime. The e2e tier starts hundreds of calls and about twenty runtimes on
two cores. Here one server process per test worker imports every module of the packages the
commands use (and, for ``mailstep dev``, the local runtime and moto) once, and each call is a
fork of it that runs ``python -m cli.main`` (:func:`runpy.run_module`, as the interpreter does)
with the call's arguments, environment, working folder and standard streams. The command
modules themselves (``cli.*``) are imported by each call, in its own environment, as in a fresh
process: they make objects that read the environment when made (rich's consoles read COLUMNS).
What runs after the fork is the code a fresh process runs; only the imports are shared, and
``tests/e2e/test_forks.py`` compares forked calls with fresh ones. A call ends as the interpreter
ends a process (threads, exit handlers, the streams flushed) but skips the teardown of its objects,
which in a fork costs more CPU than the command (:func:`_end`). A fresh interpreter's start
is still tested where it is the point: ``tests/unit/test_cli_main.py`` (what a call imports),
``mailstep demo`` and the timed start of ``mailstep dev`` (``tests/e2e/test_local_runtime.py``)
run real processes.

Protocol (a Unix socket, one connection per call): the caller sends its request (JSON) with
three file descriptors (stdin, stdout, stderr); the server forks; the child sends its pid, runs
the command and, as the last thing before its interpreter ends, its exit status. A child that
is killed sends no status: its caller reads the end of the connection as "killed" and, like
:mod:`subprocess`, reports a negative return code.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import pkgutil
import runpy
import select
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

STREAMS = 3  # stdin, stdout, stderr
KILLED = -signal.SIGKILL


# What a server imports before it forks: every module of the command line's packages (what any
# command imports, at its start or on its way); for ``mailstep dev`` also the local runtime and the
# moto services it serves. moto's import registers a botocore handler (off until a mock starts),
# which a command's own process never has: commands get a server of their own. A module not
# imported here is imported by the call, as in a fresh process.
PACKAGES = ("cli", "ops", "shared", "console", "mcp_server")
MOTO_SERVICES = (
    "apigateway", "awslambda", "cloudformation", "cloudwatch", "dynamodb", "dynamodbstreams", "events",
    "iam", "kms", "logs", "s3", "scheduler", "secretsmanager", "ses", "sesv2", "sns", "sqs", "ssm",
    "stepfunctions", "sts",
)  # fmt: skip
RUNTIME_MODULES = (
    "local_aws.runtime",
    "moto.moto_server.werkzeug_app",
    "moto.stepfunctions.parser.models",
    *(f"moto.{service}.{part}" for service in MOTO_SERVICES for part in ("models", "responses")),
)


# ----- the server (``python -m tests.e2e.forks <kind> <socket path>``) --------------------------
def _preload(kind: str) -> None:
    import cli.main

    cli.main.build()
    for package in PACKAGES:
        for module in pkgutil.walk_packages(importlib.import_module(package).__path__, f"{package}."):
            importlib.import_module(module.name)
    if kind == "cli":
        assert "moto" not in sys.modules, "a command module imports moto"
    for name in RUNTIME_MODULES if kind == "dev" else ():
        importlib.import_module(name)
    # botocore's data files, parsed into the process's loader: a call's clients are made without
    # parsing them (shared.core.aws; most of a call's CPU after its imports).
    from shared.core.aws import parse_models

    parse_models()
    # The command modules themselves are imported again by each call, in its environment: they
    # make objects that read it when made (rich's consoles read COLUMNS), and cost little.
    for name in [name for name in sys.modules if name.startswith("cli.")]:
        del sys.modules[name]


def _serve(path: str) -> tuple[socket.socket, dict[str, Any], list[int]]:
    """Accept calls until one's child returns here (the parent never returns)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    listener.settimeout(1.0)
    print("ready", flush=True)
    while True:
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:  # reap the children that ended
                pass
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            if os.getppid() == 1:  # the test worker ended without stopping us
                os._exit(0)
            continue
        conn.settimeout(None)
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, STREAMS)
        if os.fork() == 0:
            listener.close()
            return conn, json.loads(message), fds
        conn.close()
        for fd in fds:
            os.close(fd)


def _child(conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
    """Become ``python -m cli.main <args>`` in the request's folder, environment and streams."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    conn.sendall(json.dumps({"pid": os.getpid()}).encode() + b"\n")
    status = {"code": 1}
    # Registered first, so it runs last: after the command's own exit handlers and threads.
    atexit.register(lambda: conn.sendall(json.dumps(status).encode() + b"\n"))
    sys.argv = ["-m", *request["args"]]
    try:
        runpy.run_module("cli.main", run_name="__main__", alter_sys=True)
        status["code"] = 0
    except SystemExit as exc:
        status["code"] = _exit_code(exc.code)
    except BaseException:
        traceback.print_exc()
        status["code"] = 1
    _end(status["code"])


def _end(code: int) -> None:
    """End as the interpreter ends a process, without its teardown: wait for the threads that
    are not daemons, run the exit handlers (the status is sent last), flush the standard streams,
    exit. The teardown (every module's objects released one by one) is what a fork must not do:
    it writes to each object's reference count, so the kernel copies every page the fork shares
    with its server; in a ``mailstep`` call that was about 0.6 s of CPU, four fifths of the call."""
    threading._shutdown()  # type: ignore[attr-defined]  # what the interpreter runs first at its end
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _exit_code(code: Any) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # as the interpreter does with sys.exit("message")
    return 1


# ----- the caller's side ------------------------------------------------------------------------
class Forked:
    """A forked ``mailstep`` process, with the part of :class:`subprocess.Popen` tests use."""

    def __init__(self, args: list[str], conn: socket.socket) -> None:
        self.args = args
        self._conn = conn
        self._lines = conn.makefile("rb")
        self.pid = int(json.loads(self._lines.readline())["pid"])
        self.returncode: int | None = None
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        if self.returncode is None:
            ready, _, _ = select.select([self._conn], [], [], 0)
            if ready:
                self._finish()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            ready, _, _ = select.select([self._conn], [], [], timeout)
            if not ready:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self._finish()
        assert self.returncode is not None
        return self.returncode

    def _finish(self) -> None:
        with self._lock:
            if self.returncode is None:
                line = self._lines.readline()
                self.returncode = int(json.loads(line)["code"]) if line else KILLED
                self._lines.read()  # the end of the connection: the process has exited
                self._lines.close()
                self._conn.close()

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Server:
    """This test worker's fork server of one kind (``cli`` or ``dev``), started at its first call."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._process: subprocess.Popen[bytes] | None = None
        self._path = ""
        self._lock = threading.Lock()

    def path(self, cwd: Path, env: dict[str, str]) -> str:
        """The server's socket (started now in ``cwd`` and ``env`` if it is not running)."""
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._path = os.path.join(tempfile.mkdtemp(prefix="mailstep-forks-"), "socket")
                self._process = subprocess.Popen(
                    [sys.executable, "-m", "tests.e2e.forks", self.kind, self._path],
                    cwd=cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                )
                assert self._process.stdout is not None
                ready = self._process.stdout.readline()
                if ready.strip() != b"ready":
                    raise RuntimeError(f"the fork server did not start (exit {self._process.wait()})")
                atexit.register(self.stop)
            return self._path

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def start(
        self, args: list[str], *, cwd: Path, env: dict[str, str], stdin: int, stdout: int, stderr: int
    ) -> Forked:
        """``python -m cli.main <args>`` forked, its streams on the given descriptors."""
        path = self.path(cwd, env)
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(path)
        request = {"args": args, "cwd": str(cwd), "env": env}
        socket.send_fds(conn, [json.dumps(request).encode()], [stdin, stdout, stderr])
        return Forked(args, conn)

    def run(
        self, args: list[str], *, cwd: Path, env: dict[str, str], timeout: float
    ) -> subprocess.CompletedProcess[str]:
        """Like ``subprocess.run(..., capture_output=True, text=True, timeout=timeout)`` with no input."""
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            process = self.start(args, cwd=cwd, env=env, stdin=null, stdout=out_write, stderr=err_write)
        finally:
            for fd in (out_write, err_write, null):
                os.close(fd)
        chunks: dict[int, list[bytes]] = {out_read: [], err_read: []}
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            for fd in chunks:
                selector.register(fd, selectors.EVENT_READ)
            try:
                while selector.get_map():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        process.kill()
                        process.wait()
                        raise subprocess.TimeoutExpired(args, timeout)
                    for key, _ in selector.select(left):
                        data = os.read(key.fd, 65536)
                        if data:
                            chunks[key.fd].append(data)
                        else:
                            selector.unregister(key.fd)
            finally:
                for fd in chunks:
                    os.close(fd)
        code = process.wait(max(0.0, deadline - time.monotonic()) + 5)
        # decoded with universal newlines, as subprocess's text mode does
        out, err = (
            b"".join(chunks[fd]).decode(errors="replace").replace("\r\n", "\n").replace("\r", "\n")
            for fd in (out_read, err_read)
        )
        return subprocess.CompletedProcess(args, code, out, err)


def shim(args: list[str], *, cwd: Path, env: dict[str, str]) -> list[str]:
    """A command line that runs ``mailstep <args>`` forked, for a library that starts the process
    itself (the MCP client): a small interpreter (no site-packages, standard library only) hands
    its own streams, folder and environment to the command server and exits with the call's
    status; a SIGTERM or Ctrl-C it gets goes on to the call."""
    return [sys.executable, "-S", __file__, "shim", COMMANDS.path(cwd, env), *args]


def _shim(path: str, args: list[str]) -> None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    request = {"args": args, "cwd": os.getcwd(), "env": dict(os.environ)}
    socket.send_fds(conn, [json.dumps(request).encode()], list(range(STREAMS)))
    process = Forked(args, conn)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda number, _: process.send_signal(number))
    code = process.wait()
    raise SystemExit(code if code >= 0 else 128 - code)


COMMANDS = Server("cli")  # `mailstep <command>` calls
RUNTIMES = Server("dev")  # `mailstep dev` starts


if __name__ == "__main__":
    if sys.argv[1] == "shim":
        _shim(sys.argv[2], sys.argv[3:])
    _preload(sys.argv[1])
    _child(*_serve(sys.argv[2]))
