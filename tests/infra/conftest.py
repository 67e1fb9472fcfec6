"""Synthesize the mailstep app once per test session (bundling skipped: no pip, no network)."""

from __future__ import annotations

import pytest

from tests.infra.cfn import Synth, synthesize


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    return synthesize(tmp_path_factory.mktemp("cdk.out"))
