"""Validated models for everything that enters mailstep from outside.

Rules (documented in docs/data-model.md):
- Emails: surrounding whitespace trimmed, the domain lower-cased (IDNA 2008-encoded with the
  UTS 46 mapping when it is not ASCII; refused when it cannot be), the local part kept as
  written. ``#``, spaces and control characters are rejected, so an email can never forge
  another key.
- Tags, sequence ids and event types: ``[a-z0-9][a-z0-9_.-]*``, at most 64 characters
  (:data:`Name`, :data:`Tag`, :data:`EventType`). Every pattern matches the whole value
  (``fullmatch``): a trailing newline is refused like any other character.
- Template keys: ``[a-z0-9][a-z0-9_-]*`` parts joined by ``/``, at most 128 characters
  (:data:`TemplateKey`).
- Attributes: at most 50 keys named ``[A-Za-z_][A-Za-z0-9_]*`` (<= 64 chars, reserved names
  rejected), nested at most 3 levels, strings at most 1000 characters, 8 KiB in all
  (:data:`AttributeName` for one name).

Each pattern is defined once, here; models use the ``Annotated`` types, other code the
``is_*`` predicates or ``validate_*`` functions. None of them lets a ``#`` through, so no
value can forge a DynamoDB key.
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal, DecimalException
from functools import partial
from typing import Annotated, Any, Literal

import idna
from boto3.dynamodb.types import DYNAMODB_CONTEXT
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)
from pydantic import ValidationError as PydanticValidationError

from shared.core.errors import FieldProblem, InvalidInput

# Every pattern matches a whole string (``fullmatch``, never ``match``: ``$`` also matches before
# a final newline, and "vip\n" would pass as a tag).
NAME_RE = re.compile(r"[a-z0-9][a-z0-9_.-]*")
NAME_MAX = 64
ATTR_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ATTR_KEY_MAX = 64
TEMPLATE_KEY_RE = re.compile(r"[a-z0-9][a-z0-9_-]*(/[a-z0-9][a-z0-9_-]*)*")
TEMPLATE_KEY_MAX = 128
EVENT_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@/+=-]*")
LOCAL_PART_RE = re.compile(r"[A-Za-z0-9.!$%&'*+/=?^_`{|}~-]+")
DOMAIN_LABEL_RE = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")

MAX_TAGS_PER_SUBSCRIBER = 50
# The path of marketing mail's hidden link (on the deployment's public URL): the layout renders it
# as an anchor no person sees (shared.sending.rendering), a click on it is a machine's
# (shared.engagement.machine).
HIDDEN_LINK_PATH = "/l/hidden"
MAX_TAGS_PER_EVENT = 50
MAX_ATTRIBUTES = 50
MAX_ATTRIBUTE_DEPTH = 3
MAX_ATTRIBUTE_STRING = 1000
MAX_ATTRIBUTES_BYTES = 8 * 1024
MAX_DATA_DEPTH = 5
MAX_DATA_BYTES = 16 * 1024
MAX_FIRST_NAME = 100
MAX_BATCH = 100

# Names the templates and the profile use themselves: an attribute may not shadow them.
RESERVED_ATTRIBUTES = frozenset(
    {
        "email",
        "first_name",
        "tags",
        "status",
        "suppressed",
        "created_at",
        "updated_at",
        "version",
        "subscriber",
        "unsubscribe_url",
        "data",
        "event",
        "now",
        "pk",
        "sk",
        "ttl",
    }
)

SUBSCRIBED = "subscribed"
UNSUBSCRIBED = "unsubscribed"
SUBSCRIBE_EVENT = "subscriber.subscribed"
UNSUBSCRIBE_EVENT = "subscriber.unsubscribed"


def normalise_email(raw: str) -> str:
    """Return the canonical form of an email address or raise ValueError naming the problem."""
    if not isinstance(raw, str):
        raise ValueError("must be a string")
    value = raw.strip()
    if not value:
        raise ValueError("must not be empty")
    if len(value) > 254:
        raise ValueError("must be at most 254 characters")
    if CONTROL_RE.search(value) or " " in value:
        raise ValueError("must not contain spaces or control characters")
    if "#" in value:
        raise ValueError("must not contain '#'")
    if value.count("@") != 1:
        raise ValueError("must contain exactly one '@'")
    local, domain = value.split("@")
    if not local or len(local) > 64 or not LOCAL_PART_RE.fullmatch(local):
        raise ValueError("has an invalid local part")
    if local.startswith(".") or local.endswith(".") or ".." in local:
        raise ValueError("has an invalid local part (dots)")
    domain = domain.lower()
    if not domain.isascii():
        # IDNA 2008 with the UTS 46 mapping browsers use (non-transitional: "straße.de" stays
        # its own domain, xn--strae-oqa.de; Python's "idna" codec, IDNA 2003, folds it to
        # strasse.de, another domain). What IDNA 2008 cannot encode is refused, never guessed.
        try:
            domain = idna.encode(domain, uts46=True).decode("ascii")
        except (idna.IDNAError, UnicodeError) as exc:
            raise ValueError(f"has a domain IDNA 2008 cannot encode ({exc})") from None
    labels = domain.split(".")
    if len(labels) < 2 or not all(DOMAIN_LABEL_RE.fullmatch(label) for label in labels):
        raise ValueError("has an invalid domain")
    return f"{local}@{domain}"


def _fits(value: Any, pattern: re.Pattern[str], limit: int) -> bool:
    return isinstance(value, str) and len(value) <= limit and bool(pattern.fullmatch(value))


def _checked(value: Any, ok: bool, what: str, rule: str) -> str:
    """``value`` when ``ok``; else ValueError ``<what> '<value>' must <rule>``."""
    if not ok:
        raise ValueError(f"{what} {str(value)[:70]!r} must {rule}")
    return str(value)


_NAME_RULE = f"match [a-z0-9][a-z0-9_.-]* (at most {NAME_MAX} characters; no '#')"
_TEMPLATE_KEY_RULE = (
    f"look like 'folder/name' ([a-z0-9_-] parts joined by '/', at most {TEMPLATE_KEY_MAX} characters)"
)
_ATTR_KEY_RULE = f"match [A-Za-z_][A-Za-z0-9_]* (<= {ATTR_KEY_MAX} chars)"


def validate_name(value: Any, what: str = "name") -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string")
    return _checked(value, _fits(value, NAME_RE, NAME_MAX), what, _NAME_RULE)


def is_template_key(value: Any) -> bool:
    return _fits(value, TEMPLATE_KEY_RE, TEMPLATE_KEY_MAX)


def validate_template_key(value: Any, what: str = "template key") -> str:
    return _checked(value, is_template_key(value), what, _TEMPLATE_KEY_RULE)


def is_attribute_name(value: Any) -> bool:
    return _fits(value, ATTR_KEY_RE, ATTR_KEY_MAX)


def validate_attribute_name(value: Any, what: str = "attribute name") -> str:
    return _checked(value, is_attribute_name(value), what, _ATTR_KEY_RULE)


def listed(value: Any, limit: int, noun: str, suffix: str = "") -> list[Any] | tuple[Any, ...]:
    """``value`` itself when it is a list (or tuple) of at most ``limit`` ``noun``; else ValueError."""
    if not isinstance(value, list | tuple):
        raise ValueError(f"must be a list of {noun}")
    if len(value) > limit:
        raise ValueError(f"at most {limit} {noun}{suffix}")
    return value


def validate_tags(value: Any, limit: int, suffix: str = "") -> tuple[str, ...]:
    """At most ``limit`` tags, each a valid name; repeats dropped (the first kept)."""
    return tuple(dict.fromkeys(validate_name(v, "tag") for v in listed(value, limit, "tags", suffix)))


def clean_first_name(value: Any) -> str | None:
    """A first name as every input takes it: a string without control characters, trimmed,
    at most ``MAX_FIRST_NAME`` characters (None stays None)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError("must be a string")
    if CONTROL_RE.search(value):
        raise ValueError("must not contain control characters (CR, LF, ...)")
    name = value.strip()
    if len(name) > MAX_FIRST_NAME:
        raise ValueError(f"must be at most {MAX_FIRST_NAME} characters")
    return name


