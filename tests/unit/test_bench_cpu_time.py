"""The CPU time the capacity model divides by the mails: each execution environment reports the
process CPU time of every invocation (not its wall time), and ``Environments.cpu_seconds`` sums
it per function. Starts Python 3.12 child processes, so it runs with the bench (``make bench``),
not in the unit tier of ``make test``."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from local_aws.environments import Environments
from tests.unit.conftest import function

pytestmark = pytest.mark.bench

HANDLERS = """
import time


def burn(event, context):
    started = time.process_time()
    while time.process_time() - started < event["cpu_s"]:
        pass
    return {}


def wait(event, context):
    time.sleep(event["wall_s"])
    return {}
"""


def test_an_invocation_reports_its_cpu_time_not_its_wall_time(
    start_environments: Callable[..., Environments],
) -> None:
    # Given a function that computes for 0.2 s of CPU and one that waits 0.5 s
    environments = start_environments(HANDLERS, "burn", "wait")
    environments.invoke(function("burn"), {"cpu_s": 0.0})  # the first invocation of each
    environments.invoke(function("wait"), {"wall_s": 0.0})
    before = dict(environments.cpu_seconds)

    # When each is invoked twice
    for _ in range(2):
        environments.invoke(function("burn"), {"cpu_s": 0.2})
        environments.invoke(function("wait"), {"wall_s": 0.5})

    # Then the computing one is charged its CPU time and the waiting one almost nothing
    burned = environments.cpu_seconds["burn"] - before["burn"]
    waited = environments.cpu_seconds["wait"] - before["wait"]
    assert 0.4 <= burned < 0.6
    assert waited < 0.05
