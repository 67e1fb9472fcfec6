"""The runtime interface of a local Lambda execution environment (standard library only).

The local runtime starts one process per execution environment:

    python3.12 -I -S -u -B local_aws/bootstrap.py <requests fd> <replies fd>

``-I -S`` keep the development virtualenv, ``PYTHONPATH`` and site-packages out: the first
request (``init``) names the import path, which holds only the function's code asset (what
``cdk deploy`` uploads) and the boto3/botocore that the Lambda Python runtime provides. The
process then imports the handler once (the cold start) and takes one invocation at a time,
like Lambda.

Every AWS request the handler makes is checked against the function's role policy (the
statements of the synthesized template, resolved to the local resources) before it is
sent: a request the policy does not allow fails with ``AccessDeniedException`` as it does
in AWS (:class:`RolePolicy`, :func:`authorize`). Each reply lists the requests made
(``calls``: IAM action, resource, allowed) so the runtime can record them.

The local runtime imports :class:`LambdaContext` from here (``local_aws.lambdas``): one
definition of the context on both sides.

It is the one module of ``cli/`` that writes ``os.environ``, and only in an execution
environment's own process: :func:`_init` gives that process the function's environment, as
Lambda does (the handler and the boto3 it imports read their settings and endpoint from there).
The runtime's process never writes its environment.
"""

from __future__ import annotations

import contextlib
import fnmatch
import importlib
import io
import json
import os
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlparse


@dataclass
class LambdaContext:
    """The attributes of the AWS Lambda context object that handlers use."""

    function_name: str
    function_version: str
    invoked_function_arn: str
    memory_limit_in_mb: int
    timeout_s: int
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    log_group_name: str = ""
    log_stream_name: str = ""
    _deadline: float = 0.0

    def __post_init__(self) -> None:
        self._deadline = time.monotonic() + self.timeout_s
        self.log_group_name = self.log_group_name or f"/aws/lambda/{self.function_name}"
        self.log_stream_name = self.log_stream_name or f"local/[{self.function_version}]{self.aws_request_id}"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def call_handler(handler: Any, event: Any, context: LambdaContext) -> tuple[str, bool]:
    """``(json_result, errored)``; an exception maps like AWS: ``{errorMessage, errorType,
    stackTrace}`` and the invocation is marked errored (``X-Amz-Function-Error``)."""
    try:
        return json.dumps(handler(event, context), default=str), False
    except Exception as exc:  # a function error, like the Lambda service reports it
        print(
            json.dumps({"level": "ERROR", "message": "function error", "errorType": type(exc).__name__}),
            file=sys.stderr,
        )
        return (
            json.dumps(
                {
                    "errorMessage": str(exc),
                    "errorType": type(exc).__name__,
                    "stackTrace": traceback.format_tb(exc.__traceback__),
                }
            ),
            True,
        )


# ----- IAM: identity-based policy evaluation -------------------------------------------------
def matches(pattern: str, value: str, *, case_sensitive: bool) -> bool:
    """IAM wildcards: ``*`` any run of characters, ``?`` one character."""
    if not case_sensitive:
        pattern, value = pattern.lower(), value.lower()
    return fnmatch.fnmatchcase(value, pattern.replace("[", "[[]"))


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


