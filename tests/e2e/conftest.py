"""One local runtime (``mailstep dev``, instant virtual clock) for the whole e2e session.

It runs in a subprocess: its emulated account and environment never mix with the
in-process moto of the integration tests. Like `mailstep dev`, it runs every function from
the deployment artifact (the synthesized template and its bundled code asset) on Python 3.12
with the template's IAM enforced. Tests talk to it like a user does: HTTP,
boto3 against the endpoint, and the CLI.
"""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from shared.core import specs
from tests.e2e import forks

ROOT = Path(__file__).resolve().parents[2]
Process = subprocess.Popen[str] | forks.Forked  # a `mailstep dev`: a fresh interpreter or forked
START_TIMEOUT_S = 60  # a 2-core machine running two workers (measured: 12 s alone)


def subprocess_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MOTO_"))}
    env.update({"PYTHONPATH": str(ROOT), "TZ": "UTC", "PYTHONUNBUFFERED": "1"})
    return env


def fresh() -> bool:
    """``MAILSTEP_E2E_FRESH=1``: every ``mailstep`` process a fresh interpreter, none forked
    (tests/e2e/forks.py)."""
    return os.environ.get("MAILSTEP_E2E_FRESH") == "1"


def start_dev(state_dir: Path, *extra: str, api_port: int = 0, fork: bool = True) -> Process:
    """``mailstep dev`` on free ports (the API on ``api_port`` when given), forked from this
    worker's runtime server unless ``fork`` is off; its output goes to ``<state_dir>/dev.log``."""
    state_dir.mkdir(parents=True, exist_ok=True)
    args = ["dev", "--port", "0", "--api-port", str(api_port), "--public-port", "0", "--speed", "0"]
    args += ["--state-dir", str(state_dir), *extra]
    with (state_dir / "dev.log").open("w") as log:
        if fork and not fresh():
            with open(os.devnull) as null:
                return forks.RUNTIMES.start(
                    args,
                    cwd=ROOT,
                    env=subprocess_env(),
                    stdin=null.fileno(),
                    stdout=log.fileno(),
                    stderr=log.fileno(),
                )
        return subprocess.Popen(
            [sys.executable, "-m", "cli.main", *args],
            cwd=ROOT,
            env=subprocess_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )


