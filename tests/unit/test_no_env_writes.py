"""Nothing under ``cli/``, ``ops/``, ``local_aws/`` or the fronts writes the process environment,
but a Lambda's own process.

The operator commands, ``mailstep demo``, the bench and the local runtime reach AWS through
``shared.core.aws.ClientFactory`` values; the environment is read, never written. The one
documented exception is ``local_aws/bootstrap.py``: the process of a Lambda execution
environment, given the function's environment as Lambda does.

Given every module of ``cli/`` and ``ops/``, when its syntax tree is read, then no statement
assigns, deletes or updates an item of ``os.environ`` or calls ``os.putenv``/``os.unsetenv``
outside that module. The checker also runs on planted writes, so it is known to fail.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("cli", "ops", "local_aws", "console", "mcp_server", "demo")
# Module -> the one function of it that may write (None: anywhere in the module).
ALLOWED: dict[str, str | None] = {
    "local_aws/bootstrap.py": None,
}
MUTATING_METHODS = {"update", "pop", "popitem", "setdefault", "clear", "__setitem__", "__delitem__"}
OS_WRITERS = {"putenv", "unsetenv"}


class _Writes(ast.NodeVisitor):
    """Collects ``(line, enclosing function, what)`` of every write of the process environment."""

    def __init__(self) -> None:
        self.os_names: set[str] = set()  # names bound to the os module
        self.environ_names: set[str] = set()  # names bound to os.environ
        self.writer_names: set[str] = set()  # names bound to os.putenv / os.unsetenv
        self.functions: list[str] = []
        self.found: list[tuple[int, str | None, str]] = []

    # ----- what names the os module and its environment ----------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name == "os":
                self.os_names.add(alias.asname or "os")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module == "os" and node.level == 0:
            for alias in node.names:
                if alias.name == "environ":
                    self.environ_names.add(alias.asname or alias.name)
                elif alias.name in OS_WRITERS:
                    self.writer_names.add(alias.asname or alias.name)

    def _is_os(self, node: ast.expr) -> bool:
        return isinstance(node, ast.Name) and node.id in self.os_names

    def _is_environ(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.environ_names
        return isinstance(node, ast.Attribute) and node.attr == "environ" and self._is_os(node.value)

    # ----- where ---------------------------------------------------------------------------------
    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.functions.append(node.name)
        self.generic_visit(node)
        self.functions.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def _write(self, node: ast.AST, what: str) -> None:
        self.found.append((getattr(node, "lineno", 0), self.functions[0] if self.functions else None, what))

    # ----- writes --------------------------------------------------------------------------------
    def _target(self, target: ast.expr, verb: str) -> None:
        if isinstance(target, ast.Subscript) and self._is_environ(target.value):
            self._write(target, f"{verb} os.environ[...]")
        elif self._is_environ(target):
            self._write(target, f"{verb} os.environ")
        elif isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                self._target(element, verb)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._target(target, "assigns")
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._target(node.target, "assigns")
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self._target(node.target, "assigns")
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._target(target, "deletes")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute):
            if func.attr in MUTATING_METHODS and self._is_environ(func.value):
                self._write(node, f"os.environ.{func.attr}()")
            elif func.attr in OS_WRITERS and self._is_os(func.value):
                self._write(node, f"os.{func.attr}()")
        elif isinstance(func, ast.Name) and func.id in self.writer_names:
            self._write(node, f"{func.id}()")
        self.generic_visit(node)


def environment_writes(source: str) -> list[tuple[int, str | None, str]]:
    """Every write of the process environment in ``source``: (line, top-level function, what)."""
    visitor = _Writes()
    visitor.visit(ast.parse(source))
    return visitor.found


def violations(relative: str, source: str) -> list[str]:
    allowed = ALLOWED.get(relative, "")
    return [
        f"{relative}:{line} {what}" + (f" in {function}()" if function else "")
        for line, function, what in environment_writes(source)
        if not (relative in ALLOWED and (allowed is None or function == allowed))
    ]


def scanned_modules() -> list[Path]:
    return [path for top in SCANNED for path in sorted((ROOT / top).rglob("*.py"))]


def test_no_module_of_cli_or_ops_writes_the_process_environment_outside_the_named_places() -> None:
    problems = [
        p
        for path in scanned_modules()
        for p in violations(path.relative_to(ROOT).as_posix(), path.read_text())
    ]
    assert problems == []


def test_the_named_places_are_where_the_writes_are() -> None:
    # An allowance that no longer matches a write is stale: the docs would name the wrong place.
    for relative, function in ALLOWED.items():
        writes = environment_writes((ROOT / relative).read_text())
        assert writes, relative
        if function is not None:
            assert {found for _, found, _ in writes} == {function}, relative


@pytest.mark.parametrize(
    "source",
    [
        "import os\nos.environ['AWS_REGION'] = 'us-east-1'\n",
        "import os\ndef start():\n    os.environ.update({'A': 'b'})\n",
        "import os\nclass R:\n    def stop(self):\n        os.environ.pop('A', None)\n",
        "import os\nos.environ.setdefault('A', 'b')\n",
        "import os\nos.environ.clear()\n",
        "import os\ndel os.environ['A']\n",
        "import os\nos.environ['A'] += 'b'\n",
        "import os\nos.putenv('A', 'b')\n",
        "import os\nos.unsetenv('A')\n",
        "import os as _os\n_os.environ['A'] = 'b'\n",
        "from os import environ\nenviron['A'] = 'b'\n",
        "from os import environ as env\nenv.update(A='b')\n",
        "from os import putenv\nputenv('A', 'b')\n",
        "import os\nos.environ = {}\n",
    ],
)
def test_the_checker_catches_a_planted_write(source: str) -> None:
    for relative in ("local_aws/runtime.py", "local_aws/lambdas.py", "ops/targets.py", "cli/main.py"):
        assert violations(relative, source), (relative, source)


def test_the_checker_allows_reads_and_only_the_named_function() -> None:
    reads = (
        "import os\n"
        "region = os.environ.get('AWS_REGION')\n"
        "env = {**os.environ, 'A': 'b'}\n"
        "copy = dict(os.environ)\n"
        "other = {}\nother['A'] = os.environ['B']\nother.update(os.environ)\n"
    )
    assert violations("local_aws/runtime.py", reads) == []
    write = "import os\ndef helper(values):\n    os.environ.update(values)\n"
    assert violations("local_aws/runtime.py", write) == [
        "local_aws/runtime.py:3 os.environ.update() in helper()"
    ]
    assert violations("local_aws/bootstrap.py", write) == []