# The validated types (pydantic): a field typed with one of these is checked by the one rule.
Name = Annotated[str, BeforeValidator(validate_name)]
Tag = Annotated[str, BeforeValidator(partial(validate_name, what="tag"))]
EventType = Annotated[str, BeforeValidator(partial(validate_name, what="event type"))]
TemplateKey = Annotated[str, AfterValidator(validate_template_key)]
AttributeName = Annotated[str, AfterValidator(validate_attribute_name)]
Email = Annotated[str, BeforeValidator(normalise_email)]
FirstName = Annotated[str | None, BeforeValidator(clean_first_name)]
TopicId = Annotated[str, BeforeValidator(partial(validate_name, what="topic"))]
EventTags = Annotated[
    tuple[str, ...], BeforeValidator(partial(validate_tags, limit=MAX_TAGS_PER_EVENT, suffix=" per event"))
]


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether objects/arrays nest more than ``limit`` levels (``{}`` is one level), walked
    level by level so that no depth can exhaust the stack."""
    level, depth = [value], 0
    while any(isinstance(item, dict | list) for item in level):
        depth += 1
        if depth > limit:
            return True
        level = [
            child
            for item in level
            if isinstance(item, dict | list)
            for child in (item.values() if isinstance(item, dict) else item)
        ]
    return False


def _check_number(value: int | float, path: str) -> None:
    """A number the store can write, else a ValueError naming ``path``. Numbers go to
    DynamoDB through boto3's serializer, which refuses what DynamoDB cannot hold exactly: NaN
    and infinities, more than 38 significant digits (an integer's trailing zeros count), and
    magnitudes outside 1E-130 .. 9.9E+125."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{path}: {value} is not a number DynamoDB can store")
    try:
        number = DYNAMODB_CONTEXT.create_decimal(Decimal(repr(value) if isinstance(value, float) else value))
        if not number.is_zero() and not -130 <= number.adjusted() <= 125:
            raise DecimalException  # DynamoDB's own range is narrower than the serializer's
    except DecimalException:
        raise ValueError(
            f"{path}: DynamoDB stores numbers of at most 38 significant digits between 1E-130 and "
            "9.9E+125 in magnitude"
        ) from None


