"""Functions: one Lambda per ``shared.specs.FUNCTIONS`` entry, built by ``_python_function()``.

All functions share ONE code asset: the folders in ``LAMBDA_SOURCE_DIRS`` plus the pinned
``LAMBDA_REQUIREMENTS``, installed for the Lambda platform by pip on the synthesizing
machine (no Docker). Offline synthesis skips bundling with the context
``{"aws:cdk:bundling-stacks": []}``.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import (
    Acknowledgment,
    BundlingOptions,
    DockerImage,
    Duration,
    ILocalBundling,
    RemovalPolicy,
    Validations,
)
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk.aws_lambda_event_sources import SqsEventSource
from constructs import Construct

from shared import specs
from stacks.config import MailstepConfig
from stacks.constructs.resources import Resources
from stacks.constructs.sending import Sending

PROJECT_ROOT = Path(__file__).resolve().parents[2]
PIP_PLATFORM = "manylinux2014_x86_64"  # matches lambda_.Architecture.X86_64
PYTHON_VERSION = specs.LAMBDA_RUNTIME.removeprefix("python")
RUNTIME = lambda_.Runtime(specs.LAMBDA_RUNTIME, lambda_.RuntimeFamily.PYTHON, supports_inline_code=True)
METRICS_NAMESPACE = "Mailstep"
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", ".*")


def _source_files(root: Path) -> list[Path]:
    files = []
    for folder in specs.LAMBDA_SOURCE_DIRS:
        for path in sorted((root / folder).rglob("*")):
            relative = path.relative_to(root)
            if path.is_file() and not any(p == "__pycache__" or p.startswith(".") for p in relative.parts):
                files.append(path)
    return files


def source_hash(root: Path = PROJECT_ROOT) -> str:
    """Fingerprint of everything that goes into the code asset (sources, requirements, platform)."""
    digest = hashlib.sha256()
    digest.update("\n".join((*specs.LAMBDA_REQUIREMENTS, PIP_PLATFORM, PYTHON_VERSION)).encode())
    for path in _source_files(root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@jsii.implements(ILocalBundling)
class PipBundling:
    """Installs the Lambda dependencies with pip for the Lambda platform, then copies the sources."""

    def __init__(self, root: Path = PROJECT_ROOT) -> None:
        self.root = root

    def try_bundle(self, output_dir: str, _options: Any = None) -> bool:
        out = Path(output_dir)
        command = [
            sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
            "--platform", PIP_PLATFORM, "--implementation", "cp", "--python-version", PYTHON_VERSION,
            "--only-binary=:all:", "--target", str(out), *specs.LAMBDA_REQUIREMENTS,
        ]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603
        if result.returncode != 0:
            raise RuntimeError(f"bundling the Lambda dependencies failed:\n{result.stderr.strip()}")
        for folder in specs.LAMBDA_SOURCE_DIRS:
            if (self.root / folder).is_dir():
                shutil.copytree(self.root / folder, out / folder, ignore=_SKIP, dirs_exist_ok=True)
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
    Mail settings without a deployment value keep their defaults from ``shared.settings``.
    """
    fields = [
        *(t.setting for t in spec.read_write_tables),
        *(s.setting for s in spec.read_secrets),
        *(q.setting for q in spec.send_queues),
        *(t.setting for t in spec.publish_topics),
    ]
    if spec.mail_settings:
        fields += [f for f in specs.MAIL_SETTINGS if f in settings and f not in fields]
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
    for source in spec.event_sources:
        if source.queue.visibility_timeout_s < spec.timeout_s:
            raise ValueError(
                f"queue {source.queue.id!r}: visibility timeout {source.queue.visibility_timeout_s}s is "
                f"shorter than the timeout of function {spec.name!r} ({spec.timeout_s}s); "
                "Lambda rejects the mapping"
            )


def _python_function(
    scope: Construct,
    spec: specs.FunctionSpec,
    *,
    code: lambda_.Code,
    resources: Resources,
    settings: dict[str, str],
    sending: Sending,
    config: MailstepConfig,
) -> lambda_.Function:
    """One Lambda with its own role, log group, least-privilege grants and event sources."""
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
    for table in spec.read_write_tables:
        resources.tables[table].grant_read_write_data(fn)
    for secret in spec.read_secrets:
        resources.secrets[secret].grant_read(fn)
    for queue in spec.send_queues:
        resources.queues[queue].grant_send_messages(fn)
    for topic in spec.publish_topics:
        resources.topics[topic].grant_publish(fn)
    if spec.sends_email:
        sending.grant_send(fn)
    for source in spec.event_sources:
        fn.add_event_source(
            SqsEventSource(
                resources.queues[source.queue],
                batch_size=source.batch_size,
                report_batch_item_failures=True,
                max_concurrency=source.max_concurrency,
                max_batching_window=Duration.seconds(source.max_batching_window_s)
                if source.max_batching_window_s
                else None,
            )
        )
    _acknowledge(fn, role, spec)
    return fn


def _acknowledge(fn: lambda_.Function, role: iam.Role, spec: specs.FunctionSpec) -> None:
    Validations.of(fn).acknowledge(
        Acknowledgment(
            id="AwsSolutions-L1",
            reason=f"Pinned to {specs.LAMBDA_RUNTIME} on purpose: the bundled wheels (pydantic-core, "
            "css-inline) are installed for this exact Python version and the test suite runs on it.",
        )
    )
    indexed = [t for t in spec.read_write_tables if t.gsis]
    if indexed:
        Validations.of(role).acknowledge(
            *(
                Acknowledgment(
                    id=f"AwsSolutions-IAM5[Resource::<{t.id}.Arn>/index/*]",
                    reason=f"Queries on the GSIs of {t.id} ({', '.join(g.name for g in t.gsis)}); "
                    "the wildcard covers only this table's indexes.",
                )
                for t in indexed
            )
        )


class Functions(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        resources: Resources,
        settings: dict[str, str],
        sending: Sending,
        config: MailstepConfig,
    ) -> None:
        super().__init__(scope, construct_id)
        code = lambda_code()
        self.functions = {
            spec.name: _python_function(
                self, spec, code=code, resources=resources, settings=settings, sending=sending, config=config
            )
            for spec in specs.FUNCTIONS
        }
