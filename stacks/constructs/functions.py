"""Functions: one Lambda per ``shared.core.specs.FUNCTIONS`` entry, built by ``_python_function()``.

All functions share ONE code asset: the folders in ``LAMBDA_SOURCE_DIRS`` and the root files in
``LAMBDA_SOURCE_FILES`` plus the runtime
dependencies (``[project].dependencies`` of pyproject.toml and what they need, at the versions
of ``requirements.lock``, less what the Lambda runtime provides), installed for the Lambda
platform by pip on the synthesizing machine (no Docker), then pruned of files nothing runs
(``ASSET_EXCLUDES``), and every module compiled to bytecode by the runtime's Python
(:func:`compile_bytecode`), so a cold start does not compile them. Offline synthesis skips
bundling with the context ``{"aws:cdk:bundling-stacks": []}``.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import (
    Acknowledgment,
    ArnFormat,
    BundlingOptions,
    DockerImage,
    Duration,
    ILocalBundling,
    RemovalPolicy,
    Stack,
    Token,
    Validations,
)
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct
from packaging.markers import Marker
from packaging.requirements import Requirement

from shared.core import specs
from stacks.config import MailstepConfig
from stacks.constructs.resources import Resources
from stacks.constructs.sending import Sending

PROJECT_ROOT = Path(__file__).resolve().parents[2]
PIP_PLATFORM = "manylinux2014_x86_64"  # matches lambda_.Architecture.X86_64
PYTHON_VERSION = specs.LAMBDA_RUNTIME.removeprefix("python")
RUNTIME = lambda_.Runtime(specs.LAMBDA_RUNTIME, lambda_.RuntimeFamily.PYTHON, supports_inline_code=True)
METRICS_NAMESPACE = "Mailstep"
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", ".*")
# Every package of the project at an exact version (`make lock`); the asset installs from it.
LOCK_FILE = "requirements.lock"
# The Lambda Python runtime provides these (and what they need): never bundled.
RUNTIME_PROVIDED = frozenset({"boto3", "botocore"})
# The environment markers of the execution environment (x86_64 Linux, CPython 3.12).
LAMBDA_MARKERS = {
    "python_version": PYTHON_VERSION,
    "python_full_version": f"{PYTHON_VERSION}.0",
    "implementation_name": "cpython",
    "implementation_version": f"{PYTHON_VERSION}.0",
    "platform_python_implementation": "CPython",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
}
# Installed files that nothing in the functions runs, removed from the asset after pip (glob
# patterns from the asset root), each with why it is unused. Every pattern must match something
# (a package that changed its layout fails the bundling; review the entry then), and
# tests/infra/test_bundling.py fails if the sources start using what an entry removes.
ASSET_EXCLUDES: tuple[tuple[str, str], ...] = (
    (
        "yaml/_yaml.*.so",
        "PyYAML's optional libyaml binding (2.6 MB): mailstep parses YAML only with the pure-Python "
        "SafeLoader (yaml.safe_load, yaml.compose(..., Loader=yaml.SafeLoader)); without the binding "
        "yaml imports as usual with yaml.__with_libyaml__ = False",
    ),
    ("_yaml", "the top-level `_yaml` shim of that binding"),
    (
        "aws_lambda_powertools/event_handler/openapi/swagger_ui/swagger-ui*.min.*",
        "the Swagger UI bundle (1.7 MB), read only by Powertools' enable_swagger(), which mailstep "
        "never calls",
    ),
    ("pydantic/mypy.py", "pydantic's mypy plugin: only mypy imports it"),
    ("pydantic/v1/mypy.py", "the same plugin for pydantic.v1 models"),
    ("bin", "console scripts (markdown_py, jp.py) pointing at the build machine's Python: Lambda runs none"),
    (
        "*.dist-info/RECORD",
        "the installer's list of files, for uninstalling: nothing reads it at run time "
        "(METADATA, which importlib.metadata reads, stays)",
    ),
    ("**/*.pyi", "type stubs: only type checkers read them"),
)
# The asset ships its modules compiled, in the usual __pycache__/<module>.cpython-312.pyc layout:
# /var/task is read-only, so a module without its .pyc is compiled again at every cold start (the
# API handler's import took twice the CPU). "unchecked-hash" (PEP 552; Python docs, compileall
# --invalidation-mode and importlib "Cached bytecode invalidation"): a default .pyc records its
# source's mtime and size and is recompiled when they differ, and the asset's zip dates every
# file 1980-01-01 (cdk-assets' zipDirectory, for a reproducible archive), so every such .pyc
# would be stale on Lambda; a hash-based .pyc holds a hash of its source instead, and an
# unchecked one is loaded without reading the source, which is right for an asset whose sources
# and bytecode are built together and never change after. The paths in the bytecode are those
# of the task root (/var/task), not of the build folder, and the hash seed is fixed: the same
# sources give the same bytes.
BYTECODE_OPTIONS = ("-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "unchecked-hash")
TASK_ROOT = "/var/task"
_PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;]+)\s*(?:;\s*(?P<marker>.+))?$")
_VIA = re.compile(r"^\s+#\s+(?:via\s+|\s+)(?P<parent>[A-Za-z0-9][A-Za-z0-9._-]*)")


def canonical(name: str) -> str:
    """A package name as the index compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Locked:
    """One entry of the lock: an exact version, its marker, and the packages that need it."""

    name: str
    version: str
    marker: str | None
    via: frozenset[str]

    def applies_to_lambda(self) -> bool:
        return self.marker is None or Marker(self.marker).evaluate(LAMBDA_MARKERS)


