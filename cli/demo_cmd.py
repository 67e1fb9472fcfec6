"""``mailstep demo``: start a local runtime and tell the story of ``demo.chapters`` through it."""

from __future__ import annotations

import os

import typer
from rich.console import Console


def demo() -> None:
    """Start mailstep locally, tell a short story through its HTTP API, show the result."""
    from demo.chapters import tell
    from local_aws import LocalRuntime, RuntimeConfig
    from shared.core.observability import logger

    # This process's logs at WARNING unless POWERTOOLS_LOG_LEVEL asks for more; the functions
    # run in their execution environments with the template's environment, and this process
    # flushes no metrics.
    logger.setLevel(os.environ.get("POWERTOOLS_LOG_LEVEL", "WARNING").upper())
    from local_aws.artifact import ArtifactError

    console = Console()
    try:
        with LocalRuntime(RuntimeConfig()) as runtime:
            console.print(
                f"[bold]mailstep demo[/bold]: local runtime started in {runtime.started_in_s:.1f} s"
            )
            console.print(f"  emulated AWS {runtime.endpoint}, HTTP API {runtime.api_url}", highlight=False)
            if runtime.artifact is not None:
                console.print(
                    f"  functions run from {runtime.artifact.asset_dir} (Python 3.12, IAM enforced)"
                )
            story = tell(runtime, console)
    except ArtifactError as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(2) from None
    if story.failures:
        console.print(f"[red]{len(story.failures)} unexpected outcome(s)[/red]")
        raise typer.Exit(1)
    console.print("[green]demo finished[/green]")