class RolePolicy:
    """The statements of a role's identity-based policies (resolved to strings).

    Evaluated as IAM does for one account: an explicit Deny wins, then an Allow, otherwise
    the implicit deny. A statement with a ``Condition`` applies only when every condition
    can be evaluated and holds (the request context knows ``aws:SecureTransport``,
    ``aws:RequestedRegion`` and ``aws:SourceAccount``-free keys only), so an Allow that the
    local runtime cannot prove never grants.
    """

    def __init__(self, statements: list[dict[str, Any]], context: dict[str, str] | None = None) -> None:
        self.statements = statements
        self.context = context or {}

    def _applies(
        self, statement: dict[str, Any], action: str, resource: str, context: dict[str, str]
    ) -> bool:
        if "Action" in statement:
            if not any(matches(a, action, case_sensitive=False) for a in as_list(statement["Action"])):
                return False
        elif any(matches(a, action, case_sensitive=False) for a in as_list(statement.get("NotAction", []))):
            return False
        if "Resource" in statement:
            if not any(matches(r, resource, case_sensitive=True) for r in as_list(statement["Resource"])):
                return False
        elif any(
            matches(r, resource, case_sensitive=True) for r in as_list(statement.get("NotResource", []))
        ):
            return False
        return self._conditions_hold(statement.get("Condition") or {}, context)

    @staticmethod
    def _conditions_hold(conditions: dict[str, Any], context: dict[str, str]) -> bool:
        for operator, tests in conditions.items():
            for key, expected in tests.items():
                actual = context.get(key.lower())
                if actual is None:
                    return False
                wanted = [str(v) for v in as_list(expected)]
                if operator in ("StringEquals", "ArnEquals", "Bool"):
                    ok = (
                        actual in wanted
                        if operator != "Bool"
                        else actual.lower() in [w.lower() for w in wanted]
                    )
                elif operator in ("StringLike", "ArnLike"):
                    ok = any(matches(w, actual, case_sensitive=True) for w in wanted)
                elif operator == "StringNotEquals":
                    ok = actual not in wanted
                else:
                    return False  # an operator the local runtime does not evaluate never holds
                if not ok:
                    return False
        return True

    def decide(self, action: str, resource: str, request: dict[str, str] | None = None) -> bool:
        """``request``: the request's own condition keys (lower case), e.g. ``ses:fromaddress``."""
        context = {**self.context, **(request or {})}
        applying = [s for s in self.statements if self._applies(s, action, resource, context)]
        if any(s.get("Effect") == "Deny" for s in applying):
            return False
        return any(s.get("Effect") == "Allow" for s in applying)


# ----- IAM: what a request is (action + resources) ---------------------------------------------
_TRANSACT_ACTIONS = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
    "Get": "GetItem",
}
_SQS_BATCH = {
    "SendMessageBatch": "SendMessage",
    "DeleteMessageBatch": "DeleteMessage",
    "ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
}


def requests_for(
    prefix: str,
    operation: str,
    params: dict[str, Any],
    region: str,
    account: str,  # with region, builds the resource ARNs
    *,
    ses_sandbox: bool = False,
) -> list[tuple[str, str]]:
    """The (IAM action, resource ARN) pairs AWS authorizes for one API request (``ses_sandbox``:
    the account is in the SES sandbox). A resource may be ``a|b``: either one allowed suffices.

    ``prefix`` is the service's IAM prefix (botocore's signing name: ``dynamodb``, ``sqs``,
    ``sns``, ``states``, ``secretsmanager``, ``ses`` for SES v1 and v2, ``s3``). Requests
    whose resource this function does not know are checked against ``*``.
    """
    arn = f"arn:aws:{prefix}:{region}:{account}"
    if prefix == "dynamodb":

        def table(name: str, index: str | None = None) -> str:
            return f"{arn}:table/{name}" + (f"/index/{index}" if index else "")

        if operation in ("TransactWriteItems", "TransactGetItems"):
            found = []
            for item in params.get("TransactItems", []):
                ((kind, body),) = item.items()
                found.append((f"dynamodb:{_TRANSACT_ACTIONS[kind]}", table(body["TableName"])))
            return found
        if operation in ("BatchGetItem", "BatchWriteItem"):
            return [(f"dynamodb:{operation}", table(name)) for name in params.get("RequestItems", {})]
        if "TableName" in params:
            return [(f"dynamodb:{operation}", table(params["TableName"], params.get("IndexName")))]
    elif prefix == "sqs" and "QueueUrl" in params:
        name = urlparse(params["QueueUrl"]).path.rstrip("/").rsplit("/", 1)[-1]
        return [(f"sqs:{_SQS_BATCH.get(operation, operation)}", f"{arn}:{name}")]
    elif prefix == "sns":
        topic = params.get("TopicArn") or params.get("TargetArn")
        if topic:
            return [(f"sns:{operation}", str(topic))]
    elif prefix in ("states", "scheduler"):
        found = _workflow_request(prefix, operation, params, arn)
        if found:
            return found
    elif prefix == "secretsmanager" and "SecretId" in params:
        secret = str(params["SecretId"])
        return [
            (f"secretsmanager:{operation}", secret if secret.startswith("arn:") else f"{arn}:secret:{secret}")
        ]
    elif prefix == "ses" and (operation in ("SendEmail", "SendRawEmail") or "ConfigurationSetName" in params):
        return _ses_request(operation, params, arn, sandbox=ses_sandbox)
    elif prefix == "s3" and "Bucket" in params:
        key = params.get("Key")
        resource = f"arn:aws:s3:::{params['Bucket']}" + (f"/{unquote(str(key))}" if key else "")
        return [(f"s3:{operation}", resource)]
    return [(f"{prefix}:{operation}", "*")]


