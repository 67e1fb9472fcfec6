"""JSON that a client sent, parsed strictly: the one parser of every JSON body the API reads
(``/v1/events``, ``/v1/signup``).

Strict where the standard library is lenient: an object naming one key twice is refused
(``json.loads`` silently keeps the last value, while a form refuses a repeated field), and so
are ``NaN``/``Infinity`` (not JSON) and nesting too deep to parse. Every refusal is an
:class:`InvalidInput` naming its field (the repeated key, else ``body``).
"""

from __future__ import annotations

import json
from typing import Any

from shared.core.errors import FieldProblem, InvalidInput

MAX_KEY_SHOWN = 64  # a repeated key is quoted in the error up to this many characters


def loads_strict(text: str) -> Any:
    """``json.loads(text)``, refusing duplicate keys, NaN/Infinity and deep nesting (400s)."""
    try:
        return json.loads(text, parse_constant=_reject_constant, object_pairs_hook=unique_keys)
    except RecursionError:
        raise InvalidInput(
            "body nests objects or arrays too deeply", [FieldProblem("body", "nested too deeply")]
        ) from None
    except json.JSONDecodeError as exc:
        raise InvalidInput(
            f"body is not valid JSON (line {exc.lineno}, column {exc.colno})",
            [FieldProblem("body", "invalid JSON")],
        ) from None


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` of ``json.loads``: the object, or :class:`InvalidInput` naming a
    key given twice (for a parser with options of its own: pass it as the hook)."""
    found: dict[str, Any] = {}
    for name, value in pairs:
        if name in found:
            shown = name[:MAX_KEY_SHOWN]
            raise InvalidInput(
                f"{shown!r}: given more than once in one JSON object",
                [FieldProblem(shown, "given more than once")],
            )
        found[name] = value
    return found


def _reject_constant(name: str) -> Any:
    raise InvalidInput(
        f"body contains {name}, which is not valid JSON", [FieldProblem("body", "invalid JSON")]
    )