def _check_values(value: Any, limit: int, path: str) -> None:
    """Strings within ``limit``, string keys, numbers DynamoDB can store (NaN, infinities,
    more than 38 digits and magnitudes outside its range are refused), at any depth."""
    if isinstance(value, str):
        if len(value) > limit:
            raise ValueError(f"{path}: string longer than {limit} characters")
    elif isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"{path}: keys must be strings")
            _check_values(v, limit, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_values(v, limit, f"{path}[{i}]")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _check_number(value, path)


def validate_attributes(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError("must be an object")
    if len(value) > MAX_ATTRIBUTES:
        raise ValueError(f"at most {MAX_ATTRIBUTES} attributes are allowed (got {len(value)})")
    for key, item in value.items():
        validate_attribute_name(key)
        if key.lower() in RESERVED_ATTRIBUTES:
            raise ValueError(f"attribute name {key!r} is reserved")
        if _deeper_than(item, MAX_ATTRIBUTE_DEPTH):
            raise ValueError(f"attribute {key!r} is nested deeper than {MAX_ATTRIBUTE_DEPTH} levels")
        _check_values(item, MAX_ATTRIBUTE_STRING, key)
    if attributes_size(value) > MAX_ATTRIBUTES_BYTES:
        raise ValueError(f"attributes exceed {MAX_ATTRIBUTES_BYTES} bytes")
    return value


def attributes_size(value: dict[str, Any]) -> int:
    """The size that ``MAX_ATTRIBUTES_BYTES`` limits: the bytes of compact, ASCII-escaped JSON
    (an event's attributes and a subscriber's merged ones are measured alike)."""
    return len(json.dumps(value, separators=(",", ":"), default=str))


def validate_data(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError("must be an object")
    if _deeper_than(value, MAX_DATA_DEPTH):
        raise ValueError(f"is nested deeper than {MAX_DATA_DEPTH} levels")
    _check_values(value, MAX_DATA_BYTES, "data")
    if len(json.dumps(value, separators=(",", ":"))) > MAX_DATA_BYTES:
        raise ValueError(f"exceeds {MAX_DATA_BYTES} bytes")
    return value


class TagChange(BaseModel):
    """``tags`` in an event: a list adds tags; ``{"add": [...], "remove": [...]}`` does both."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    add: EventTags = ()
    remove: EventTags = ()

    @model_validator(mode="after")
    def _disjoint(self) -> TagChange:
        both = set(self.add) & set(self.remove)
        if both:
            raise ValueError(f"tags both added and removed: {sorted(both)}")
        return self


class InboundEvent(BaseModel):
    """One event POSTed to /v1/events (DESIGN.md section 4)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: EventType
    email: Email
    first_name: FirstName = None
    attributes: dict[str, Any] | None = None
    tags: TagChange | None = None
    data: dict[str, Any] | None = None
    id: str | None = None

    @field_validator("attributes", mode="before")
    @classmethod
    def _attributes(cls, value: Any) -> dict[str, Any] | None:
        return None if value is None else validate_attributes(value)

    @field_validator("data", mode="before")
    @classmethod
    def _data(cls, value: Any) -> dict[str, Any] | None:
        return None if value is None else validate_data(value)

    @field_validator("tags", mode="before")
    @classmethod
    def _tags(cls, value: Any) -> Any:
        if isinstance(value, list):
            return {"add": value}
        if value is not None and not isinstance(value, dict):
            raise ValueError("must be a list of tags or an object {add, remove}")
        return value

    @field_validator("id", mode="before")
    @classmethod
    def _id(cls, value: Any) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str) or not (1 <= len(value) <= 128) or not EVENT_ID_RE.fullmatch(value):
            raise ValueError("must be 1-128 characters of letters, digits and _.:@/+=-")
        return value


class EventBatch(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    events: list[InboundEvent] = Field(min_length=1, max_length=MAX_BATCH)
    _single: bool = PrivateAttr(default=False)  # the body was one event, not {"events": [...]}

    def field_of(self, index: int, name: str) -> str:
        """How a refusal names ``name`` of event ``index``: ``events[1].tags`` in a batch,
        ``tags`` in a body that was one event (as validation names them)."""
        return name if self._single else f"events[{index}].{name}"

    @model_validator(mode="after")
    def _unique_ids(self) -> EventBatch:
        seen: set[str] = set()
        for index, event in enumerate(self.events):
            if event.id is None:
                continue
            if event.id in seen:
                raise ValueError(f"events[{index}].id {event.id!r} is used twice in this batch")
            seen.add(event.id)
        return self


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "body"


def problems_from(exc: PydanticValidationError) -> list[FieldProblem]:
    problems = []
    for err in exc.errors(include_url=False):
        loc = tuple(p for p in err["loc"] if p not in ("function-after", "function-before"))
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = "unknown field"
        elif err["type"] == "missing":
            message = "field required"
        problems.append(FieldProblem(field=_loc(loc), message=message))
    return problems


def invalid_input(exc: PydanticValidationError, default_field: str) -> InvalidInput:
    """The InvalidInput of a failed validation: every problem, the first one in the message."""
    problems = problems_from(exc)
    first = problems[0] if problems else FieldProblem(default_field, "invalid")
    return InvalidInput(f"{first.field}: {first.message}", problems)


def parse_event_body(payload: Any) -> EventBatch:
    """Validate a decoded JSON body: one event, or ``{"events": [...]}``."""
    if not isinstance(payload, dict):
        raise InvalidInput("body must be a JSON object", [FieldProblem("body", "must be a JSON object")])
    try:
        if "events" in payload:
            if not isinstance(payload["events"], list):
                raise InvalidInput("events must be a list", [FieldProblem("events", "must be a list")])
            if not payload["events"]:
                raise InvalidInput("events must not be empty", [FieldProblem("events", "must not be empty")])
            if len(payload["events"]) > MAX_BATCH:
                raise InvalidInput(
                    f"a batch holds at most {MAX_BATCH} events",
                    [FieldProblem("events", f"at most {MAX_BATCH} events (got {len(payload['events'])})")],
                )
            return EventBatch.model_validate(payload)
        single = EventBatch(events=[InboundEvent.model_validate(payload)])
        single._single = True
        return single
    except PydanticValidationError as exc:
        raise invalid_input(exc, "body") from None


EventOutcomeStatus = Literal["created", "updated", "unchanged", "recorded"]
