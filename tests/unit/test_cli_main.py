"""``cli.main``: a call builds only the command it names, and the tree it builds answers as the
whole one does."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from cli import main


def names(tree: object) -> set[str]:
    return set(get_command(tree).commands)  # type: ignore[arg-type,attr-defined]


def test_the_whole_tree_has_every_command_and_group() -> None:
    assert names(main.build()) == set(main.COMMANDS) | set(main.GROUPS)
    assert names(main.app) == set(main.COMMANDS) | set(main.GROUPS)


@pytest.mark.parametrize("name", sorted({*main.COMMANDS, *main.GROUPS}))
def test_a_named_command_alone_answers_its_help_as_in_the_whole_tree(name: str) -> None:
    alone = CliRunner().invoke(main.build(name), [name, "--help"])
    whole = CliRunner().invoke(main.build(), [name, "--help"])
    assert alone.exit_code == whole.exit_code == 0, alone.output
    assert alone.output == whole.output
    assert names(main.build(name)) == {name}


def test_the_word_that_names_the_command_is_the_first_that_is_not_an_option() -> None:
    assert main.named(["webhooks", "list", "--json"]) == "webhooks"
    assert main.named(["--help"]) is None
    assert main.named([]) is None
    assert main.named(["nosuch", "list"]) is None  # the whole tree answers "No such command"
    assert main.named(["send-test", "x"]) == "send-test"


def modules_after(script: str, wanted: str) -> list[str]:
    """The loaded modules whose names match the expression ``wanted`` (of ``m``) after ``script``
    runs in a fresh interpreter."""
    probe = f"import sys\n{script}\nprint(sorted(m for m in sys.modules if {wanted}))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return list(ast.literal_eval(out.strip().splitlines()[-1]))


def test_a_call_imports_only_its_command_s_module() -> None:
    script = (
        "sys.argv = ['mailstep', 'webhooks', '--help']\n"
        "from cli import main\n"
        "try:\n    main.main()\nexcept SystemExit:\n    pass"
    )
    assert modules_after(script, "m.startswith('cli.') and m.endswith('_cmd')") == ["cli.webhooks_cmd"]


def test_the_local_commands_read_the_runtime_s_state_without_importing_moto() -> None:
    """``mailstep local open`` and its kin read runtime.json and build SES events: no emulator."""
    script = "from cli import local_cmd, replies_cmd\nfrom local_aws import read_state, ses_events"
    assert modules_after(script, "m == 'moto' or m.startswith('local_aws.')") == ["local_aws.ses_events"]