def wait_for_state(state_dir: Path, process: Process, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    path = state_dir / "runtime.json"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log = (state_dir / "dev.log").read_text()
            raise RuntimeError(f"mailstep dev exited with {process.returncode}: {log[-3000:]}")
        if path.exists():
            return dict(json.loads(path.read_text()))
        time.sleep(0.05)
    raise TimeoutError(f"mailstep dev did not start within {timeout_s} s")


def _from_state(key: str, kind: Callable[[Any], Any] = str) -> Any:
    """A read-only attribute: ``kind`` of the runtime.json value ``key``."""
    return property(lambda self: kind(self.state[key]))


@dataclass
class Local:
    state: dict[str, Any]
    state_dir: Path
    clients: dict[tuple[str, int], Any] = field(default_factory=dict, repr=False)

    api_url = _from_state("api_url")
    public_url = _from_state("public_url")  # the https front: the base of the links in mail
    api_key = _from_state("api_key")
    outbox = _from_state("outbox", Path)

    def ssl_context(self) -> ssl.SSLContext:
        """Verifying, and trusting only the runtime's self-signed certificate."""
        return ssl.create_default_context(cafile=self.state["tls_cert"])

    def client(self, service: str, retries: int = 3) -> Any:
        """A boto3 client against the runtime's endpoint, one per service and retry count
        (making a client costs more than most calls; clients are thread-safe)."""
        if (service, retries) not in self.clients:
            self.clients[service, retries] = boto3.client(
                service,
                endpoint_url=self.state["endpoint"],
                region_name=self.state["region"],
                aws_access_key_id="e2e",
                aws_secret_access_key="e2e",
                config=Config(retries={"mode": "standard", "total_max_attempts": retries}),
            )
        return self.clients[service, retries]

    def http(self, method: str, path: str, body: Any = None, key: str | None = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"content-type": "application/json"}
        if key is not None:
            headers["authorization"] = f"Bearer {key}"
        request = urllib.request.Request(self.api_url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def status(self) -> dict[str, Any]:
        code, answer = self.http("GET", "/_local/status")
        assert code == 200
        return dict(answer)

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return mailstep(*args, timeout=timeout)


def mailstep(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``mailstep <args>`` (in ``subprocess_env()``, or ``env``), its output captured as text: forked
    from this worker's command server (tests/e2e/forks.py), or a fresh interpreter."""
    env = subprocess_env() if env is None else env
    if not fresh():
        return forks.COMMANDS.run(list(args), cwd=ROOT, env=env, timeout=timeout)
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="session")
def artifact() -> Any:
    """The deployment artifact (synthesized template + bundled asset), built once here so that
    `mailstep dev` starts within its start timeout (the build is cached and shared by workers)."""
    from local_aws.artifact import build

    return build()


@contextmanager
def dev_runtime(
    state_dir: Path,
    *flags: str,
    report: tuple[pytest.TempPathFactory, str] | None = None,
    timeout_s: float = START_TIMEOUT_S,
) -> Iterator[Local]:
    """A `mailstep dev` of its own with ``flags``, stopped afterwards; with ``report`` (the
    session's temp factory and a name) its IAM report is kept for the grants check."""
    process = start_dev(state_dir, *flags)
    try:
        local = Local(state=wait_for_state(state_dir, process, timeout_s), state_dir=state_dir)
        yield local
        if report is not None:
            keep_iam_report(local, *report)
    finally:
        stop_dev(process)


@pytest.fixture(scope="session")
def local(tmp_path_factory: pytest.TempPathFactory, artifact: Any) -> Iterator[Local]:
    # The session's tests mail simulator addresses among many others: their running complaint
    # rate is the tests' artefact, so the reputation guardrail's alarms stay off here
    # (tests/e2e/test_reputation.py runs its own runtime with them on).
    with dev_runtime(
        tmp_path_factory.mktemp("mailstep-dev"),
        "--max-send-rate",
        "1000",
        "--no-reputation-alarms",
        report=(tmp_path_factory, "session"),
    ) as local:
        yield local


def keep_iam_report(local: Local, factory: pytest.TempPathFactory, name: str) -> None:
    """Leave the runtime's IAM report (the requests its functions made, the grants none used)
    for the grants check at the end of the suite (:func:`pytest_sessionfinish`): a runtime
    that exercises functions the session runtime does not (its own flags) keeps one too."""
    code, report = local.http("GET", "/_local/iam")
    if code == 200:
        folder = iam_reports(factory)
        folder.mkdir(parents=True, exist_ok=True)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        (folder / f"{name}-{worker}.json").write_text(json.dumps(report))


def post_events(state: dict[str, Any], body: Any, timeout: float = 60) -> Any:
    """POST ``body`` to ``/v1/events`` of the `mailstep dev` that ``state`` (runtime.json)
    describes, with its API key; the JSON answer (an HTTP error raises)."""
    request = urllib.request.Request(
        state["api_url"] + "/v1/events",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"authorization": f"Bearer {state['api_key']}", "content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return json.loads(answer.read())


def stop_dev(process: Process) -> None:
    """Ctrl-C, as a user stops it; killed if it does not end within 15 s."""
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


# ----- grants the e2e run never used -----------------------------------------------------------
GRANTS_CHECK = "MAILSTEP_GRANTS_CHECK"  # set by `make test`: the whole suite runs
# Grants the e2e run does not reach, each with the path that uses it and where it is tested.
# Every other grant of the template must be used by a recorded request, or the run fails.
NOT_REACHED_BY_E2E = {
    ("mailstep-broadcast-worker", "dynamodb:DeleteItem"): "a send claim released after SES refused a send; "
    "tests/integration/test_send_pipeline.py",
    (
        "mailstep-broadcast-worker",
        "dynamodb:PutItem",
    ): "a send_failed event in the events table (SES rejected); tests/integration/test_send_pipeline.py",
    ("mailstep-sender", "dynamodb:DeleteItem"): "a send claim released after SES refused a send; "
    "tests/integration/test_send_handler.py",
    ("mailstep-sender", "dynamodb:GetItem"): "the send claim read after a lost claim race (a job "
    "delivered again while or after it was sent; profiles are read with BatchGetItem); "
    "tests/integration/test_send_pipeline.py",
    ("mailstep-sequence-step", "dynamodb:PutItem"): "the fail step's sequence_failed event; "
    "tests/integration/test_sequence_execution.py",
    ("mailstep-sequence-step", "dynamodb:Query"): "if: {opened|clicked: template} reads the events table; "
    "tests/integration/test_sequence_execution.py",
    ("mailstep-sequence-step", "scheduler:UpdateSchedule"): "a retried callback Task (a new token) updates "
    "the schedule its first attempt created; tests/integration/test_sequence_step_engagement.py",
    (
        "mailstep-inbound",
        "dynamodb:ConditionCheckItem",
    ): "a reply that changes tags (ingest's pair transaction); tests/integration/test_engagement_replies.py",
    (
        "mailstep-inbound",
        "states:StartExecution",
    ): "a sequence with trigger: reply (none ships)",
    ("mailstep-inbound", "states:DescribeExecution"): "stopping an execution that already ended",
    ("mailstep-signup", "dynamodb:Query"): "a subscriber.confirmed start that finds an EXEC pair of the same "
    "sequence (re-entry, or a stale pair) lists the executions; tests/integration/test_sequence_execution.py",
    ("mailstep-signup", "states:DescribeExecution"): "the same re-entry path asks the found execution's "
    "status; tests/integration/test_sequence_execution.py",
    ("mailstep-webhook-dispatch", "dynamodb:GetItem"): "a stream record delivered again whose delivery "
    "exists (is its first attempt still to queue?); tests/integration/test_webhooks.py",
    ("mailstep-signup", "states:StopExecution"): "re-entry restart of a subscriber.confirmed sequence "
    "(none ships with reentry: restart); tests/integration/test_sequence_execution.py",
    ("mailstep-hygiene", "states:DescribeExecution"): "a subscriber.cold start that finds an EXEC pair of "
    "the same sequence (turned cold again while its re-engagement still runs) asks its status; "
    "tests/integration/test_sequence_execution.py",
}


# Grants only a failure uses: the Lambda service sends an on-failure record with the function's
# role (shared.core.specs.ON_FAILURE_ACTIONS on its failure queues). Function -> (failure queue,
# where the path is tested); the e2e run makes no stream batch or scheduled run fail for good.
FAILURE_ONLY = {
    f"{specs.APP_NAME}-{fn.name}": [
        (
            grant.resource.local_name,  # type: ignore[union-attr]
            "a stream batch skipped after its retries (tests/unit/test_local_streams.py: the on-failure "
            "record; tests/infra/test_failure_destinations.py: the destination)"
            if fn.stream_sources
            else "an asynchronous invocation that failed after Lambda's retries "
            "(tests/unit/test_local_eventbridge_failures.py; tests/infra/test_failure_destinations.py)",
        )
        for grant in specs.failure_grants(fn)
    ]
    for fn in specs.FUNCTIONS
    if specs.failure_grants(fn)
}


def failure_only(grant: tuple[str, str, str]) -> bool:
    """Whether a (function, action, resource) grant is one of ``FAILURE_ONLY``."""
    function, action, resource = grant
    return action in specs.ON_FAILURE_ACTIONS and any(
        resource.endswith(f":{queue}") for queue, _ in FAILURE_ONLY.get(function, [])
    )


def unused_grants(reports: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """The (function, action, resource) grants of the reports that no report used: each action
    on each resource of each Allow statement is one grant, used only by a request for that action
    on that resource (another action of the same statement, or of a CDK grant method's group,
    does not count). A grant is used when a report that holds it does not list it unused; a
    report that holds none (a runtime without functions) changes nothing."""
    key = ("function", "action", "resource")
    granted: set[tuple[str, ...]] = set()
    used: set[tuple[str, ...]] = set()
    for report in reports:
        held = {tuple(g[k] for k in key) for g in report.get("grants", report["unused_grants"])}
        granted |= held
        used |= held - {tuple(g[k] for k in key) for g in report["unused_grants"]}
    return {(f, a, r) for f, a, r in granted - used}


def iam_reports(factory: pytest.TempPathFactory) -> Path:
    """Where each session runtime leaves its IAM report (shared by the xdist workers)."""
    base = factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "iam-reports"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """With the whole suite run (``MAILSTEP_GRANTS_CHECK=1``): every grant of every function's
    role policy in the template was used by some request of the e2e run, and no request of a
    template function was denied. A grant nothing uses is broader than the code needs."""
    if os.environ.get("PYTEST_XDIST_WORKER") or not os.environ.get(GRANTS_CHECK):
        return
    folder = iam_reports(session.config._tmp_path_factory)  # type: ignore[attr-defined]
    reports = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.exists() else []
    if not reports:
        return
    unused = unused_grants(reports)
    template_functions = {g["function"] for r in reports for g in r["unused_grants"]} | {
        c["function"] for r in reports for c in r["calls"] if c["function"].startswith("mailstep-")
    }
    denied = {
        (c["function"], c["action"], c["resource"])
        for r in reports
        for c in r["calls"]
        if not c["allowed"] and c["function"] in template_functions
    }
    unused = {g for g in unused if (g[0], g[1]) not in NOT_REACHED_BY_E2E and not failure_only(g)}
    problems = [f"granted but never used by the e2e run: {g}" for g in sorted(unused)]
    problems += [f"denied during the e2e run: {d}" for d in sorted(denied)]
    if problems:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_sep("=", "IAM grants check failed", red=True)
            for problem in problems:
                reporter.write_line(problem)
