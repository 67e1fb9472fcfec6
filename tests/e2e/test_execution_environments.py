"""Execution environments of the local runtime: a Python 3.12 process per environment whose
import path holds only the function's code and the Lambda runtime's boto3, one invocation at
a time, replaced when it dies or times out, with the role policy enforced."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from local_aws.artifact import build_dir, lambda_python, runtime_libraries
from local_aws.environments import (
    CAN_FORK,
    EnvironmentLost,
    EnvironmentSpec,
    ExecutionEnvironment,
    FunctionPool,
)
from tests.e2e.helpers import eventually

HANDLERS = Path(__file__).with_name("handlers.py")


@pytest.fixture(scope="module")
def code(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("code")
    shutil.copy(HANDLERS, folder / "handlers.py")
    return folder


def spec(code: Path, tmp_path: Path, handler: str, *, timeout: int = 30, **options: Any) -> EnvironmentSpec:
    return EnvironmentSpec(
        function_name=f"env-test-{handler.rsplit('.', 1)[-1]}",
        handler=handler,
        python=lambda_python(),
        import_path=[str(code), str(runtime_libraries(build_dir()))],
        environment={"E2E_FLAVOUR": "lemon", "AWS_DEFAULT_REGION": "us-east-1", **options.pop("env", {})},
        policy=options.pop("policy", None),
        role_arn="arn:aws:iam::123456789012:role/test",
        region="us-east-1",
        account="123456789012",
        timeout_s=timeout,
        memory_mb=256,
        log_file=tmp_path / "logs" / "fn.log",
        **options,
    )


@pytest.fixture
def environments() -> Iterator[list[ExecutionEnvironment]]:
    made: list[ExecutionEnvironment] = []
    yield made
    for environment in made:
        environment.close()


def start(
    environments: list[ExecutionEnvironment], environment_spec: EnvironmentSpec
) -> ExecutionEnvironment:
    environment = ExecutionEnvironment(environment_spec)
    environments.append(environment)
    return environment


def request(event: Any) -> dict[str, Any]:
    context = {
        "function_name": "env-test",
        "function_version": "$LATEST",
        "invoked_function_arn": "arn:aws:lambda:us-east-1:123456789012:function:env-test",
        "memory_limit_in_mb": 256,
        "timeout_s": 30,
    }
    return {"event": event, "context": context}


def call(environment: ExecutionEnvironment, event: Any) -> tuple[Any, bool]:
    reply = environment.invoke(request(event))
    return json.loads(reply["payload"]), bool(reply["errored"])


def test_a_function_runs_on_python_312_with_only_its_code_and_the_runtime_on_the_path(
    code: Path, tmp_path: Path, environments: list[ExecutionEnvironment]
) -> None:
    environment = start(environments, spec(code, tmp_path, "handlers.whoami"))
    payload, errored = call(environment, {"n": 1})
    again, _ = call(environment, {"n": 2})
    assert not errored
    assert payload["pid"] != os.getpid() and payload["env"] == "lemon" and payload["echo"] == {"n": 1}
    assert payload["python"].startswith("3.12.")
    # nothing of the development virtualenv: not its site-packages, not the project's source tree
    assert sys.prefix not in json.dumps(payload["path"]) and str(Path.cwd()) not in payload["path"]
    assert payload["path"][:2] == [str(code), str(runtime_libraries(build_dir()))]
    assert payload["importable"] == {"boto3": True, "moto": False, "shared": False, "pydantic": False}
    assert again["pid"] == payload["pid"]  # warm: the same process


@pytest.mark.skipif(not CAN_FORK, reason="no pidfd here: every environment is a fresh process")
def test_a_forked_environment_answers_as_a_fresh_interpreter_does_and_dies_like_one(
    code: Path, tmp_path: Path, environments: list[ExecutionEnvironment]
) -> None:
    lambda_set = {"AWS_EXECUTION_ENV": "AWS_Lambda_python3.12"}  # a variable the preloader has too
    forked = start(environments, spec(code, tmp_path, "handlers.whoami", env=lambda_set))
    fresh = start(environments, spec(code, tmp_path, "handlers.whoami", env=lambda_set, forked=False))
    answers = [call(environment, {"n": 1}) for environment in (forked, fresh)]
    assert forked.forked and not fresh.forked
    (one, one_errored), (other, other_errored) = answers
    assert not one_errored and not other_errored and one["pid"] != other["pid"]
    assert {k: v for k, v in one.items() if k != "pid"} == {k: v for k, v in other.items() if k != "pid"}
    assert one["env_at_import"] == "lemon" and one["execution_env"] == "AWS_Lambda_python3.12"
    # killed like a fresh one: seen ended, reaped (no zombie left), replaced at the next invocation
    assert forked.kill() == one["pid"]
    eventually(lambda: not forked.alive, 10, "the killed environment to be seen ended")
    eventually(lambda: not os.path.exists(f"/proc/{one['pid']}"), 10, "the killed environment reaped")
    again, errored = call(forked, {"n": 2})
    assert not errored and again["pid"] != one["pid"] and forked.forked


def test_an_exception_is_a_function_error_and_the_environment_stays(
    code: Path, tmp_path: Path, environments: list[ExecutionEnvironment]
) -> None:
    environment = start(environments, spec(code, tmp_path, "handlers.fail"))
    payload, errored = call(environment, {})
    assert (
        errored and payload["errorType"] == "PaymentDeclined" and payload["errorMessage"] == "card declined"
    )
    assert environment.alive


def test_an_import_error_is_reported_like_lambda(
    code: Path, tmp_path: Path, environments: list[ExecutionEnvironment]
) -> None:
    environment = start(environments, spec(code, tmp_path, "no_such_module.handler"))
    payload, errored = call(environment, {})
    assert errored and payload["errorType"] == "Runtime.ImportModuleError"
    assert "No module named 'no_such_module'" in payload["errorMessage"]


def test_a_dead_environment_fails_its_invocation_and_keeps_its_last_output(
    code: Path, tmp_path: Path, environments: list[ExecutionEnvironment]
) -> None:
    environment = start(environments, spec(code, tmp_path, "handlers.crash"))
    with pytest.raises(EnvironmentLost):
        call(environment, {})
    assert not environment.alive
    assert "about to crash" in (tmp_path / "logs" / "fn.log").read_text()  # the killed one's last words


def test_an_invocation_past_the_timeout_fails_and_the_next_gets_a_new_environment(
    code: Path, tmp_path: Path
) -> None:
    pool = FunctionPool(spec(code, tmp_path, "handlers.linger", timeout=1))
    slow = pool.acquire()
    with pytest.raises(EnvironmentLost, match="timed out"):
        call(slow, {"seconds": 30})
    pool.release(slow)
    fresh = pool.acquire()
    payload, errored = call(fresh, {"seconds": 0})
    pool.release(fresh)
    pool.close()
    assert not errored and payload == {"slept": 0} and pool.started == 2


def test_concurrent_invocations_get_their_own_environments(code: Path, tmp_path: Path) -> None:
    pool = FunctionPool(spec(code, tmp_path, "handlers.whoami", max_environments=2))
    first, second = pool.acquire(), pool.acquire()
    pids = {call(first, {})[0]["pid"], call(second, {})[0]["pid"]}
    pool.release(first)
    pool.release(second)
    third = pool.acquire()  # an idle one is reused
    assert call(third, {})[0]["pid"] in pids and len(pids) == 2 and pool.started == 2
    pool.release(third)
    pool.close()


def test_a_request_the_role_policy_does_not_allow_fails_with_access_denied(
    code: Path, tmp_path: Path, environments: list[ExecutionEnvironment]
) -> None:
    allow_other_table = [
        {
            "Effect": "Allow",
            "Action": ["dynamodb:GetItem"],
            "Resource": "arn:aws:dynamodb:us-east-1:123456789012:table/other",
        }
    ]
    environment = start(
        environments,
        spec(
            code,
            tmp_path,
            "handlers.get_item",
            policy=allow_other_table,
            env={
                "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
                "AWS_ACCESS_KEY_ID": "x",
                "AWS_SECRET_ACCESS_KEY": "x",
            },
        ),
    )
    reply = environment.invoke(request({"table": "mailstep-main"}))
    payload = json.loads(reply["payload"])
    assert reply["errored"] and payload["errorType"] == "ClientError"
    assert (
        "AccessDeniedException" in payload["errorMessage"] and "dynamodb:GetItem" in payload["errorMessage"]
    )
    assert reply["calls"] == [
        {
            "action": "dynamodb:GetItem",
            "resource": "arn:aws:dynamodb:us-east-1:123456789012:table/mailstep-main",
            "allowed": False,
        }
    ]
