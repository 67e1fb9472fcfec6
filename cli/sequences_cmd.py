"""``mailstep sequences``: list, validate, show the step tree, subscribers, reconcile.

``list``, ``validate`` and ``show`` read the YAML files (no AWS needed); ``subscribers``
and ``reconcile`` read the target (the running ``mailstep dev`` or a deployed stack).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table
from rich.tree import Tree

from cli.target import errors_to_exit, name_param, targeted
from shared.sequences import SEQUENCES_DIR

if TYPE_CHECKING:
    from ops.targets import Target

console = Console()
app = typer.Typer(
    help="Sequences: YAML files compiled to Step Functions state machines.", no_args_is_help=True
)
DIR = typer.Option(SEQUENCES_DIR, "--dir", help="Folder of the sequence files.")
TEMPLATES = typer.Option(
    None, "--templates", help="Templates folder (default: next to the sequences folder)."
)
SEQUENCE_ID = typer.Argument(..., help="The sequence id.")


def _catalog(folder: Path, templates: Path | None, strict: bool = True):  # type: ignore[no-untyped-def]
    from shared.sequences.validate import load_catalog

    catalog, problems = load_catalog(folder, templates)
    if problems and strict:
        for problem in problems:
            typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(1)
    return catalog, problems


@app.command("validate")
def validate(folder: Path = DIR, templates: Path | None = TEMPLATES) -> None:
    """Check every file (the same validator as the CDK synth): exit 1 with file:line:step errors."""
    catalog, _ = _catalog(folder, templates)
    console.print(f"[green]{len(catalog)} sequence file(s) valid[/green] in {folder}")


@app.command("list")
def list_(folder: Path = DIR, templates: Path | None = TEMPLATES) -> None:
    """Every sequence: trigger, exits, kind, steps and mails."""
    from shared.sequences.model import SendStep
    from shared.sequences.validate import walk

    catalog, problems = _catalog(folder, templates, strict=False)
    table = Table(title=f"Sequences in {folder}")
    for column in ("id", "trigger", "exit on", "kind", "reentry", "steps", "mails"):
        table.add_column(column)
    for sequence in catalog:
        steps = list(walk(sequence.steps))
        mails = sum(1 for _, s in steps if isinstance(s, SendStep)) or (1 if sequence.on else 0)
        table.add_row(
            sequence.id,
            sequence.trigger_event,
            ", ".join(sequence.exit_on) or "-",
            "one-off"
            if sequence.is_one_off
            else ("transactional" if sequence.transactional else "marketing"),
            sequence.reentry,
            str(len(steps) or 1),
            str(mails),
        )
    console.print(table)
    for problem in problems:
        typer.echo(f"invalid: {problem}", err=True)
    if problems:
        raise typer.Exit(1)


@app.command("show")
def show(
    sequence_id: str = typer.Argument(..., help="The sequence id (its file name)."),
    asl: bool = typer.Option(False, "--asl", help="Print the generated state machine (ASL JSON)."),
    folder: Path = DIR,
    templates: Path | None = TEMPLATES,
) -> None:
    """The step tree with the template of each send (or the generated ASL)."""
    from shared.sequences.compiler import compile_sequence, definition_json

    catalog, _ = _catalog(folder, templates)
    sequence = catalog.get(sequence_id)
    if sequence is None:
        typer.echo(f"error: no sequence {sequence_id!r} in {folder}", err=True)
        raise typer.Exit(1)
    if asl:
        typer.echo(definition_json(sequence), nl=False)
        return
    console.print(step_tree(sequence))
    states = compile_sequence(sequence)["States"]
    console.print(f"{len(states)} states; start: {compile_sequence(sequence)['StartAt']}")


def step_tree(sequence) -> Tree:  # type: ignore[no-untyped-def]
    from shared.sequences.compiler import duration_label
    from shared.sequences.model import ExitStep, IfStep, SendStep, TagStep, WaitStep, condition_to_data

    head = f"[bold]{sequence.id}[/bold]"
    if sequence.on is not None:
        tree = Tree(f"{head}  on {sequence.on.event}")
        tree.add(f"send [cyan]{sequence.on.send}[/cyan]  {sequence.on.subject or ''}")
        return tree
    exits = f"  exits on {', '.join(sequence.exit_on)}" if sequence.exit_on else ""
    tree = Tree(f"{head}  trigger {sequence.trigger_event}{exits}")

    def add(node: Tree, steps: list) -> None:  # type: ignore[type-arg]
        for step in steps:
            if isinstance(step, SendStep):
                label = f"send [cyan]{step.send}[/cyan]  {step.subject or ''}"
                child = node.add(label)
                for variant in step.variants:
                    child.add(f"variant [cyan]{variant.send or step.send}[/cyan]  {variant.subject or ''}")
            elif isinstance(step, WaitStep):
                node.add(f"wait {duration_label(step.wait)}")
            elif isinstance(step, TagStep):
                node.add(f"tag +{step.tag.add} -{step.tag.remove}")
            elif isinstance(step, ExitStep):
                node.add("exit")
            elif isinstance(step, IfStep):
                branch = node.add(f"if {json.dumps(condition_to_data(step.if_))}")
                add(branch.add("then"), step.then)
                if step.else_:
                    add(branch.add("else"), step.else_)

    add(tree, sequence.steps)
    return tree


@app.command("subscribers")
@targeted
def subscribers(
    sequence_id: str = SEQUENCE_ID,
    *,
    target: Target,
) -> None:
    """Subscribers with an active execution of the sequence (its EXEC pairs)."""
    from ops.sequence_view import members

    sequence_id = name_param(sequence_id, "sequence id")
    with errors_to_exit():
        found = members(target.subscriber_store(), sequence_id)
        table = Table(title=f"Active in {sequence_id} ({len(found)}) - {target.label}")
        for column in ("email", "started", "execution"):
            table.add_column(column)
        for member in found:
            table.add_row(member.email, member.started_at, member.execution_arn.rsplit(":", 1)[-1])
        console.print(table)


@app.command("reconcile")
@targeted
def reconcile(
    sequence_id: str = SEQUENCE_ID,
    *,
    target: Target,
) -> None:
    """Remove EXEC pairs whose execution is no longer running (a crash between steps)."""
    with errors_to_exit():
        removed = target.sequence_engine().reconcile(sequence_id)
        console.print(f"{removed} stale pair(s) removed from {sequence_id}")
