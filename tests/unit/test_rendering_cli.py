"""``mailstep templates`` commands (the typer sub-app, invoked in-process)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from cli.templates_cmd import app

runner = CliRunner()


def _tree(root: Path) -> Path:
    (root / "_layouts").mkdir()
    (root / "_layouts" / "default.html").write_text("<html><body>{{ content }}</body></html>")
    (root / "ok.md").write_text("---\nsubject: Hi {{ first_name }}\n---\nHello\n")
    (root / "broken.md").write_text("---\nsubject: Hi\nlayout: missing\n---\n\nHello {{ nme }}\n")
    return root


def test_validate_reports_file_and_line_and_exits_non_zero(tmp_path):
    result = runner.invoke(app, ["validate", "--dir", str(_tree(tmp_path))])
    assert result.exit_code == 1
    assert "templates/broken.md:6: undefined variable 'nme'" in result.output
    assert "templates/broken.md:3: missing layout 'missing' (_layouts/missing.html)" in result.output


def test_validate_passes_on_the_project_templates():
    result = runner.invoke(app, ["validate"])
    assert result.exit_code == 0 and "templates OK" in result.output


def test_preview_writes_html_and_prints_subject_and_text(tmp_path):
    out = tmp_path / "p.html"
    result = runner.invoke(
        app,
        [
            "preview",
            "transactional/receipt",
            "--data",
            '{"order_id": "A-7", "total": "$5"}',
            "--out",
            str(out),
            "--transactional",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "Your receipt A-7" in result.output and "Render:" in result.output
    assert "A-7" in out.read_text() and "Unsubscribe" not in out.read_text()


def test_preview_of_an_undefined_variable_fails_cleanly(tmp_path):
    result = runner.invoke(app, ["preview", "transactional/receipt", "--out", str(tmp_path / "x.html")])
    assert result.exit_code == 1 and "order_id" in result.output


def test_list_shows_keys():
    result = runner.invoke(app, ["list"])
    assert result.exit_code == 0 and "onboarding/welcome" in result.output
