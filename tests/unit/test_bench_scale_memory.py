"""The peak memory the scale tier reports: each execution environment reports its process's
peak resident memory after every invocation and ``Environments.peak_rss_kb`` keeps the largest
per function. Starts Python 3.12 child processes, so it runs with the bench (``make bench``),
not in the unit tier of ``make test``."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from local_aws.environments import Environments
from tests.unit.conftest import function

pytestmark = pytest.mark.bench

HANDLERS = """
held = []


def grow(event, context):
    held.append(bytearray(event["mb"] * 1024 * 1024))  # touched: resident
    return {}


def small(event, context):
    return {}
"""


def test_each_function_reports_its_own_environment_s_peak_memory(
    start_environments: Callable[..., Environments],
) -> None:
    # Given a function that holds 80 MB more after its second invocation, and one that holds nothing
    environments = start_environments(HANDLERS, "grow", "small")
    environments.invoke(function("grow"), {"mb": 0})
    environments.invoke(function("small"), {})
    before = environments.peak_rss_kb["grow"]

    # When the first is invoked again
    environments.invoke(function("grow"), {"mb": 80})
    environments.invoke(function("small"), {})

    # Then its peak grew by about 80 MB, and the other's is its own process's (not this
    # process's, which started it: Linux keeps ru_maxrss across exec)
    grown_mb = (environments.peak_rss_kb["grow"] - before) / 1024
    assert 75 <= grown_mb <= 90
    assert 0 < environments.peak_rss_kb["small"] < before + 20 * 1024
