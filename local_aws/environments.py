"""Lambda execution environments: each function runs from its deployment artifact, in its own
Python 3.12 process, one invocation at a time, with its role policy enforced.

The Lambda service runs each concurrent invocation of a function in an execution
environment: a process that imports the handler once (the cold start, its init phase) and
then takes one invocation at a time; concurrent invocations get more environments, up to
the function's concurrency. Locally:

- :class:`ExecutionEnvironment` is one child process, ``python3.12 -I -S -u -B
  local_aws/bootstrap.py``, whose import path holds only the function's code asset and the
  boto3/botocore of the Lambda runtime (``local_aws.artifact``), whose environment variables
  are the template's (resolved to the local resources, ``local_aws.template``) plus the ones
  Lambda sets itself, and whose AWS requests are checked against the role policy of the
  template (``local_aws.bootstrap.Guard``);
- :class:`FunctionPool` hands an invocation to an idle environment or starts another one
  (up to the function's reserved concurrency, else :data:`DEFAULT_CONCURRENCY`);
- :class:`Environments` holds one pool per function and is what moto's Lambda invoke path
  calls (``local_aws.hooks``): API Gateway routes, SQS event sources and Step Functions
  tasks all land here.

Where the platform has ``os.pidfd_open`` (Linux), each environment is a fork of one
:class:`Preloader` per import path: a Python 3.12 process that has imported the libraries every
function imports at its cold start (boto3, botocore, pydantic, Powertools, Jinja2:
:data:`PRELOAD`), from the same asset, before any function's environment variables are set. The
fork then runs the init phase as a fresh process does: the function's environment, the guard,
the handler's import (the project's own modules, which read their settings when imported). The
cold start's CPU is Lambda's in AWS and the bench's own measure (``bench/coldstart.py`` starts
fresh interpreters); locally it is mostly the same imports over and over (docs/local-runtime.md).

A child's stdout and stderr go to ``<logs>/<function name>.log`` (its CloudWatch log group,
unbuffered, so a killed environment's last lines are kept). A child that exits, or does not
answer within the function timeout, fails that invocation (``Runtime.ExitError``; an SQS
batch comes back) and is replaced at the next one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

from local_aws.lambdas import context_of, report
from local_aws.ses_events import CALENDAR

BOOTSTRAP = Path(__file__).resolve().with_name("bootstrap.py")
DEFAULT_CONCURRENCY = 8
INIT_TIMEOUT_S = 30  # Lambda allows an init phase of 10 s; a loaded laptop needs more
STOP_GRACE_S = 1.0


# What a preloader imports before it forks environments: the asset's libraries that the functions
# import at their cold start (a module the asset lacks is left out). Nothing of the project's
# own code: its modules read the function's settings when they are imported.
PRELOAD = (
    "boto3",
    "botocore.client",
    "pydantic",
    "jinja2",
    "aws_lambda_powertools.logging",
    "aws_lambda_powertools.metrics",
    "aws_lambda_powertools.event_handler",
    "aws_lambda_powertools.utilities.batch",
    "aws_lambda_powertools.utilities.parser",
    "aws_lambda_powertools.utilities.idempotency",
    "aws_lambda_powertools.utilities.parameters",
)
# The variables Lambda sets alike for every function of a runtime, set in a preloader before its
# imports (Powertools' user agent reads AWS_EXECUTION_ENV when imported); the rest of a function's
# environment is set after the fork, in its init phase, as in a fresh process.
COMMON_VARIABLES = (
    "AWS_EXECUTION_ENV", "AWS_REGION", "AWS_DEFAULT_REGION",
    "LAMBDA_TASK_ROOT", "LAMBDA_RUNTIME_DIR", "TZ", "LANG",
)  # fmt: skip
CAN_FORK = hasattr(os, "pidfd_open") and hasattr(socket, "send_fds")


class EnvironmentLost(RuntimeError):
    """The child process exited or did not answer in time."""


@dataclass(frozen=True)
class EnvironmentSpec:
    """What every execution environment of one function is started with."""

    function_name: str
    handler: str
    python: Path
    import_path: list[str]
    environment: dict[str, str]  # the template's variables + what Lambda sets + the local endpoint
    policy: list[dict[str, Any]] | None  # role policy statements; None: not enforced
    role_arn: str
    region: str
    account: str
    timeout_s: int
    memory_mb: int
    log_file: Path
    max_environments: int = DEFAULT_CONCURRENCY
    meter: bool = False  # report every request with its parameters and answer (the bench)
    ses_sandbox: bool = False  # the account is in the SES sandbox (IAM: recipients' identities too)
    forked: bool = True  # forked from the preloader where the platform allows (else a fresh process)


class Process(Protocol):
    """What an environment needs of its process: a :class:`subprocess.Popen` or a fork."""

    pid: int

    def poll(self) -> int | None: ...

    def kill(self) -> None: ...

    def wait(self, timeout: float | None = None) -> int: ...


def bootstrap(
    python: Path,
    args: list[str],
    *,
    pass_fds: tuple[int, ...],
    log: IO[bytes],
    cwd: str,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """``python -I -S -u -B local_aws/bootstrap.py *args``: an environment or a preloader, in a
    session of its own (Ctrl-C stops the runtime, which ends them), logging to ``log``."""
    return subprocess.Popen(  # noqa: S603 - the Lambda interpreter, our bootstrap
        [str(python), "-I", "-S", "-u", "-B", str(BOOTSTRAP), *args],
        pass_fds=pass_fds,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", **(env or {})},
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        cwd=cwd,
        start_new_session=True,
    )


class Forked:
    """A process forked by a :class:`Preloader` (not this process's child): watched through a
    pidfd, which turns readable when the process ends. Its exit status is its parent's, so an
    ended fork reports -1."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._pidfd = os.pidfd_open(pid)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.wait(0) if self._ended(0) else None

    def _ended(self, timeout: float | None) -> bool:
        if self.returncode is not None:
            return True
        ready, _, _ = select.select([self._pidfd], [], [], timeout)
        return bool(ready)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not self._ended(timeout):
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0)
            os.close(self._pidfd)
            self.returncode = -1
        return self.returncode


