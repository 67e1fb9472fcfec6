"""Line-numbered YAML: every mapping key, value and list item keeps its 1-based line.

The file is composed into nodes (``yaml.compose``) and walked once into plain data plus a map
from each path (``("steps", 2, "then")``) to its line, so a validator can name the file and the
line of any problem. Used for every YAML file mailstep reads: sequences and ``topics.yaml``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

Path_ = tuple[str | int, ...]
Label = Callable[[Path_], "str | None"]


@dataclass(frozen=True)
class Problem:
    """One validation error: file, 1-based line, a location label (or None) and message."""

    file: str
    line: int
    step: str | None
    message: str

    def __str__(self) -> str:
        where = f" {self.step}:" if self.step else ""
        return f"{self.file}:{self.line}:{where} {self.message}"


@dataclass
class Source:
    """Plain data of one file plus the line of every path in it."""

    file: str
    data: Any
    lines: dict[Path_, int] = field(default_factory=dict)

    def line(self, path: Path_) -> int:
        for end in range(len(path), -1, -1):
            if path[:end] in self.lines:
                return self.lines[path[:end]]
        return 1


def _no_label(path: Path_) -> str | None:
    return None


class Composer:
    """Builds plain data from a node tree, recording lines; ``label`` names a path in problems."""

    def __init__(self, file: str, label: Label = _no_label) -> None:
        self.file = file
        self.label = label
        self.lines: dict[Path_, int] = {}
        self.problems: list[Problem] = []

    def build(self, node: yaml.Node, path: Path_) -> Any:
        self.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            out: dict[str, Any] = {}
            for key_node, value_node in node.value:
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node)
                if key in out:
                    self.problems.append(
                        Problem(
                            self.file,
                            key_node.start_mark.line + 1,
                            self.label(path),
                            f"duplicate key {key!r}",
                        )
                    )
                self.lines[(*path, key)] = key_node.start_mark.line + 1
                out[key] = self.build(value_node, (*path, key))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
        return yaml.constructor.SafeConstructor().construct_object(node, deep=True)


def read_source(
    path: Path, display: str | None = None, label: Label = _no_label
) -> tuple[Source | None, list[Problem]]:
    """The file's data with lines, and its syntax problems (None when it cannot be read)."""
    file = display or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, [Problem(file, 1, None, f"cannot read the file: {exc.__class__.__name__}")]
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        return None, [Problem(file, line, None, f"YAML syntax error: {exc.problem or exc}")]
    if node is None:
        return None, [Problem(file, 1, None, "the file is empty")]
    composer = Composer(file, label)
    data = composer.build(node, ())
    return Source(file, data, composer.lines), composer.problems