def read_lock(path: Path) -> list[Locked]:
    """The entries of a ``uv pip compile`` lock (``name==version ; marker`` and ``# via`` lines)."""
    entries: list[Locked] = []
    for line in path.read_text().splitlines():
        pin = _PIN.match(line)
        via = _VIA.match(line)
        if pin:
            entries.append(Locked(canonical(pin["name"]), pin["version"], pin["marker"], frozenset()))
        elif via and entries:
            entries[-1] = replace(entries[-1], via=entries[-1].via | {canonical(via["parent"])})
    return entries


def _runtime_dependencies(root: Path) -> list[Requirement]:
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    return [Requirement(text) for text in project["dependencies"]]


def lambda_requirements(root: Path = PROJECT_ROOT) -> tuple[str, ...]:
    """The pins the asset installs: ``[project].dependencies`` and everything they need, as the
    lock has them for the Lambda platform, less what the Lambda runtime provides (sorted)."""
    lock = [e for e in read_lock(root / LOCK_FILE) if e.applies_to_lambda()]
    versions = {e.name: e.version for e in lock}
    wanted: set[str] = set()
    for requirement in _runtime_dependencies(root):
        name = canonical(requirement.name)
        if name not in versions or not requirement.specifier.contains(versions[name], prereleases=True):
            raise ValueError(
                f"{LOCK_FILE} has no {requirement} (it has {name}=={versions.get(name)}): run `make lock`"
            )
        if name not in RUNTIME_PROVIDED:
            wanted.add(name)
    grew = True
    while grew:  # the closure along the lock's "via" edges, never through the runtime's packages
        needed = {e.name for e in lock if e.via & wanted and e.name not in RUNTIME_PROVIDED}
        grew = not needed <= wanted
        wanted |= needed
    return tuple(sorted(f"{name}=={versions[name]}" for name in wanted))


def unmet_requirements(site: Path, root: Path = PROJECT_ROOT) -> list[str]:
    """What the packages installed in ``site`` need (from ``[project].dependencies`` down, with
    the extras asked for, markers evaluated for the Lambda platform) and do not find there or
    in the Lambda runtime."""
    installed = {canonical(d.metadata["Name"]): d for d in metadata.distributions(path=[str(site)])}
    asked: dict[str, set[str]] = {}  # package -> extras already followed ("" = its plain requirements)
    unmet: set[str] = set()
    pending: list[tuple[str, Requirement]] = [("pyproject.toml", r) for r in _runtime_dependencies(root)]
    while pending:
        needed_by, requirement = pending.pop()
        name = canonical(requirement.name)
        if name in RUNTIME_PROVIDED:
            continue
        dist = installed.get(name)
        if dist is None or not requirement.specifier.contains(dist.version, prereleases=True):
            unmet.add(f"{needed_by} needs {requirement}, found {dist.version if dist else 'nothing'}")
            continue
        new = ({""} | set(requirement.extras)) - asked.setdefault(name, set())
        asked[name] |= new
        for text in dist.requires or [] if new else []:
            dep = Requirement(text)
            if dep.marker is None or any(dep.marker.evaluate({**LAMBDA_MARKERS, "extra": e}) for e in new):
                pending.append((f"{name}=={dist.version}", dep))
    return sorted(unmet)


