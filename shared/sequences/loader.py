"""Read sequence YAML files into :mod:`shared.sequences.model` objects, keeping line numbers.

The YAML is composed into nodes (``yaml.compose``) so every mapping key, value and list
item keeps its line; the same walk builds the typed steps one by one, so an error names
the file, the line and the step path (``steps[2].then[0]``) it belongs to.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from shared.core.errors import InvalidInput
from shared.core.yaml_source import Composer, Path_, Problem, Source
from shared.core.yaml_source import read_source as read_numbered
from shared.sequences.model import (
    MAX_STEPS,
    STEP_KEYS,
    ExitStep,
    IfStep,
    SendStep,
    Sequence,
    Step,
    TagStep,
    WaitStep,
    parse_condition,
)

TOP_KEYS = (
    "description",
    "trigger",
    "on",
    "exit_on",
    "transactional",
    "reentry",
    "sender",
    "topic",
    "timeout",
    "send_window",
    "steps",
)

_M = TypeVar("_M", bound=BaseModel)


class SequenceInvalid(InvalidInput):
    """One or more sequence files are invalid; ``problems`` lists them in file/line order."""

    def __init__(self, problems: list[Problem]) -> None:
        self.sequence_problems = sorted(problems, key=lambda p: (p.file, p.line, p.message))
        text = "\n".join(str(p) for p in self.sequence_problems)
        super().__init__(f"invalid sequence definition:\n{text}")


def step_label(path: Path_) -> str | None:
    """``("steps", 2, "then", 0)`` -> ``steps[2].then[0]`` (None outside of steps)."""
    if not path or path[0] != "steps" or len(path) < 2:
        return None
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("steps", "then", "else"):
            out += f".{part}" if out else part
        else:
            break
    return out


def _Composer(file: str) -> Composer:  # noqa: N802 - the tests build sources with it
    return Composer(file, step_label)


def read_source(path: Path, display: str | None = None) -> tuple[Source | None, list[Problem]]:
    return read_numbered(path, display, step_label)


class _Parser:
    def __init__(self, source: Source) -> None:
        self.src = source
        self.problems: list[Problem] = []

    def problem(self, path: Path_, message: str) -> None:
        self.problems.append(Problem(self.src.file, self.src.line(path), step_label(path), message))

    def model(self, cls: type[_M], data: Any, path: Path_) -> _M | None:
        try:
            return cls.model_validate(data)
        except PydanticValidationError as exc:
            self.pydantic(exc, path)
            return None
        except ValueError as exc:
            self.problem(path, str(exc))
            return None

    def pydantic(self, exc: PydanticValidationError, path: Path_) -> None:
        err = exc.errors(include_url=False)[0]  # one clear error per place
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        loc = tuple(str(p).rstrip("_") if isinstance(p, str) else p for p in loc)
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = f"unknown key {loc[-1]!r}" if loc else "unknown key"
        elif err["type"] == "missing":
            message = f"missing key {loc[-1]!r}" if loc else "missing key"
        elif loc and not isinstance(loc[-1], int):
            message = f"{loc[-1]}: {message}"
        self.problem((*path, *loc), message)

    def steps(self, data: Any, path: Path_) -> list[Step]:
        if data is None:
            data = []
        if not isinstance(data, list):
            self.problem(path, f"{path[-1]} must be a list of steps")
            return []
        if len(data) > MAX_STEPS:
            self.problem(path, f"at most {MAX_STEPS} steps per list")
        out: list[Step] = []
        for index, item in enumerate(data):
            step = self.step(item, (*path, index))
            if step is not None:
                out.append(step)
        return out

    def step(self, item: Any, path: Path_) -> Step | None:
        if item == "exit":
            return ExitStep()
        if not isinstance(item, dict) or not item:
            self.problem(path, "a step is a mapping: send, wait, if, tag or exit")
            return None
        kinds = [k for k in item if k in STEP_KEYS]
        if not kinds:
            self.problem(
                (*path, next(iter(item))),
                f"unknown step {next(iter(item))!r}: use send, wait, if, tag or exit",
            )
            return None
        if len(kinds) > 1:
            self.problem(
                (*path, kinds[1]), f"one step holds one of send, wait, if, tag, exit (found {kinds})"
            )
            return None
        kind = kinds[0]
        if kind == "if":
            extra = [k for k in item if k not in ("if", "then", "else", "name")]
            if extra:
                self.problem((*path, extra[0]), f"unknown key {extra[0]!r}")
                return None
            try:
                condition = parse_condition(item["if"])
            except PydanticValidationError as exc:
                self.pydantic(exc, (*path, "if"))
                return None
            except ValueError as exc:
                self.problem((*path, "if"), str(exc))
                return None
            then = self.steps(item.get("then"), (*path, "then"))
            other = self.steps(item.get("else"), (*path, "else"))
            if not then and not other and not self.problems:
                self.problem(path, "if needs steps in then or else")
            named = {"name": item["name"]} if "name" in item else {}
            return self.model(IfStep, {"if": condition, "then": then, "else": other, **named}, path)
        if kind == "exit":
            return self.model(ExitStep, item, path)
        if kind == "tag":
            return self.model(TagStep, item, path)
        if kind == "wait":
            return self.model(WaitStep, item, path)
        return self.model(SendStep, item, path)

    def sequence(self, sequence_id: str) -> Sequence | None:
        data = self.src.data
        if not isinstance(data, dict):
            self.problem((), "a sequence file is a mapping (trigger, steps, ...)")
            return None
        for key in data:
            if key not in TOP_KEYS:
                self.problem((key,), f"unknown key {key!r} (allowed: {', '.join(TOP_KEYS)})")
        if self.problems:
            return None
        if "on" in data:
            both = [
                k
                for k in ("trigger", "steps", "exit_on", "reentry", "timeout", "send_window", "topic")
                if k in data
            ]
            if both:
                self.problem((both[0],), f"a one-off event mail ('on') takes no {both[0]!r}")
                return None
            fields = {k: v for k, v in data.items() if k != "steps"}
            return self.model(Sequence, {"id": sequence_id, "transactional": True, **fields}, ())
        if "trigger" not in data:
            self.problem((), "missing key 'trigger' (or 'on' for a one-off event mail)")
            return None
        if not data.get("steps"):
            self.problem(("steps",) if "steps" in data else (), "steps must not be empty")
            return None
        steps = self.steps(data["steps"], ("steps",))
        if self.problems:
            return None
        top = {k: v for k, v in data.items() if k != "steps"}
        return self.model(Sequence, {"id": sequence_id, **top, "steps": steps}, ())


def parse_source(source: Source, sequence_id: str) -> tuple[Sequence | None, list[Problem]]:
    parser = _Parser(source)
    try:
        sequence = parser.sequence(sequence_id)
    except PydanticValidationError as exc:  # a nested model built from parsed parts
        parser.pydantic(exc, ())
        sequence = None
    return (sequence if not parser.problems else None), parser.problems


def sequence_id_of(path: Path) -> str:
    return path.name.rsplit(".", 1)[0]


def load_file(path: Path, display: str | None = None) -> tuple[Sequence | None, Source | None, list[Problem]]:
    """Parse one file (syntax and structure only; see validate.py for cross-file checks)."""
    source, problems = read_source(path, display)
    if source is None or problems:
        return None, source, problems
    file = display or str(path)
    try:
        from shared.core.models import validate_name

        validate_name(sequence_id_of(path), "sequence id (the file name)")
    except ValueError as exc:
        return None, source, [Problem(file, 1, None, str(exc))]
    sequence, problems = parse_source(source, sequence_id_of(path))
    return sequence, source, problems
