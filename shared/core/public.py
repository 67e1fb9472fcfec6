"""The public (JSON) view of a record: the keys operators and API callers see, in order."""

from __future__ import annotations

from typing import Any


def public_fields(record: object, keys: str, /, **values: Any) -> dict[str, Any]:
    """``{key: record.<key>}`` for each of the whitespace-separated ``keys``, in order; a key
    given in ``values`` (a renamed or derived field) takes that value instead of the attribute."""
    return {key: values[key] if key in values else getattr(record, key) for key in keys.split()}