class Preloader:
    """A Python 3.12 process with the asset's libraries imported (:data:`PRELOAD`) that forks
    execution environments (``bootstrap.preload``). Asked over a Unix socket: the environment's
    request and reply pipes and its log file go with the ask (``SCM_RIGHTS``), the fork's pid
    comes back. It ends when this side of the socket closes (the runtime ended)."""

    def __init__(self, python: Path, import_path: list[str], common: dict[str, str], log_file: Path) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with log_file.open("ab", buffering=0) as log, theirs:
            self._process = bootstrap(
                python,
                ["--preload", str(theirs.fileno()), json.dumps({"path": import_path, "modules": PRELOAD})],
                pass_fds=(theirs.fileno(),),
                log=log,
                cwd=import_path[0],
                env=common,
            )
        self._socket = ours
        self._replies = ours.makefile("rb")
        self._lock = threading.Lock()

    def fork(self, requests_fd: int, replies_fd: int, log_fd: int) -> Forked:
        """A new environment's process on these three descriptors (the caller closes its own)."""
        with self._lock:
            socket.send_fds(self._socket, [b"fork\n"], [requests_fd, replies_fd, log_fd])
            line = self._replies.readline()
        if not line.strip().isdigit():
            raise OSError(f"the preloader did not fork: {line[:200]!r}")
        return Forked(int(line))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._replies.close()
            self._socket.close()
        try:
            self._process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


_preloaders: dict[tuple[str, ...], Preloader] = {}
_preloaders_lock = threading.Lock()


def preloader(spec: EnvironmentSpec) -> Preloader:
    """The preloader of ``spec``'s interpreter, import path and common variables (one per runtime
    process; started at the first cold start that needs it)."""
    common = {k: spec.environment[k] for k in COMMON_VARIABLES if k in spec.environment}
    found = (str(spec.python), *spec.import_path, json.dumps(common, sort_keys=True))
    with _preloaders_lock:
        if found not in _preloaders:
            _preloaders[found] = Preloader(
                spec.python, spec.import_path, common, spec.log_file.with_name("_preloader.log")
            )
        return _preloaders[found]


def forget_preloader(spec: EnvironmentSpec, broken: Preloader) -> None:
    """Drop a preloader that failed to fork (the next cold start starts another)."""
    with _preloaders_lock:
        for found, known in list(_preloaders.items()):
            if known is broken:
                del _preloaders[found]
    broken.close()


def close_preloaders() -> None:
    with _preloaders_lock:
        preloaders = list(_preloaders.values())
        _preloaders.clear()
    for known in preloaders:
        known.close()


