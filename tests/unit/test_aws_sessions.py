"""Sessions share the process's botocore data loader: each data file is parsed once per process,
and a fork server's parse leaves its forks nothing to parse (``shared.core.aws``)."""

from __future__ import annotations

from typing import Any

import pytest

from shared.core import aws


@pytest.fixture
def parsed_files(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The data files botocore parses from now on (every JSON file its loader reads)."""
    parsed: list[str] = []
    loader = aws._data_loader()
    real = loader.file_loader.load_file

    def load_file(path: str) -> Any:
        parsed.append(path)
        return real(path)

    monkeypatch.setattr(loader.file_loader, "load_file", load_file)
    return parsed


def test_clients_made_after_the_parse_read_no_data_file(parsed_files: list[str]) -> None:
    aws.parse_models(("dynamodb", "sesv2"))
    parsed_files.clear()

    emulated = aws.ClientFactory(aws.AwsConfig.emulated("http://127.0.0.1:9", "eu-west-1"))
    explicit = aws.ClientFactory(aws.AwsConfig(region="us-east-1", access_key_id="a", secret_access_key="b"))
    emulated.client("dynamodb"), explicit.client("dynamodb"), explicit.client("sesv2")

    assert parsed_files == []


def test_a_service_not_parsed_is_parsed_once_for_every_session(parsed_files: list[str]) -> None:
    first = aws.ClientFactory(aws.AwsConfig.emulated("http://127.0.0.1:9", "us-east-1"))
    first.client("cloudwatch")
    once = list(parsed_files)
    aws.ClientFactory(aws.AwsConfig.emulated("http://127.0.0.1:9", "us-east-1")).client("cloudwatch")

    assert parsed_files == once  # the second session's client parsed nothing


def test_sessions_do_not_grow_the_loader_s_search_paths() -> None:
    aws.new_session(region_name="us-east-1")
    before = list(aws._data_loader().search_paths)
    for _ in range(5):
        aws.new_session(region_name="us-east-1")

    assert aws._data_loader().search_paths == before
    assert len(before) == len(set(before))


def test_explicit_keys_ignore_the_environment_s_profile(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    config = tmp_path / "config"
    config.write_text("[profile elsewhere]\nregion = ap-south-1\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_PROFILE", "elsewhere")
    session = aws.new_session(
        isolated=True, region_name="us-east-1", aws_access_key_id="a", aws_secret_access_key="b"
    )

    assert session.profile_name != "elsewhere" and session.region_name == "us-east-1"
    assert session.get_credentials().access_key == "a"