def _workflow_request(prefix: str, operation: str, params: dict[str, Any], arn: str) -> list[tuple[str, str]]:
    """Step Functions: the state machine or execution the request names. EventBridge Scheduler: a
    schedule is authorized on ``schedule/<group>/<name>`` (Service Authorization Reference, Amazon
    EventBridge Scheduler); creating or updating one passes its target's role, which IAM checks as
    ``iam:PassRole`` on that role (EventBridge Scheduler User Guide, execution role)."""
    if prefix == "states":
        resource = params.get("stateMachineArn") or params.get("executionArn")
        return [(f"states:{operation}", str(resource))] if resource else []
    if "Name" not in params:
        return []
    group = params.get("GroupName") or "default"
    found = [(f"scheduler:{operation}", f"{arn}:schedule/{group}/{params['Name']}")]
    role = (params.get("Target") or {}).get("RoleArn")
    if role and operation in ("CreateSchedule", "UpdateSchedule"):
        found.append(("iam:PassRole", str(role)))
    return found


# SES authorizes a send by the content it carries, not by the operation's name: a v2 SendEmail
# with raw content is checked as ses:SendRawEmail (AWS CDK's EmailIdentity.grantSendEmail grants
# both actions; SDK users report "not authorized to perform ses:SendRawEmail" for raw v2 sends).
# Whether AWS also checks ses:SendEmail for it is not documented: the local runtime requires both
# (the stricter reading), so a policy that passes here passes in AWS either way.
def _ses_actions(operation: str, params: dict[str, Any]) -> tuple[str, ...]:
    if operation == "SendRawEmail":  # SES v1
        return ("ses:SendRawEmail",)
    if "Raw" in (params.get("Content") or {}):  # SES v2 SendEmail with raw content
        return ("ses:SendRawEmail", "ses:SendEmail")
    return ("ses:SendEmail",)


def ses_from_address(params: dict[str, Any]) -> str:
    """The address SES authorizes a send for (``ses:FromAddress``): ``FromEmailAddress`` (v2) or
    ``Source`` (v1), else the raw message's From header."""
    sender = str(params.get("FromEmailAddress") or params.get("Source") or "")
    if not sender:
        raw = (params.get("Content") or {}).get("Raw", {}).get("Data") or (
            params.get("RawMessage") or {}
        ).get("Data")
        if isinstance(raw, str):
            raw = raw.encode()
        if isinstance(raw, bytes):
            from email.parser import BytesHeaderParser

            sender = str(BytesHeaderParser().parsebytes(raw).get("From") or "")
    from email.utils import parseaddr

    return parseaddr(sender)[1]


def ses_recipients(params: dict[str, Any]) -> list[str]:
    """Every recipient of a send: v2 ``Destination`` (To, Cc, Bcc) or v1 ``Destinations``."""
    destination = params.get("Destination") or {}
    found = [
        str(a) for key in ("ToAddresses", "CcAddresses", "BccAddresses") for a in destination.get(key, [])
    ]
    found += [str(a) for a in params.get("Destinations", [])]
    from email.utils import parseaddr

    return [parseaddr(a)[1] for a in found]


def _identity(arn: str, address: str) -> str:
    """Either identity may be the verified one: the address, or (usually) its domain."""
    return f"{arn}:identity/{address.rsplit('@', 1)[-1]}|{arn}:identity/{address}"


