"""Lambda execution environments of the local runtime: child processes that run the real
handler code, one invocation at a time, and are replaced when they die or time out."""

from __future__ import annotations

import os
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from cli.local.environments import ExecutionEnvironment
from cli.local.lambdas import STATS


def function(handler: str, *, timeout: int = 30, **env: str) -> Any:
    """The attributes of a moto ``LambdaFunction`` an environment reads."""
    return SimpleNamespace(
        function_name=f"env-test-{handler.rsplit('.', 1)[-1]}",
        version="$LATEST",
        function_arn=f"arn:aws:lambda:us-east-1:123456789012:function:{handler}",
        memory_size=256,
        timeout=timeout,
        handler=handler,
        environment_vars=env,
    )


@pytest.fixture
def environments() -> Iterator[list[ExecutionEnvironment]]:
    made: list[ExecutionEnvironment] = []
    yield made
    for environment in made:
        environment.close()


def start(environments: list[ExecutionEnvironment], handler: str, **kwargs: Any) -> ExecutionEnvironment:
    environment = ExecutionEnvironment(function(handler, **kwargs))
    environments.append(environment)
    return environment


def test_the_handler_runs_in_a_child_process_with_the_function_environment(environments) -> None:
    environment = start(environments, "tests.e2e.handlers.whoami", E2E_FLAVOUR="lemon")
    before = STATS.invocations["env-test-whoami"]
    payload, errored = environment.invoke({"n": 1})
    again, _ = environment.invoke({"n": 2})
    assert not errored
    assert payload["pid"] != os.getpid() and payload["env"] == "lemon" and payload["echo"] == {"n": 1}
    assert again["pid"] == payload["pid"] and environment.cold_starts == 1  # warm: the same process
    assert STATS.invocations["env-test-whoami"] == before + 2  # counted by the runtime


def test_an_exception_is_a_function_error_and_the_environment_stays(environments) -> None:
    environment = start(environments, "tests.e2e.handlers.fail")
    payload, errored = environment.invoke({})
    assert errored and payload["errorType"] == "PaymentDeclined"
    assert payload["errorMessage"] == "card declined"
    assert environment.cold_starts == 1


def test_a_dead_environment_fails_its_invocation_and_is_replaced(environments) -> None:
    crashing = start(environments, "tests.e2e.handlers.crash")
    payload, errored = crashing.invoke({})
    assert errored and payload["errorType"] == "Runtime.ExitError"
    crashing.function.handler = "tests.e2e.handlers.whoami"
    payload, errored = crashing.invoke({"after": "crash"})
    assert not errored and payload["echo"] == {"after": "crash"} and crashing.cold_starts == 2


def test_an_invocation_past_the_function_timeout_fails_and_the_environment_is_replaced(environments) -> None:
    slow = start(environments, "tests.e2e.handlers.linger", timeout=1)
    payload, errored = slow.invoke({"seconds": 30})
    assert errored and "timed out" in payload["errorMessage"]
    payload, errored = slow.invoke({"seconds": 0})
    assert not errored and payload == {"slept": 0} and slow.cold_starts == 2
