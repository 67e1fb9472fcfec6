"""Structural check of an ASL state machine (used on every generated machine in tests and
before a machine is deployed or created locally).

Checks: StartAt and every Next / Default / Choice / Catch target exist; each non-terminal
state has exactly one of Next and End; no state is unreachable from StartAt; every state
can reach a terminal state (no path that never ends); state names fit in 80 characters.
"""

from __future__ import annotations

from typing import Any

TERMINAL_TYPES = {"Succeed", "Fail"}
MAX_NAME = 80


def successors(state: dict[str, Any]) -> list[str]:
    out: list[str] = []
    if "Next" in state:
        out.append(state["Next"])
    if state.get("Type") == "Choice":
        out += [rule["Next"] for rule in state.get("Choices", []) if "Next" in rule]
        if "Default" in state:
            out.append(state["Default"])
    out += [c["Next"] for c in state.get("Catch", []) if "Next" in c]
    return out


def structural_problems(asl: dict[str, Any]) -> list[str]:
    states: dict[str, dict[str, Any]] = asl.get("States", {})
    problems: list[str] = []
    start = str(asl.get("StartAt"))
    if start not in states:
        problems.append(f"StartAt {start!r} is not a state")
    for name, state in states.items():
        problems += _state_problems(name, state, states)
    if problems:
        return problems
    reached = _reachable(start, states)
    problems += [f"{name}: unreachable from StartAt" for name in sorted(set(states) - reached)]
    ends = _ending(states)
    problems += [f"{name}: no path from here ever ends" for name in sorted(set(states) - ends)]
    return problems


def _state_problems(name: str, state: dict[str, Any], states: dict[str, dict[str, Any]]) -> list[str]:
    """What is wrong with one state on its own: its name, Next/End/Choices, its targets."""
    problems: list[str] = []
    kind = state.get("Type")
    if len(name) > MAX_NAME:
        problems.append(f"state name {name[:30]}... is longer than {MAX_NAME} characters")
    if kind == "Choice":
        if not state.get("Choices"):
            problems.append(f"{name}: a Choice needs at least one rule")
        if "Next" in state or "End" in state:
            problems.append(f"{name}: a Choice takes no Next or End")
    elif kind not in TERMINAL_TYPES and ("Next" in state) == bool(state.get("End")):
        problems.append(f"{name}: needs exactly one of Next and End")
    for target in successors(state):
        if target not in states:
            problems.append(f"{name}: target {target!r} does not exist")
    return problems


def _reachable(start: str, states: dict[str, dict[str, Any]]) -> set[str]:
    """The states a run starting at ``start`` can reach (``start`` included)."""
    reached: set[str] = set()
    todo = [start]
    while todo:
        name = todo.pop()
        if name in reached:
            continue
        reached.add(name)
        todo += successors(states[name])
    return reached


def _ending(states: dict[str, dict[str, Any]]) -> set[str]:
    """The states from which some path reaches a terminal state."""
    ends = {n for n, s in states.items() if s.get("Type") in TERMINAL_TYPES or s.get("End")}
    changed = True
    while changed:
        changed = False
        for name, state in states.items():
            if name not in ends and any(t in ends for t in successors(state)):
                ends.add(name)
                changed = True
    return ends