def _ses_request(operation: str, params: dict[str, Any], arn: str, *, sandbox: bool) -> list[tuple[str, str]]:
    if operation in ("SendEmail", "SendRawEmail"):
        return _ses_send(operation, params, arn, sandbox=sandbox)
    # Configuration set operations (e.g. PutConfigurationSetSendingOptions) are authorized on the
    # set: Service Authorization Reference, Amazon SES v2, resource type configuration-set.
    return [(f"ses:{operation}", f"{arn}:configuration-set/{params['ConfigurationSetName']}")]


def _ses_send(operation: str, params: dict[str, Any], arn: str, *, sandbox: bool) -> list[tuple[str, str]]:
    """SES authorizes a send on the sending identity and on the configuration set it names and,
    while the account is in the SES sandbox, on every recipient's identity too."""
    resources = [_identity(arn, ses_from_address(params))]
    configuration_set = params.get("ConfigurationSetName")
    if configuration_set:
        resources.append(f"{arn}:configuration-set/{configuration_set}")
    if sandbox:
        resources += [_identity(arn, r) for r in dict.fromkeys(ses_recipients(params))]
    return [(action, r) for action in _ses_actions(operation, params) for r in resources]


def request_context(prefix: str, operation: str, params: dict[str, Any]) -> dict[str, str]:
    """The condition keys of one request (lower case, as IAM compares them): ``ses:FromAddress``
    of a send."""
    if prefix == "ses" and operation in ("SendEmail", "SendRawEmail"):
        return {"ses:fromaddress": ses_from_address(params)}
    return {}


@dataclass
class Guard:
    """Checks each request of this process against the role policy; records what it saw."""

    policy: RolePolicy
    region: str
    account: str
    role_arn: str
    function_name: str
    calls: list[dict[str, Any]] = field(default_factory=list)
    # With ``meter``: every request that was sent, with its parameters and parsed answer
    # (the bench computes DynamoDB capacity from them).
    meter: bool = False
    metered: list[dict[str, Any]] = field(default_factory=list)
    # The account is in the SES sandbox (mailstep dev --ses-sandbox): sends are authorized on
    # each recipient's identity too.
    ses_sandbox: bool = False
    # CPU seconds this guard spent on its own work (the policy decisions, the meter) since the
    # invocation began: work of the emulation that Lambda does not run nor bill, taken out of
    # the invocation's ``cpu_s`` (each thread's own CPU time, so threads never count each other).
    overhead_s: float = 0.0
    _overhead_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @contextmanager
    def own_work(self) -> Iterator[None]:
        """Count the CPU time of this thread inside as the guard's (:meth:`take_overhead`)."""
        started = time.thread_time()
        try:
            yield
        finally:
            spent = time.thread_time() - started
            with self._overhead_lock:
                self.overhead_s += spent

    def take_overhead(self) -> float:
        """The guard's CPU seconds since the last call, and start counting again."""
        with self._overhead_lock:
            spent, self.overhead_s = self.overhead_s, 0.0
        return spent

    def authorize(self, prefix: str, operation: str, params: dict[str, Any]) -> tuple[str, str] | None:
        """The first (action, resource) the policy denies, else None; every pair is recorded."""
        denied = None
        context = request_context(prefix, operation, params)
        pairs = requests_for(
            prefix, operation, params, self.region, self.account, ses_sandbox=self.ses_sandbox
        )
        for action, resources in pairs:
            allowed = any(self.policy.decide(action, r, context) for r in resources.split("|"))
            self.calls.append({"action": action, "resource": resources.split("|")[0], "allowed": allowed})
            if not allowed and denied is None:
                denied = (action, resources.split("|")[0])
        return denied

    def record(self, client: Any, operation: str, params: dict[str, Any], parsed: dict[str, Any]) -> None:
        """With ``meter``: remember a request that was sent (answered or refused)."""
        if self.meter:
            service = client.meta.service_model.service_name
            self.metered.append(
                {"service": service, "operation": operation, "params": params, "parsed": parsed}
            )

    def install(self) -> None:
        """Wrap botocore's request path (every client, whoever created it)."""
        from botocore.client import BaseClient
        from botocore.exceptions import ClientError

        # _make_api_call is botocore's private request path (not in botocore-stubs): every
        # client's every operation passes through it, which is what the guard needs.
        original = BaseClient._make_api_call  # type: ignore[attr-defined]
        guard = self

        def _make_api_call(client: Any, operation_name: str, api_params: dict[str, Any]) -> Any:
            with guard.own_work():
                denied = guard.authorize(client.meta.service_model.signing_name, operation_name, api_params)
            if denied is not None:
                action, resource = denied
                role = guard.role_arn.rsplit("/", 1)[-1]
                message = (
                    f"User: arn:aws:sts::{guard.account}:assumed-role/{role}/{guard.function_name} is not "
                    f"authorized to perform: {action} on resource: {resource} because no identity-based "
                    f"policy allows the {action} action"
                )
                raise ClientError(
                    {
                        "Error": {"Code": "AccessDeniedException", "Message": message},
                        "ResponseMetadata": {
                            "RequestId": "",
                            "HostId": "",
                            "HTTPStatusCode": 400,
                            "HTTPHeaders": {},
                            "RetryAttempts": 0,
                        },
                    },
                    operation_name,
                )
            try:
                parsed = original(client, operation_name, api_params)
            except ClientError as exc:  # a refused request is sent, and billed, all the same
                with guard.own_work():
                    guard.record(client, operation_name, api_params, dict(exc.response))
                raise
            with guard.own_work():
                guard.record(client, operation_name, api_params, parsed)
            return parsed

        BaseClient._make_api_call = _make_api_call  # type: ignore[attr-defined]


