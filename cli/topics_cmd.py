"""``mailstep topics list``: the topics of ``topics.yaml`` with how many subscribers receive
each. The logic (and its cost: one Scan of the main table) is ``ops.topics``; this module only
formats. A reader's own topics: ``mailstep subscribers topics EMAIL``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.table import Table

from cli.target import errors_to_exit, json_or, targeted

if TYPE_CHECKING:
    from ops.targets import Target

app = typer.Typer(help="Topics (topics.yaml) and how many subscribers receive each.", no_args_is_help=True)
console = Console()


def _topics_table(counts: dict[str, Any]) -> None:
    if not counts["topics"]:
        console.print("no topics declared (topics.yaml)")
        return
    table = Table(title=f"Topics ({counts['subscribers']} subscribed, not suppressed)")
    for column, justify in (
        ("topic", "left"),
        ("name", "left"),
        ("default", "left"),
        ("receiving", "right"),
        ("opted in", "right"),
        ("opted out", "right"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for row in counts["topics"]:
        table.add_row(
            row["id"],
            row["name"],
            row["default"],
            str(row["receiving"]),
            str(row["opted_in"]),
            str(row["opted_out"]),
        )
    console.print(table)


@app.command("list")
@targeted
@json_or(_topics_table)
def list_(*, target: Target) -> dict[str, Any]:
    """Every topic with how many subscribers receive it, opted in and opted out (one table Scan)."""
    from ops.topics import TopicAdmin

    with errors_to_exit():
        counts = TopicAdmin.of(target).counts()
    return counts.public()


if __name__ == "__main__":
    app()