def _source_files(root: Path) -> list[Path]:
    files = []
    for folder in specs.LAMBDA_SOURCE_DIRS:
        for path in sorted((root / folder).rglob("*")):
            relative = path.relative_to(root)
            if path.is_file() and not any(p == "__pycache__" or p.startswith(".") for p in relative.parts):
                files.append(path)
    files += [root / name for name in specs.LAMBDA_SOURCE_FILES if (root / name).is_file()]
    return files


def source_hash(root: Path = PROJECT_ROOT) -> str:
    """Fingerprint of everything that goes into the code asset (sources, the pins it installs,
    platform, exclusions, how it is compiled): a change of the lock's runtime entries changes it,
    a dev tool's does not."""
    digest = hashlib.sha256()
    excludes = [pattern for pattern, _ in ASSET_EXCLUDES]
    build = (
        *lambda_requirements(root),
        PIP_PLATFORM,
        PYTHON_VERSION,
        *excludes,
        *BYTECODE_OPTIONS,
        TASK_ROOT,
    )
    digest.update("\n".join(build).encode())
    for path in _source_files(root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def prune(out: Path) -> list[Path]:
    """Remove ``ASSET_EXCLUDES`` from an installed asset; every pattern must match something."""
    removed: list[Path] = []
    for pattern, _reason in ASSET_EXCLUDES:
        matches = sorted(out.glob(pattern))
        if not matches:
            raise RuntimeError(
                f"the asset exclusion {pattern!r} matched nothing in {out}: a package changed its "
                "layout; review ASSET_EXCLUDES in stacks/constructs/functions.py"
            )
        for path in matches:
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():  # a match inside a folder removed before
                path.unlink()
        removed += matches
    return removed


def lambda_python() -> Path:
    """Python 3.12, the Lambda runtime's version (bytecode is specific to one minor version):
    ``MAILSTEP_LAMBDA_PYTHON``, this interpreter, ``python3.12`` on PATH, or pyenv's; the same
    search as the local runtime's (``local_aws.artifact.lambda_python``)."""
    candidates = [os.environ.get("MAILSTEP_LAMBDA_PYTHON", ""), sys.executable]
    candidates.append(shutil.which(f"python{PYTHON_VERSION}") or "")
    pyenv_root = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    candidates += sorted(
        glob.glob(f"{pyenv_root}/versions/{PYTHON_VERSION}.*/bin/python{PYTHON_VERSION}"), reverse=True
    )
    for candidate in filter(None, candidates):
        probe = subprocess.run(  # noqa: S603 - an interpreter path we found
            [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if probe.returncode == 0 and probe.stdout.strip() == PYTHON_VERSION:
            return Path(candidate)
    raise RuntimeError(
        f"Python {PYTHON_VERSION} (the Lambda runtime {specs.LAMBDA_RUNTIME}) is needed to compile the "
        f"asset's bytecode and was not found: `make setup` installs it with pyenv, or point "
        "MAILSTEP_LAMBDA_PYTHON at one"
    )


def compile_bytecode(out: Path, python: Path) -> None:
    """Compile every module of the asset ``out`` with ``python`` (see ``BYTECODE_OPTIONS``)."""
    command = [str(python), *BYTECODE_OPTIONS, "-s", str(out), "-p", TASK_ROOT, str(out)]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)  # noqa: S603
    if result.returncode != 0:
        raise RuntimeError(
            f"compiling the asset's bytecode failed:\n{(result.stdout + result.stderr).strip()}"
        )


@jsii.implements(ILocalBundling)
class PipBundling:
    """Installs the pinned runtime dependencies with pip for the Lambda platform (``--no-deps``:
    the lock already names every package), checks nothing they need is missing, prunes what
    nothing runs, copies the sources, then compiles the whole asset to bytecode with ``python``
    (default: :func:`lambda_python`)."""

    def __init__(self, root: Path = PROJECT_ROOT, python: Path | None = None) -> None:
        self.root = root
        self.python = python

    def try_bundle(self, output_dir: str, _options: Any = None) -> bool:
        out = Path(output_dir)
        command = [
            sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
            "--no-deps", "--platform", PIP_PLATFORM, "--implementation", "cp",
            "--python-version", PYTHON_VERSION, "--only-binary=:all:", "--target", str(out),
            *lambda_requirements(self.root),
        ]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603
        if result.returncode != 0:
            raise RuntimeError(f"bundling the Lambda dependencies failed:\n{result.stderr.strip()}")
        unmet = unmet_requirements(out, self.root)
        if unmet:
            missing = "\n".join(unmet)
            raise RuntimeError(f"the Lambda dependencies of {LOCK_FILE} are incomplete:\n{missing}")
        prune(out)
        for folder in specs.LAMBDA_SOURCE_DIRS:
            if (self.root / folder).is_dir():
                shutil.copytree(self.root / folder, out / folder, ignore=_SKIP, dirs_exist_ok=True)
        for name in specs.LAMBDA_SOURCE_FILES:
            if (self.root / name).is_file():
                shutil.copy2(self.root / name, out / name)
        compile_bytecode(out, self.python or lambda_python())
        return True


def lambda_code(root: Path = PROJECT_ROOT) -> lambda_.Code:
    """The one code asset shared by every function (uploaded once per change)."""
    return lambda_.Code.from_asset(
        str(root),
        asset_hash=source_hash(root),
        bundling=BundlingOptions(
            # Only used if local bundling declined; PipBundling never declines, it fails loudly.
            image=DockerImage.from_registry("public.ecr.aws/sam/build-" + specs.LAMBDA_RUNTIME),
            local=PipBundling(root),
        ),
    )


def _pascal(name: str) -> str:
    return "".join(part.capitalize() for part in name.replace("_", "-").split("-"))


def function_environment(
    spec: specs.FunctionSpec, settings: dict[str, str], config: MailstepConfig
) -> dict[str, str]:
    """The environment a function needs: only the settings its spec names, plus Powertools.

    ``settings`` holds every value the deployment knows (settings field -> value or token).
    A function receives the names of the tables, secrets, queues and topics it is granted,
    the state machine ARN prefix when it starts or stops sequences, and its optional
    settings that have a value. Mail settings without a deployment value keep their
    defaults from ``shared.core.settings``.
    """
    fields = [
        *(t.setting for t in spec.read_write_tables),
        *(s.setting for s in spec.read_secrets),
        *(q.setting for q in spec.send_queues),
        *(t.setting for t in spec.publish_topics),
    ]
    if spec.controls_sequences:
        fields.append("state_machine_arn_prefix")
    if spec.resumes_sequences:
        fields += ["sequence_schedule_group", "sequence_scheduler_role_arn"]
    if spec.mail_settings:
        fields += [f for f in specs.MAIL_SETTINGS if f in settings and f not in fields]
    fields += [f for f in spec.optional_settings if settings.get(f) and f not in fields]
    missing = [f for f in fields if f not in specs.ENV or f not in settings]
    if missing:
        raise ValueError(f"function {spec.name!r}: settings {missing} have no variable in ENV or no value")
    env = {
        "POWERTOOLS_SERVICE_NAME": specs.APP_NAME,
        "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
        "POWERTOOLS_LOG_LEVEL": config.log_level,
        specs.ENV["data_ttl_days"]: str(config.data_ttl_days),
        **{specs.ENV[f]: settings[f] for f in fields},
    }
    clash = sorted(set(env) & set(spec.extra_env))
    if clash:
        raise ValueError(f"function {spec.name!r}: extra_env must not override {clash}")
    return env | spec.extra_env


def _check_event_sources(spec: specs.FunctionSpec) -> None:
    factor = specs.VISIBILITY_TIMEOUT_FACTOR
    for source in spec.event_sources:
        if source.queue.visibility_timeout_s < factor * spec.timeout_s:
            raise ValueError(
                f"queue {source.queue.id!r}: visibility timeout {source.queue.visibility_timeout_s}s is "
                f"less than {factor}x the timeout of function {spec.name!r} ({spec.timeout_s}s); AWS "
                f"recommends at least {factor}x for SQS event sources (set it to "
                f"{factor * spec.timeout_s}s or more in shared/core/specs.py)"
            )


# Lambda's own retries of a failed asynchronous invocation (the default is 2, within 6 hours):
# stated, so that the template says what happens before an invocation reaches its failure queue.
ASYNC_RETRY_ATTEMPTS = 2
ASYNC_MAX_EVENT_AGE = Duration.hours(6)


@jsii.implements(lambda_.IEventSourceDlq)
class _OnFailureQueue:
    """A stream source's on-failure destination (``DestinationConfig.OnFailure``) that grants
    nothing itself: CDK's ``SqsDlq`` would also grant sqs:GetQueueAttributes and
    sqs:GetQueueUrl, which Lambda does not use; the role's sqs:SendMessage comes from the spec
    (``ON_FAILURE_ACTIONS``, bound by ``Functions.grant``) like every other grant."""

    def __init__(self, queue: sqs.IQueue) -> None:
        self.queue = queue

    def bind(self, _target: Any, _target_handler: Any) -> lambda_.DlqDestinationConfig:
        return lambda_.DlqDestinationConfig(destination=self.queue.queue_arn)


@jsii.implements(lambda_.IDestination)
class _AsyncFailureQueue:
    """A function's on-failure destination for asynchronous invocations
    (``AWS::Lambda::EventInvokeConfig``), granting nothing itself for the same reason."""

    def __init__(self, queue: sqs.IQueue) -> None:
        self.queue = queue

    def bind(self, _scope: Any, _fn: Any, *, type: Any = None) -> lambda_.DestinationConfig:  # noqa: A002
        return lambda_.DestinationConfig(destination=self.queue.queue_arn)


def _python_function(
    scope: Construct,
    spec: specs.FunctionSpec,
    *,
    code: lambda_.Code,
    resources: Resources,
    settings: dict[str, str],
    config: MailstepConfig,
) -> lambda_.Function:
    """One Lambda with its own role, log group and event sources (grants: ``Functions.grant``)."""
    _check_event_sources(spec)
    base = _pascal(spec.name)
    log_group = logs.LogGroup(
        scope, f"{base}Logs", retention=config.log_retention, removal_policy=RemovalPolicy.DESTROY
    )
    # An explicit role without AWSLambdaBasicExecutionRole: logs go to this function's group only.
    role = iam.Role(
        scope,
        f"{base}Role",
        assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
        description=f"mailstep {spec.name} function",
    )
    log_group.grant_write(role)
    fn = lambda_.Function(
        scope,
        f"{base}Function",
        description=f"mailstep: {spec.description}",
        runtime=RUNTIME,
        architecture=lambda_.Architecture.X86_64,
        handler=spec.handler,
        code=code,
        memory_size=spec.memory_mb,
        timeout=Duration.seconds(spec.timeout_s),
        environment=function_environment(spec, settings, config),
        role=role,
        log_group=log_group,
        reserved_concurrent_executions=spec.reserved_concurrency,
    )
    for source in spec.event_sources:
        # A plain mapping: SqsEventSource would also grant ChangeMessageVisibility and
        # GetQueueUrl; the queue actions come from the spec (EVENT_SOURCE_ACTIONS).
        lambda_.EventSourceMapping(
            scope,
            f"{base}{source.queue.id}Source",
            target=fn,
            event_source_arn=resources.queues[source.queue].queue_arn,
            batch_size=source.batch_size,
            report_batch_item_failures=True,
            max_concurrency=specs.broadcast_workers(config.ses_max_send_rate)
            if source.sized_by_send_rate
            else source.max_concurrency,
            max_batching_window=Duration.seconds(source.max_batching_window_s)
            if source.max_batching_window_s
            else None,
        )
    for stream in spec.stream_sources:
        lambda_.EventSourceMapping(
            scope,
            f"{base}{stream.table.id}StreamSource",  # one mapping per table, each with its filters
            target=fn,
            event_source_arn=resources.tables[stream.table].table_stream_arn,
            starting_position=lambda_.StartingPosition.TRIM_HORIZON,
            batch_size=stream.batch_size,
            max_batching_window=Duration.seconds(stream.max_batching_window_s),
            bisect_batch_on_error=stream.bisect,
            retry_attempts=stream.retry_attempts,
            on_failure=_OnFailureQueue(resources.failure_queues[stream.on_failure]),
            report_batch_item_failures=True,
            filters=[lambda_.FilterCriteria.filter(f) for f in stream.filters],
        )
    if spec.async_failures is not None:
        fn.configure_async_invoke(
            on_failure=_AsyncFailureQueue(resources.failure_queues[spec.async_failures]),
            retry_attempts=ASYNC_RETRY_ATTEMPTS,
            max_event_age=ASYNC_MAX_EVENT_AGE,
        )
    Validations.of(fn).acknowledge(
        Acknowledgment(
            id="AwsSolutions-L1",
            reason=f"Pinned to {specs.LAMBDA_RUNTIME} on purpose: the bundled wheels (pydantic-core, "
            "css-inline) are installed for this exact Python version and the test suite runs on it.",
        )
    )
    return fn


def nag_arn(stack: Stack, service: str, resource: str) -> str:
    """How cdk-nag spells an ARN of this stack's account and region in finding ids."""
    region = "<AWS::Region>" if Token.is_unresolved(stack.region) else stack.region
    account = "<AWS::AccountId>" if Token.is_unresolved(stack.account) else stack.account
    return f"arn:<AWS::Partition>:{service}:{region}:{account}:{resource}"


class Functions(Construct):
    """The functions, and their IAM: each role gets exactly the grants of its spec
    (``shared.core.specs.all_grants``), one statement per grant, bound to the resource ARNs by
    :meth:`grant`. Resources made later (the inbound bucket) are bound by their construct."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        resources: Resources,
        settings: dict[str, str],
        sending: Sending,
        config: MailstepConfig,
        state_machine_prefix: str,
    ) -> None:
        super().__init__(scope, construct_id)
        self.settings = settings
        self._bound: set[str] = set()
        code = lambda_code()
        self.functions = {
            spec.name: _python_function(
                self, spec, code=code, resources=resources, settings=settings, config=config
            )
            for spec in specs.FUNCTIONS
        }
        stack = Stack.of(self)
        for table_spec, table in resources.tables.items():
            self.grant(table_spec, [table.table_arn])
            if table.table_stream_arn is not None:
                # its stream ARN (table/<name>/stream/<label>): the Lambda service reads it
                self.grant(specs.TableStream(table_spec), [table.table_stream_arn])
            for gsi in table_spec.gsis:
                self.grant(specs.TableIndex(table_spec, gsi.name), [f"{table.table_arn}/index/{gsi.name}"])
        for secret_spec, secret in resources.secrets.items():
            self.grant(secret_spec, [secret.secret_arn])
        for queue_spec, queue in resources.queues.items():
            self.grant(queue_spec, [queue.queue_arn])
        for failure_spec, queue in resources.failure_queues.items():
            self.grant(failure_spec, [queue.queue_arn])
        for topic_spec, topic in resources.topics.items():
            self.grant(topic_spec, [topic.topic_arn])
        for set_spec, configuration_set in sending.configuration_sets.items():
            arn = stack.format_arn(
                service="ses",
                resource="configuration-set",
                resource_name=configuration_set.configuration_set_name,
            )
            self.grant(set_spec, [arn])
        # Sending: on the account's identities, for From addresses on the sending domain only.
        # SES authorizes a send on the sender's identity and, while the account is in the SES
        # sandbox, on each recipient's identity too (docs/local-runtime.md), so the resource is
        # every identity and the ses:FromAddress condition is what scopes the grant.
        domain = config.sending_domain
        self.grant(
            specs.SES_IDENTITY,
            [stack.format_arn(service="ses", resource="identity", resource_name="*")],
            conditions={"StringLike": {"ses:FromAddress": [f"*@{domain}", f"*@*.{domain}"]}},
            nag_reason="SES authorizes a send on the sending identity and, in the SES sandbox, on each "
            "recipient's verified identity as well; the ses:FromAddress condition limits the grant to "
            f"sends whose From address is on {domain}.",
            nag_resource=nag_arn(stack, "ses", "identity/*"),
        )
        self.grant(
            specs.SEQUENCE_MACHINES,
            [f"{settings['state_machine_arn_prefix']}*"],
            nag_reason="Starts executions of this stack's sequence state machines (name prefix "
            f"{state_machine_prefix}); the machines are generated from sequences/ at synth time.",
            nag_resource=nag_arn(stack, "states", f"stateMachine:{state_machine_prefix}*"),
        )
        executions = stack.format_arn(
            service="states",
            resource="execution",
            resource_name=f"{state_machine_prefix}*:*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        self.grant(
            specs.SEQUENCE_EXECUTIONS,
            [executions],
            nag_reason="Stops/describes executions of this stack's sequence state machines (name "
            "prefix); execution names are generated per subscriber and event.",
            nag_resource=nag_arn(stack, "states", f"execution:{state_machine_prefix}*:*"),
        )

        group = settings["sequence_schedule_group"]
        self.grant(
            specs.SEQUENCE_SCHEDULES,
            [stack.format_arn(service="scheduler", resource="schedule", resource_name=f"{group}/*")],
            nag_reason="Creates/updates the one-time schedules that resume sequence callback Tasks, in "
            f"this stack's schedule group {group} only; their names are derived per execution and step.",
            nag_resource=nag_arn(stack, "scheduler", f"schedule/{group}/*"),
        )
        self.grant(specs.SCHEDULER_ROLE, [settings["sequence_scheduler_role_arn"]])

        main_table = resources.tables[specs.MAIN_TABLE]
        self.grant(
            specs.WEBHOOK_SECRETS,
            [
                stack.format_arn(
                    service="secretsmanager",
                    resource="secret",
                    resource_name=f"{specs.WEBHOOK_SECRET_PREFIX}/{main_table.table_name}/*",
                    arn_format=ArnFormat.COLON_RESOURCE_NAME,
                )
            ],
            nag_reason="One Secrets Manager secret per webhook endpoint, created by the operator "
            "(mailstep webhooks add) under this deployment's name prefix; the delivery function reads them.",
            nag_resource=nag_arn(
                stack, "secretsmanager", f"secret:{specs.WEBHOOK_SECRET_PREFIX}/<MainTable>/*"
            ),
        )

    def grant(
        self,
        resource: specs.Resource,
        arns: list[str],
        *,
        nag_reason: str | None = None,
        nag_resource: str = "",
        conditions: dict[str, Any] | None = None,
    ) -> None:
        """Give every function whose spec grants ``resource`` exactly those actions on ``arns``
        (with ``conditions``, only when they hold).

        ``nag_reason``: the resource ARN holds a wildcard (cdk-nag AwsSolutions-IAM5); the
        reason is recorded on each role that receives it.
        """
        key = specs.resource_key(resource)
        self._bound.add(key)
        for spec in specs.FUNCTIONS:
            fn = self.functions[spec.name]
            actions = sorted(
                {
                    action
                    for g in specs.all_grants(spec, self.settings)
                    if specs.resource_key(g.resource) == key
                    for action in g.actions
                }
            )
            if not actions:
                continue
            fn.add_to_role_policy(iam.PolicyStatement(actions=actions, resources=arns, conditions=conditions))
            if nag_reason and fn.role is not None:
                Validations.of(fn.role).acknowledge(
                    Acknowledgment(id=f"AwsSolutions-IAM5[Resource::{nag_resource}]", reason=nag_reason)
                )

    def unbound(self) -> list[str]:
        """Granted resources no construct bound to an ARN (they would silently be missing)."""
        keys = {
            specs.resource_key(g.resource)
            for spec in specs.FUNCTIONS
            for g in specs.all_grants(spec, self.settings)
        }
        return sorted(keys - self._bound)