# ----- the process ---------------------------------------------------------------------------
def _init(request: dict[str, Any]) -> tuple[Any, Guard | None]:
    path = [str(p) for p in request["path"]]
    if sys.path[: len(path)] != path:  # a fork of the preloader has it already (:func:`preload`)
        sys.path[:0] = path
    os.environ.clear()
    os.environ.update({k: str(v) for k, v in request["env"].items()})
    if hasattr(time, "tzset"):
        time.tzset()
    guard = None
    if request.get("policy") is not None:
        guard = Guard(
            policy=RolePolicy(request["policy"]),
            region=request["region"],
            account=request["account"],
            role_arn=request["role_arn"],
            function_name=request["function_name"],
            meter=bool(request.get("meter")),
            ses_sandbox=bool(request.get("ses_sandbox")),
        )
        guard.install()
    module_name, _, attribute = str(request["handler"]).rpartition(".")
    return getattr(importlib.import_module(module_name), attribute), guard


def peak_rss_kb() -> int:
    """The most memory this process has held resident so far, in KiB, its init phase included
    (the bench): Linux's ``VmHWM`` of this program, else ``ru_maxrss`` (0 where neither is
    known). Not ``ru_maxrss`` on Linux: it survives ``execve``, so a child started from a large
    runtime process would report the runtime's peak."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])  # "VmHWM:   123456 kB"
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource
    except ImportError:  # not on POSIX
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak // 1024 if sys.platform == "darwin" else peak)  # bytes on macOS


def _set_calendar(offset_s: float) -> None:
    """The runtime's calendar for this invocation (``shared.core.clock.calendar_now``: the day a
    per-day budget counts in); the functions' other clocks stay the wall clock."""
    if offset_s or "shared.core.clock" in sys.modules:
        module: Any = importlib.import_module("shared.core.clock")
        module.CALENDAR_OFFSET_S = offset_s


