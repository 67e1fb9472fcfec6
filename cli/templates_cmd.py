"""``mailstep templates list | validate | preview``: the renderer of the Lambdas, on a laptop.

Preview renders with a sample subscriber and the sending identity from the environment
(``DEFAULT_FROM``, ``POSTAL_ADDRESS``, ``PUBLIC_BASE_URL``... as in ``shared.core.specs.ENV``);
the unsubscribe link in a preview is a placeholder.
"""

from __future__ import annotations

import json
import tempfile
import webbrowser
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(help="Email templates: list, validate, preview.", no_args_is_help=True)
console = Console()
err = Console(stderr=True)

DIR = typer.Option(None, "--dir", help="Templates folder (default: the project's templates/).")


def _renderer(directory: Path | None) -> Any:
    from shared.sending.rendering import TEMPLATES_DIR, Renderer

    return Renderer(directory or TEMPLATES_DIR)


@app.command("list")
def list_templates(directory: Path | None = DIR) -> None:
    """List template keys with their subject and layout."""
    from ops.templates import rows

    engine = _renderer(directory)
    table = Table(title=f"templates in {engine.root}")
    for column in ("key", "file", "subject", "layout"):
        table.add_column(column)
    for row in rows(engine):
        table.add_row(row["key"], row["file"], row["subject"], row["layout"])
    console.print(table)


@app.command("validate")
def validate(directory: Path | None = DIR) -> None:
    """Check every template: front matter, syntax, layouts, includes and variables (exit 1 on problems)."""
    engine = _renderer(directory)
    problems = engine.validate()
    for problem in problems:
        typer.echo(f"templates/{problem}", err=True)
    if problems:
        typer.echo(f"{len(problems)} problem(s) in {engine.root}", err=True)
        raise typer.Exit(1)
    typer.echo(f"{len(engine.keys())} templates OK")


@app.command("preview")
def preview(
    key: str = typer.Argument(..., help="Template key, e.g. onboarding/welcome."),
    email: str = typer.Option("preview@example.com", "--email", help="Sample subscriber address."),
    first_name: str = typer.Option("Ada", "--first-name", help="Sample first name ('' for none)."),
    data: str = typer.Option("{}", "--data", help="Event data as JSON."),
    subject: str | None = typer.Option(None, "--subject", help="Subject override (a template string)."),
    transactional: bool = typer.Option(False, "--transactional", help="No unsubscribe link."),
    open_browser: bool = typer.Option(False, "--open", help="Open the HTML in a browser."),
    out: Path | None = typer.Option(None, "--out", help="Write the HTML here (default: a temporary file)."),
    directory: Path | None = DIR,
) -> None:
    """Render one template: subject, preheader, text part and the HTML file."""
    from shared.core.errors import MailstepError
    from shared.sending.rendering import timed_render

    try:
        values = json.loads(data)
        if not isinstance(values, dict):
            raise ValueError("must be a JSON object")
    except ValueError as exc:
        raise typer.BadParameter(f"--data: {exc}") from None
    from ops.templates import identity_from_env

    identity = identity_from_env()
    engine = _renderer(directory)
    try:
        context = identity.preview_context(
            email=email, first_name=first_name, data=values, transactional=transactional
        )
        rendered = engine.render(key, context, subject=subject)
    except MailstepError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
    seconds = timed_render(key, context, repeat=20) if directory is None else None
    target = out or Path(tempfile.gettempdir()) / f"mailstep-preview-{key.replace('/', '-')}.html"
    target.write_text(rendered.html, encoding="utf-8")
    console.print(f"[bold]Subject:[/bold]   {rendered.subject}")
    console.print(f"[bold]Preheader:[/bold] {rendered.preheader}")
    console.print(f"[bold]HTML:[/bold]      {target} ({len(rendered.html.encode())} bytes)")
    if seconds is not None:
        console.print(f"[bold]Render:[/bold]    {seconds * 1000:.2f} ms per email")
    console.rule("text/plain")
    typer.echo(rendered.text)
    if open_browser:
        webbrowser.open(target.resolve().as_uri())
