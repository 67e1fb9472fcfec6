"""The ``mailstep`` command. Each capability registers its commands here with one line.

A call imports only the module of the command it names (``mailstep webhooks list`` imports
``cli.webhooks_cmd`` and what it needs, not the console, the local runtime or the MCP server):
the modules of all commands cost about 0.2 s of CPU to import, on every call. ``mailstep``,
``mailstep --help`` and an unknown name build the whole tree, so help and the "no such command"
answer are unchanged. ``app`` is the whole tree, for callers that import it.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import typer

# name -> (module, function): a command of its own
COMMANDS: dict[str, tuple[str, str]] = {
    "dev": ("cli.dev_cmd", "dev"),
    "demo": ("cli.demo_cmd", "demo"),
    "doctor": ("cli.doctor_cmd", "doctor"),
    "mcp": ("cli.mcp_cmd", "mcp"),
    "send-test": ("cli.send_cmd", "send_test"),
    "stats": ("cli.stats_cmd", "stats"),
    "events": ("cli.events_cmd", "events"),
}
# name -> module whose ``app`` is a group of commands
GROUPS: dict[str, str] = {
    "local": "cli.local_cmd",
    "console": "cli.console_cmd",
    "broadcast": "cli.broadcast_cmd",
    "subscribers": "cli.subscribers_cmd",
    "topics": "cli.topics_cmd",
    "signups": "cli.signups_cmd",
    "executions": "cli.executions_cmd",
    "templates": "cli.templates_cmd",
    "sequences": "cli.sequences_cmd",
    "suppression": "cli.suppression_cmd",
    "webhooks": "cli.webhooks_cmd",
    "reputation": "cli.reputation_cmd",
    "warmup": "cli.warmup_cmd",
    "hygiene": "cli.hygiene_cmd",
}
# group -> (name, module, function): a command added to a group from another module
GROUP_COMMANDS: dict[str, tuple[str, str, str]] = {"local": ("reply", "cli.replies_cmd", "reply")}


def build(only: str | None = None) -> typer.Typer:
    """The command tree: every command, or only the one named ``only``."""
    root = typer.Typer(
        name="mailstep",
        help="Self-hosted serverless email: sequences, broadcasts, SES. Runs locally with no AWS account.",
        no_args_is_help=True,
        add_completion=False,
    )
    # A callback keeps the tree a group when it holds one command (typer runs a lone command as
    # the program itself, which would read the command's name as its first argument).
    root.callback()(_group)
    for name, (module, function) in COMMANDS.items():
        if only in (None, name):
            command = getattr(importlib.import_module(module), function)
            root.command(name, help=command.__doc__)(command)
    for name, module in GROUPS.items():
        if only in (None, name):
            group: Any = importlib.import_module(module).app
            extra, extra_module, function = GROUP_COMMANDS.get(name, ("", "", ""))
            if extra and all(c.name != extra for c in group.registered_commands):
                command = getattr(importlib.import_module(extra_module), function)
                group.command(extra, help=command.__doc__)(command)
            root.add_typer(group, name=name)
    return root


def _group() -> None:
    """Self-hosted serverless email: sequences, broadcasts, SES. Runs locally with no AWS account."""


def named(argv: list[str]) -> str | None:
    """The command ``argv`` names (its first word), or None: no word, or not a command."""
    first = next((word for word in argv if not word.startswith("-")), None)
    return first if first in COMMANDS or first in GROUPS else None


def main() -> None:
    """The console script: the tree of the command named, run on ``sys.argv``."""
    build(named(sys.argv[1:]))()


def __getattr__(name: str) -> Any:
    if name == "app":  # the whole tree, built when first asked for
        globals()["app"] = tree = build()
        return tree
    raise AttributeError(name)


if __name__ == "__main__":
    main()