def serve(requests: Any, replies: Any) -> None:
    """One JSON line in, one JSON line out. The first line is ``init``; an import error is
    reported on every invocation (Lambda's ``Runtime.ImportModuleError``)."""
    handler: Any = None
    guard: Guard | None = None
    init_error: dict[str, Any] | None = None
    for line in requests:
        request = json.loads(line)
        if request.get("type") == "init":
            try:
                handler, guard = _init(request)
            except Exception as exc:  # reported like Lambda: Runtime.ImportModuleError
                traceback.print_exc()
                init_error = {
                    "errorMessage": f"Unable to import module '{request['handler']}': {exc}",
                    "errorType": "Runtime.ImportModuleError",
                    "stackTrace": traceback.format_tb(exc.__traceback__),
                }
            reply: dict[str, Any] = {"init": init_error is None, "error": init_error}
        elif init_error is not None:
            reply = {"payload": json.dumps(init_error), "errored": True, "calls": []}
        else:
            context = LambdaContext(**request["context"])
            _set_calendar(float(request.get("calendar_offset_s") or 0.0))
            if guard:
                guard.take_overhead()
            cpu_started = time.process_time()
            payload, errored = call_handler(handler, request["event"], context)
            reply = {"payload": payload, "errored": errored, "calls": guard.calls if guard else []}
            # The process's CPU time (all its threads) spent in this invocation (the bench),
            # without the guard's own (the emulated IAM and the meter are not Lambda's work).
            emulation_s = guard.take_overhead() if guard else 0.0
            reply["cpu_s"] = max(0.0, time.process_time() - cpu_started - emulation_s)
            reply["max_rss_kb"] = peak_rss_kb()
            if guard:
                if guard.meter:
                    reply["metered"] = guard.metered
                guard.calls, guard.metered = [], []
        replies.write(json.dumps(reply, default=str).encode() + b"\n")
        replies.flush()


class WholeLines(io.TextIOBase):
    """stdout/stderr of an execution environment. Every environment of a function appends to
    the function's one log file (``O_APPEND``); a ``print`` writes its text and its newline
    separately, so two environments' lines could interleave. This writer holds text until a
    newline and hands each run of complete lines to the file in one ``write`` (appended whole),
    as CloudWatch keeps each log event whole. Thread-safe (handlers may log from threads)."""

    encoding = "utf-8"

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd
        self._pending = ""
        self._lock = threading.Lock()

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def write(self, text: str) -> int:
        with self._lock:
            self._pending += text
            if "\n" in self._pending:
                complete, _, self._pending = self._pending.rpartition("\n")
                os.write(self._fd, (complete + "\n").encode("utf-8", "replace"))
        return len(text)

    def flush(self) -> None:
        with self._lock:
            if self._pending:
                os.write(self._fd, self._pending.encode("utf-8", "replace"))
                self._pending = ""


def preload(channel_fd: int, setup: dict[str, Any]) -> None:
    """The preloader (``local_aws.environments.Preloader``): ``setup`` names the import path and
    the modules to import; then each ``fork`` message on the channel brings an environment's
    request pipe, reply pipe and log file, and is answered with the pid of a fork that serves
    them (:func:`serve`, as a fresh process does). Ends when the runtime closes the channel."""
    import signal
    import socket

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the forks (the runtime watches pidfds)
    channel = socket.socket(fileno=channel_fd)
    sys.path[:0] = [str(p) for p in setup.get("path", [])]
    for name in setup.get("modules", []):
        # a module not in this asset: the functions import it themselves, or never
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    # botocore's data files, parsed once into the process's loader (shared.core.aws, which reads
    # no setting when imported): each fork's clients are then made without parsing them again.
    with contextlib.suppress(ImportError):
        from shared.core.aws import parse_models

        parse_models(region=os.environ.get("AWS_REGION", "us-east-1"))
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(channel, 64, 3)
        except OSError:
            return
        if not message or len(fds) != 3:
            return
        pid = os.fork()
        if pid == 0:  # the environment: the runtime's end of the channel is not its business
            status = 0
            try:
                channel.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # a handler's subprocess waits as usual
                os.setsid()
                requests_fd, replies_fd, log_fd = fds
                os.dup2(log_fd, 1)
                os.dup2(log_fd, 2)
                os.close(log_fd)
                main([str(requests_fd), str(replies_fd)])
            except BaseException:
                traceback.print_exc()
                status = 1
            finally:
                os._exit(status)
        for fd in fds:
            os.close(fd)
        channel.sendall(f"{pid}\n".encode())


def main(argv: list[str]) -> None:
    import signal

    if argv[0] == "--preload":
        preload(int(argv[1]), json.loads(argv[2]))
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the runtime decides when this ends
    sys.stdout, sys.stderr = WholeLines(1), WholeLines(2)
    with os.fdopen(int(argv[0]), "rb") as requests, os.fdopen(int(argv[1]), "wb") as replies:
        serve(requests, replies)


if __name__ == "__main__":
    main(sys.argv[1:])
