"""Versioned message envelopes on mailstep's own queues (DESIGN.md section 6b).

A body is ``{"contract": "<name>", "version": 1, ...ids...}``. :func:`decode` refuses an
unknown contract or version, malformed JSON or a missing/invalid field with
:class:`InvalidInput` naming the problem, so a consumer fails only that record.
"""

from __future__ import annotations

import json
from typing import TypeVar

from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from shared.core.errors import FieldProblem, InvalidInput
from shared.core.models import invalid_input

VERSION = 1
M = TypeVar("M", bound=BaseModel)


def encode(contract: str, message: BaseModel, *, by_alias: bool = False) -> str:
    body = {"contract": contract, "version": VERSION, **message.model_dump(mode="json", by_alias=by_alias)}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def decode(body: str, contract: str, model: type[M]) -> M:
    try:
        payload = json.loads(body)
    except (TypeError, ValueError):
        raise InvalidInput("body is not JSON", [FieldProblem("body", "invalid JSON")]) from None
    if not isinstance(payload, dict):
        raise InvalidInput("body must be a JSON object", [FieldProblem("body", "must be an object")])
    got, version = payload.pop("contract", None), payload.pop("version", None)
    if got != contract or version != VERSION:
        raise InvalidInput(
            f"unsupported contract {got!r} version {version!r} (expected {contract!r} {VERSION})",
            [FieldProblem("contract", "unsupported")],
        )
    try:
        return model.model_validate(payload)
    except PydanticValidationError as exc:
        raise invalid_input(exc, "body") from None
