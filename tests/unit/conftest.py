"""Fixtures of the unit tier: the local runtime's execution environments, started on handlers
written by the test (the bench's CPU time and peak memory accounting)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from local_aws.artifact import lambda_python
from local_aws.environments import Environments, EnvironmentSpec


def environment_spec(code: Path, handler: str) -> EnvironmentSpec:
    """Function ``handler``: ``handlers.<handler>`` of the folder ``code``, 256 MB, 30 s."""
    return EnvironmentSpec(
        function_name=handler,
        handler=f"handlers.{handler}",
        python=lambda_python(),
        import_path=[str(code)],
        environment={},
        policy=None,
        role_arn="arn:aws:iam::123456789012:role/test",
        region="us-east-1",
        account="123456789012",
        timeout_s=30,
        memory_mb=256,
        log_file=code / "logs" / f"{handler}.log",
    )


def function(name: str) -> SimpleNamespace:
    """The attributes of a moto LambdaFunction that ``Environments.invoke`` reads."""
    arn = f"arn:aws:lambda:us-east-1:123456789012:function:{name}"
    return SimpleNamespace(
        function_name=name, version="$LATEST", function_arn=arn, memory_size=256, timeout=30
    )


@pytest.fixture
def start_environments(tmp_path: Path) -> Iterator[Callable[..., Environments]]:
    """Starts ``Environments`` for the named functions of a ``handlers.py`` holding the given
    source; they are closed after the test."""
    started: list[Environments] = []

    def start(handlers: str, *names: str) -> Environments:
        (tmp_path / "handlers.py").write_text(handlers)
        made = Environments(specs={name: environment_spec(tmp_path, name) for name in names})
        started.append(made)
        return made

    yield start
    for made in started:
        made.close()
