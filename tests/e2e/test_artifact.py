"""The deployment artifact itself: what `cdk deploy` would upload must import and start on the
Lambda runtime (Python 3.12, only the code asset and the runtime's boto3 on the path, the
template's environment), whatever the development virtualenv holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.coldstart import import_once, placeholder, targets_of
from local_aws.deployment import lambda_environment
from local_aws.environments import EnvironmentSpec, ExecutionEnvironment
from local_aws.template import LocalTemplate
from shared.core import specs


def test_every_function_imports_from_its_asset_with_the_template_environment(
    artifact: Any, tmp_path: Path
) -> None:
    template = LocalTemplate(
        artifact.template,
        region="us-east-1",
        account="123456789012",
        stack_name="Mailstep",
        fallback=placeholder,
    )
    functions = template.functions()
    assert {spec.handler for spec in specs.FUNCTIONS} == set(functions)
    imported = []
    for handler, config in sorted(functions.items()):
        assert config.runtime == specs.LAMBDA_RUNTIME
        environment = ExecutionEnvironment(
            EnvironmentSpec(
                function_name=handler,
                handler=handler,
                python=artifact.python,
                import_path=artifact.import_path,
                environment=lambda_environment(
                    config.environment,
                    name=handler,
                    handler=handler,
                    memory_mb=config.memory_mb,
                    artifact=artifact,
                    endpoint="http://127.0.0.1:9",
                    region="us-east-1",
                ),
                policy=config.policy,
                role_arn=config.role_arn,
                region="us-east-1",
                account="123456789012",
                timeout_s=config.timeout_s,
                memory_mb=config.memory_mb,
                log_file=tmp_path / f"{handler}.log",
            )
        )
        try:
            environment._start()  # the init phase: imports the handler like Lambda's cold start
            imported.append(handler)
        except Exception as exc:  # report every function, not just the first
            log = (tmp_path / f"{handler}.log").read_text() if (tmp_path / f"{handler}.log").exists() else ""
            imported.append(f"FAILED {handler}: {exc}: {log[-2000:]}")
        finally:
            environment.close()
    assert imported == sorted(functions), json.dumps(imported, indent=1)


def test_the_asset_holds_no_operator_or_local_runtime_code(artifact: Any) -> None:
    """The functions' asset is the runtime library, the handlers, templates and sequences:
    no operator commands (``ops``), no CLI or local runtime, no stack code."""
    asset = Path(artifact.asset_dir)
    ours = {p.name for p in asset.iterdir() if p.name in {"shared", "functions", "ops", "cli", "stacks"}}
    assert ours == {"shared", "functions"}
    modules = {p.stem for p in (asset / "shared").rglob("*.py")}
    assert not modules & {"admin", "csv_io", "doctor", "targets", "provision", "apigw", "service", "deploy"}
    assert {"pipeline", "subscribers", "consumer", "ingest"} <= modules


# The flags word of a PEP 552 .pyc header (bytes 4-8): bit 0 hash-based, bit 1 check the source.
UNCHECKED_HASH = 0b01


def test_every_module_of_the_asset_ships_its_bytecode_and_every_handler_imports_without_compiling(
    artifact: Any,
) -> None:
    """The asset holds each module compiled for 3.12 (a cold start on read-only /var/task would
    compile it again, every time), hash-based so that the zip's dates do not make it stale."""
    asset = Path(artifact.asset_dir)
    missing, checked = [], []
    for module in sorted(asset.rglob("*.py")):
        cached = module.parent / "__pycache__" / f"{module.stem}.cpython-312.pyc"
        if not cached.is_file():
            missing.append(str(module.relative_to(asset)))
        elif int.from_bytes(cached.read_bytes()[4:8], "little") != UNCHECKED_HASH:
            checked.append(str(cached.relative_to(asset)))
    assert (missing, checked) == ([], [])
    compiled, rendering = {}, []
    for target in targets_of(artifact):
        handler_module = target.spec.handler.rsplit(".", 1)[0]
        loaded = import_once(
            artifact.python,
            asset,
            handler_module,
            path=[artifact.runtime_dir],
            environment=target.environment,
        )
        if loaded.compiled:
            compiled[target.spec.name] = loaded.compiled
        if "shared.sending.rendering" in loaded.modules:
            rendering.append(target.spec.name)
    assert compiled == {}
    # The functions that load the sequence catalog but send no mail of their own do not load the
    # renderer at their cold start (synth checked the catalog's templates with it).
    assert not set(rendering) & {"api", "hygiene", "inbound"}
    assert "broadcast-worker" in rendering  # (the check sees the renderer where it is loaded)