class ExecutionEnvironment:
    """One child process: started (and initialised) at its first invocation."""

    def __init__(self, spec: EnvironmentSpec) -> None:
        self.spec = spec
        self._process: Process | None = None
        self._requests: IO[bytes] | None = None
        self._replies: IO[bytes] | None = None

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def forked(self) -> bool:
        """Started as a fork of the preloader (not a fresh interpreter)."""
        return isinstance(self._process, Forked)

    def kill(self) -> int | None:
        """SIGKILL the child (a fault, as when Lambda's host dies mid-invocation): the
        invocation in progress fails like a crash. Returns the pid, or None if not running."""
        process = self._process
        if process is None or process.poll() is not None:
            return None
        process.kill()
        return process.pid

    def invoke(self, request: dict[str, Any]) -> dict[str, Any]:
        """One invocation: the bootstrap's reply (``payload``, ``errored``, ``calls``)."""
        if not self.alive:
            self._start()
        try:
            return self._call(request, timeout_s=self.spec.timeout_s)
        except EnvironmentLost:
            self.close(kill=True)  # like Lambda: a timed-out or crashed environment is not reused
            raise

    def _call(self, request: dict[str, Any], *, timeout_s: float) -> dict[str, Any]:
        assert self._requests is not None and self._replies is not None
        try:
            self._requests.write(json.dumps(request, default=str).encode() + b"\n")
            self._requests.flush()
        except (BrokenPipeError, OSError) as exc:
            raise EnvironmentLost(f"execution environment exited: {exc}") from exc
        ready, _, _ = select.select([self._replies], [], [], timeout_s)
        if not ready:
            raise EnvironmentLost(f"Task timed out after {timeout_s:.2f} seconds")
        line = self._replies.readline()
        if not line:
            raise EnvironmentLost("Runtime exited without providing a reason")
        return dict(json.loads(line))

    def _start(self) -> None:
        self.close()
        spec = self.spec
        request_read, request_write = os.pipe()
        reply_read, reply_write = os.pipe()
        spec.log_file.parent.mkdir(parents=True, exist_ok=True)
        log = spec.log_file.open("ab", buffering=0)
        try:
            self._process = self._fork(request_read, reply_write, log.fileno()) if spec.forked else None
            if self._process is None:
                self._process = bootstrap(
                    spec.python,
                    [str(request_read), str(reply_write)],
                    pass_fds=(request_read, reply_write),
                    log=log,
                    cwd=spec.import_path[0],
                )
        finally:
            os.close(request_read)
            os.close(reply_write)
            log.close()
        self._requests = os.fdopen(request_write, "wb")
        self._replies = os.fdopen(reply_read, "rb")
        init = {
            "type": "init",
            "path": spec.import_path,
            "env": spec.environment,
            "handler": spec.handler,
            "policy": spec.policy,
            "role_arn": spec.role_arn,
            "region": spec.region,
            "account": spec.account,
            "function_name": spec.function_name,
            "meter": spec.meter,
            "ses_sandbox": spec.ses_sandbox,
        }
        try:
            self._call(init, timeout_s=INIT_TIMEOUT_S)
        except EnvironmentLost:
            self.close(kill=True)
            raise

    def _fork(self, request_read: int, reply_write: int, log: int) -> Process | None:
        """A fork of the spec's preloader on these descriptors; None where there is none (no
        pidfd here, or the preloader failed: this environment starts as a fresh process)."""
        if not CAN_FORK:
            return None
        known = preloader(self.spec)
        try:
            return known.fork(request_read, reply_write, log)
        except OSError as exc:
            print(
                f"mailstep: the environment preloader failed ({exc}); starting a fresh process",
                file=sys.stderr,
            )
            forget_preloader(self.spec, known)
            return None

    def close(self, *, kill: bool = False) -> None:
        for stream in (self._requests, self._replies):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self._requests = self._replies = None
        process, self._process = self._process, None
        if process is None:
            return
        if kill:
            process.kill()
        try:
            process.wait(timeout=STOP_GRACE_S)  # reads EOF and exits
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass
class FunctionPool:
    """The execution environments of one function."""

    spec: EnvironmentSpec
    idle: list[ExecutionEnvironment] = field(default_factory=list)
    running: list[ExecutionEnvironment] = field(default_factory=list)  # in an invocation
    busy: int = 0
    started: int = 0  # cold starts
    closed: bool = False
    _condition: threading.Condition = field(default_factory=threading.Condition)

    def acquire(self) -> ExecutionEnvironment:
        with self._condition:
            while not self.idle and self.busy >= self.spec.max_environments and not self.closed:
                self._condition.wait(0.5)
            if self.closed:
                raise EnvironmentLost("the local runtime is stopping")
            self.busy += 1
            if self.idle:
                environment = self.idle.pop()
                self.running.append(environment)
                return environment
            self.started += 1
            environment = ExecutionEnvironment(self.spec)
            self.running.append(environment)
            return environment

    def release(self, environment: ExecutionEnvironment) -> None:
        with self._condition:
            self.busy -= 1
            if environment in self.running:
                self.running.remove(environment)
            if environment.alive and not self.closed:
                self.idle.append(environment)
            self._condition.notify()
        if self.closed:
            environment.close()

    def close(self) -> None:
        with self._condition:
            self.closed = True
            environments, self.idle = self.idle, []
            self._condition.notify_all()
        for environment in environments:
            environment.close()


