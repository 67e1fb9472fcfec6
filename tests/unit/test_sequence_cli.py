"""``mailstep sequences`` offline commands: validate, list, show."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from typer.testing import CliRunner

from cli import sequences_cmd

runner = CliRunner()
app = typer.Typer()
app.add_typer(sequences_cmd.app, name="sequences")


def test_validate_passes_on_the_examples_and_fails_with_file_and_line(tmp_path: Path) -> None:
    ok = runner.invoke(app, ["sequences", "validate"])
    assert ok.exit_code == 0 and "valid" in ok.output
    (tmp_path / "bad.yaml").write_text("trigger: go\nsteps:\n  - wait: 3 weeks\n")
    bad = runner.invoke(app, ["sequences", "validate", "--dir", str(tmp_path)])
    assert bad.exit_code == 1
    assert "bad.yaml:3: steps[0]: wait: bad duration" in bad.output


def test_show_prints_the_tree_with_every_template() -> None:
    result = runner.invoke(app, ["sequences", "show", "onboarding"])
    assert result.exit_code == 0
    for key in (
        "onboarding/welcome",
        "onboarding/tips",
        "onboarding/pro-tips",
        "onboarding/upgrade",
        "onboarding/check-in",
        "wait 2d",
        'if {"tag": "pro"}',
    ):
        assert key in result.output
    asl = runner.invoke(app, ["sequences", "show", "trial-expiring", "--asl"])
    assert asl.exit_code == 0 and '"StartAt": "S1_schedule"' in asl.output
    assert runner.invoke(app, ["sequences", "show", "missing"]).exit_code == 1


def test_list_names_trigger_and_kind(monkeypatch) -> None:
    # A wide console whatever the import order (the module's console is created at import).
    monkeypatch.setattr(sequences_cmd, "console", Console(width=200))
    result = runner.invoke(app, ["sequences", "list"])
    assert result.exit_code == 0
    assert "onboarding" in result.output and "subscriber.subscribed" in result.output
    assert "trial.started" in result.output and "restart" in result.output
