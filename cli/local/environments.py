"""Lambda execution environments in child processes, for the functions SQS event sources invoke.

The Lambda service runs each concurrent invocation of a function in its own execution
environment: a separate process that imports the handler once (the cold start) and then
takes one invocation at a time. :class:`ExecutionEnvironment` is that, locally: a child
Python process (``python -m cli.local.environments``) that runs the same handler code
(:func:`cli.local.lambdas.run_handler`) with the function's environment variables and
talks to the emulated AWS over its HTTP endpoint, like any other AWS client.

Why: every Lambda, moto's server and the local SES otherwise share one interpreter, and on
a 2-core laptop that one core is the ceiling of a broadcast's send rate. With the busiest
functions (SQS-polled: broadcast workers, sender, engagement) in their own processes, the
emulator keeps one core and the handlers use the others.

Protocol: one JSON line per request on one pipe, one JSON line per reply on another; the
child's stdout and stderr are the runtime's (its logs appear where in-process logs do). A
child that exits or outlives the function's timeout makes the invocation fail like Lambda
does (the SQS batch comes back) and is replaced on the next invocation.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from cli.local.lambdas import LambdaContext, context_of, report, run_handler

_ROOT = Path(__file__).resolve().parents[2]  # the folder holding cli/, shared/, functions/
# A reply may come this much later than the function's timeout: a cold start imports the
# handler first (Lambda gives its init phase a separate allowance, too).
INIT_ALLOWANCE_S = 3


class EnvironmentLost(RuntimeError):
    """The child process exited or did not answer within the function's timeout."""


class ExecutionEnvironment:
    """One execution environment of ``function`` (a moto ``LambdaFunction``): one child
    process, started at the first invocation, one invocation at a time."""

    def __init__(self, function: Any) -> None:
        self.function = function
        self.cold_starts = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._requests: IO[bytes] | None = None
        self._replies: IO[bytes] | None = None
        self._lock = threading.Lock()

    def invoke(self, event: dict[str, Any]) -> tuple[Any, bool]:
        """Run one invocation: ``(payload, errored)``, like :func:`cli.local.lambdas.invoke`."""
        context = context_of(self.function)
        request = {
            "handler": self.function.handler,
            "env": dict(self.function.environment_vars or {}),
            "event": event,
            "context": {
                "function_name": context.function_name,
                "function_version": context.function_version,
                "invoked_function_arn": context.invoked_function_arn,
                "memory_limit_in_mb": context.memory_limit_in_mb,
                "timeout_s": context.timeout_s,
                "aws_request_id": context.aws_request_id,
            },
        }
        started = time.perf_counter()
        with self._lock:
            try:
                reply = self._call(request, timeout_s=context.timeout_s + INIT_ALLOWANCE_S)
                text, errored = str(reply["payload"]), bool(reply["errored"])
            except EnvironmentLost as exc:
                self._discard(kill=True)  # like Lambda: a timed-out environment is not reused
                text = json.dumps({"errorMessage": str(exc), "errorType": "Runtime.ExitError"})
                errored = True
        report(self.function, context, errored, time.perf_counter() - started)
        try:
            return json.loads(text), errored
        except json.JSONDecodeError:
            return text, errored

    def close(self) -> None:
        with self._lock:
            self._discard()

    # ----- the child ---------------------------------------------------------------------
    def _call(self, request: dict[str, Any], *, timeout_s: float) -> dict[str, Any]:
        if self._process is None or self._process.poll() is not None:
            self._start()
        assert self._requests is not None and self._replies is not None
        try:
            self._requests.write(json.dumps(request, default=str).encode() + b"\n")
            self._requests.flush()
        except (BrokenPipeError, OSError) as exc:
            raise EnvironmentLost(f"execution environment exited: {exc}") from exc
        ready, _, _ = select.select([self._replies], [], [], timeout_s)
        if not ready:
            raise EnvironmentLost(f"Task timed out after {timeout_s:.0f} seconds")
        line = self._replies.readline()
        if not line:
            raise EnvironmentLost("execution environment exited")
        return dict(json.loads(line))

    def _start(self) -> None:
        self._discard()
        request_read, request_write = os.pipe()
        reply_read, reply_write = os.pipe()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_ROOT), env.get("PYTHONPATH", "")) if p)
        try:
            self._process = subprocess.Popen(  # noqa: S603 - this interpreter, this module
                [sys.executable, "-m", "cli.local.environments", str(request_read), str(reply_write)],
                pass_fds=(request_read, reply_write),
                env=env,
                start_new_session=True,  # Ctrl-C stops the runtime, which closes the pipes
            )
        finally:
            os.close(request_read)
            os.close(reply_write)
        self._requests = os.fdopen(request_write, "wb")
        self._replies = os.fdopen(reply_read, "rb")
        self.cold_starts += 1

    def _discard(self, *, kill: bool = False) -> None:
        for stream in (self._requests, self._replies):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self._requests = self._replies = None
        process, self._process = self._process, None
        if process is not None:
            if kill:
                process.kill()
            try:
                process.wait(timeout=5)  # reads EOF and exits
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def serve(requests: IO[bytes], replies: IO[bytes]) -> None:
    """The child's loop: one request line in, one reply line out, until the pipe closes."""
    for line in requests:
        request = json.loads(line)
        context = LambdaContext(**request["context"])
        payload, errored = run_handler(request["handler"], request["env"], request["event"], context)
        replies.write(json.dumps({"payload": payload, "errored": errored}).encode() + b"\n")
        replies.flush()


def main(argv: list[str]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when this ends
    with os.fdopen(int(argv[0]), "rb") as requests, os.fdopen(int(argv[1]), "wb") as replies:
        serve(requests, replies)


if __name__ == "__main__":
    main(sys.argv[1:])