@dataclass
class Environments:
    """Every function's pool; moto's Lambda invoke path calls :meth:`invoke`."""

    specs: dict[str, EnvironmentSpec]  # physical function name -> spec
    # The spec of a function that is not in ``specs`` (created through the Lambda API).
    other: Callable[[Any], EnvironmentSpec] | None = None
    # Told of every request a function sent: (service, operation, params, parsed answer).
    # Set it before the first invocation: environments report requests from their start.
    on_request: Callable[[str, str, dict[str, Any], dict[str, Any]], None] | None = None
    # The account is in the SES sandbox: every function's sends are authorized on the
    # recipients' identities too (mailstep dev --ses-sandbox).
    ses_sandbox: bool = False
    pools: dict[str, FunctionPool] = field(default_factory=dict)
    calls: Counter[tuple[str, str, str, bool]] = field(default_factory=Counter)
    # CPU seconds of each function's environments in its invocations (process time, all
    # threads; the init phase excluded), as the environments report them: the bench's
    # capacity model divides it by the mails sent.
    cpu_seconds: dict[str, float] = field(default_factory=dict)
    # The largest peak resident memory (KiB) any environment of each function reported after an
    # invocation (its process's peak, init phase included: ``bootstrap.peak_rss_kb``): the bench's scale tier.
    peak_rss_kb: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def pool(self, function: Any) -> FunctionPool:
        name = function.function_name
        with self._lock:
            if name not in self.pools:
                if name not in self.specs and self.other is not None:
                    self.specs[name] = self.other(function)
                spec = self.specs[name]
                if self.on_request is not None:
                    spec = dataclasses.replace(spec, meter=True)
                if self.ses_sandbox:
                    spec = dataclasses.replace(spec, ses_sandbox=True)
                self.pools[name] = FunctionPool(spec)
            return self.pools[name]

    def invoke(self, function: Any, event: Any) -> tuple[str, bool, str]:
        """Run ``function`` (a moto ``LambdaFunction``): ``(json_result, errored, logs)``."""
        if isinstance(event, str | bytes):
            event = json.loads(event or "{}")
        context = context_of(function)
        pool = self.pool(function)
        started = time.perf_counter()
        request = {
            "event": event,
            "context": {
                "function_name": context.function_name,
                "function_version": context.function_version,
                "invoked_function_arn": context.invoked_function_arn,
                "memory_limit_in_mb": context.memory_limit_in_mb,
                "timeout_s": context.timeout_s,
                "aws_request_id": context.aws_request_id,
            },
            # the runtime's calendar (`mailstep local advance`): "today" of per-day budgets
            "calendar_offset_s": CALENDAR["offset_s"],
        }
        try:
            environment = pool.acquire()
        except EnvironmentLost as exc:  # stopping: the invocation fails, its batch comes back
            return self._lost(exc), True, ""
        try:
            reply = environment.invoke(request)
            payload, errored = str(reply["payload"]), bool(reply["errored"])
            self._record(function.function_name, reply.get("calls") or [])
            with self._lock:
                name, cpu_s = function.function_name, float(reply.get("cpu_s") or 0.0)
                self.cpu_seconds[name] = self.cpu_seconds.get(name, 0.0) + cpu_s
                peak = int(reply.get("max_rss_kb") or 0)
                self.peak_rss_kb[name] = max(self.peak_rss_kb.get(name, 0), peak)
            if self.on_request is not None:
                for request_made in reply.get("metered") or []:
                    self.on_request(
                        request_made["service"],
                        request_made["operation"],
                        request_made["params"],
                        request_made["parsed"],
                    )
        except EnvironmentLost as exc:
            payload, errored = self._lost(exc), True
        finally:
            pool.release(environment)
        return payload, errored, report(function, context, errored, time.perf_counter() - started)

    @staticmethod
    def _lost(exc: EnvironmentLost) -> str:
        return json.dumps({"errorMessage": str(exc), "errorType": "Runtime.ExitError"})

    def _record(self, function_name: str, calls: list[dict[str, Any]]) -> None:
        with self._lock:
            for call in calls:
                self.calls[(function_name, call["action"], call["resource"], bool(call["allowed"]))] += 1

    def authorize_service(self, function_name: str, action: str, resource: str) -> bool:
        """A request the Lambda service makes with a function's execution role (an on-failure
        record sent to its destination): decided by the role's policy and recorded like the
        function's own requests. A function without an enforced policy is allowed."""
        from local_aws.bootstrap import RolePolicy

        with self._lock:
            spec = self.specs.get(function_name)
        allowed = spec is None or spec.policy is None or RolePolicy(spec.policy).decide(action, resource)
        self._record(function_name, [{"action": action, "resource": resource, "allowed": allowed}])
        return allowed

    def authorize_role(
        self, role_arn: str, policy: list[dict[str, Any]] | None, action: str, resource: str
    ) -> bool:
        """A request a service makes with a role of the template that is no function's (EventBridge
        Scheduler with the scheduler role): decided by the role's ``policy`` (its statements in the
        emulated IAM) and recorded under the role's name. A role without a policy is allowed."""
        from local_aws.bootstrap import RolePolicy

        allowed = policy is None or RolePolicy(policy).decide(action, resource)
        self._record(
            role_arn.rsplit("/", 1)[-1], [{"action": action, "resource": resource, "allowed": allowed}]
        )
        return allowed

    def recorded(self) -> list[dict[str, Any]]:
        """Every AWS request the functions made: function, IAM action, resource, allowed, count."""
        with self._lock:
            return [
                {"function": f, "action": a, "resource": r, "allowed": ok, "count": n}
                for (f, a, r, ok), n in sorted(self.calls.items())
            ]

    def grants(self, ignore: tuple[str, ...] = ()) -> list[dict[str, str]]:
        """Every (function, action, resource) an Allow of a function's role policy grants: each
        action of a statement on each of its resources is one grant (``ignore``: as below)."""
        from local_aws.bootstrap import as_list, matches

        with self._lock:
            specs = dict(self.specs)
        found = []
        for name, spec in sorted(specs.items()):
            for statement in spec.policy or []:
                if statement.get("Effect") != "Allow":
                    continue
                for action in as_list(statement.get("Action", [])):
                    if any(matches(pattern, action, case_sensitive=False) for pattern in ignore):
                        continue
                    for resource in as_list(statement.get("Resource", [])):
                        found.append({"function": name, "action": action, "resource": resource})
        return found

    def unused_grants(self, ignore: tuple[str, ...] = ()) -> list[dict[str, str]]:
        """Every grant (:meth:`grants`) that no recorded request used. ``ignore``: action patterns
        used by services on the function's behalf (log delivery, event source polling), never by
        its code."""
        from local_aws.bootstrap import RolePolicy

        with self._lock:
            used = [(f, a, r) for (f, a, r, ok), n in self.calls.items() if ok]
        unused = []
        for g in self.grants(ignore):
            grant = RolePolicy([{"Effect": "Allow", "Action": g["action"], "Resource": g["resource"]}])
            if not any(f == g["function"] and grant.decide(a, r) for f, a, r in used):
                unused.append(g)
        return unused

    def kill_one(self, function_name: str) -> int | None:
        """Kill one environment of ``function_name`` that is in an invocation (the oldest);
        its pid, or None when none is running."""
        with self._lock:
            pool = self.pools.get(function_name)
        if pool is None:
            return None
        with pool._condition:
            running = list(pool.running)
        for environment in running:
            pid = environment.kill()
            if pid is not None:
                return pid
        return None

    def stats(self) -> dict[str, dict[str, int]]:
        return {
            name: {"cold_starts": pool.started, "busy": pool.busy, "idle": len(pool.idle)}
            for name, pool in self.pools.items()
        }

    def close(self) -> None:
        with self._lock:
            pools = list(self.pools.values())
        threads = [threading.Thread(target=pool.close) for pool in pools]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
