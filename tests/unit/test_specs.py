"""The Lambda bundle's requirements and the package's pinned dependencies agree."""

from __future__ import annotations

import tomllib
from pathlib import Path

from shared import specs
from shared.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def test_lambda_requirements_are_pinned_project_dependencies() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {d.lower() for d in project["dependencies"]}
    for requirement in specs.LAMBDA_REQUIREMENTS:
        assert "==" in requirement, requirement
        assert requirement.lower() in declared, f"{requirement} is bundled but not a pinned dependency"


def test_every_env_name_maps_to_a_settings_field() -> None:
    fields = set(Settings.model_fields)
    assert set(specs.ENV) <= fields
    assert len(set(specs.ENV.values())) == len(specs.ENV), "two settings share an environment variable"


def test_specs_name_things_uniquely() -> None:
    for group in (specs.TABLES, specs.SECRETS, specs.QUEUES, specs.TOPICS, specs.FUNCTIONS):
        ids = [getattr(s, "id", getattr(s, "name", None)) for s in group]
        assert len(ids) == len(set(ids))
    for spec in specs.FUNCTIONS:
        module, _, fn = spec.handler.rpartition(".")
        assert (ROOT / (module.replace(".", "/") + ".py")).is_file(), spec.handler


def test_settings_read_only_declared_variables() -> None:
    env = {"TABLE_NAME": "t", "EVENTS_TABLE_NAME": "e", "UNRELATED": "x", "DATA_TTL_DAYS": "30"}
    settings = Settings.from_env(env)
    assert settings.table_name == "t" and settings.data_ttl_days == 30
