"""Typed model of one sequence file (DESIGN.md section 5; format reference in docs/sequences.md).

A file is either a drip sequence (``trigger`` + ``steps``) or a one-off event mail
(``on: {event, send, subject}``). Every name that becomes part of a key (sequence id, tag,
event type) goes through :func:`shared.core.models.validate_name`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import partial
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from shared.core.models import AttributeName, EventType, Tag, TopicId, validate_name, validate_template_key
from shared.core.yaml_source import Path_

DURATION_RE = re.compile(r"^([1-9][0-9]*)(m|h|d|w)$")
UNIT_SECONDS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
MAX_WAIT_SECONDS = 365 * 86400  # a standard workflow runs for at most one year
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
HOUR_RE = re.compile(r"^([01][0-9]|2[0-3]):([0-5][0-9])$|^24:00$")
MAX_STEPS = 200


def parse_duration(value: Any) -> int:
    """``30m`` / ``12h`` / ``2d`` / ``1w`` -> seconds (at most one year)."""
    if not isinstance(value, str) or not DURATION_RE.fullmatch(value.strip()):
        raise ValueError(
            f"bad duration {str(value)[:30]!r}: use a whole number and m, h, d or w (30m, 12h, 2d, 1w)"
        )
    match = DURATION_RE.fullmatch(value.strip())
    assert match is not None
    seconds = int(match.group(1)) * UNIT_SECONDS[match.group(2)]
    if seconds > MAX_WAIT_SECONDS:
        raise ValueError(f"duration {value!r} is longer than a year (the longest a workflow runs)")
    return seconds


def template_key(value: Any) -> str:
    return validate_template_key(value)


# A template key as sequence files name it (checked before pydantic's own str check).
TemplateRef = Annotated[str, BeforeValidator(template_key)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ----- conditions ---------------------------------------------------------------------
class HasTag(Strict):
    tag: Tag


class AttributeCondition(Strict):
    """Exactly one of equals / in / exists / greater / less."""

    attribute: AttributeName
    equals: str | int | float | bool | None = None
    in_: list[str | int | float | bool] | None = Field(default=None, alias="in")
    exists: bool | None = None
    greater: int | float | None = None
    less: int | float | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _one_test(self) -> AttributeCondition:
        given = [n for n in ("equals", "in_", "exists", "greater", "less") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError("an attribute condition needs exactly one of equals, in, exists, greater, less")
        if self.in_ is not None and not self.in_:
            raise ValueError("'in' needs at least one value")
        return self

    @property
    def test(self) -> str:
        for name in ("equals", "in_", "exists", "greater", "less"):
            if getattr(self, name) is not None:
                return name.rstrip("_")
        raise AssertionError("validated above")


class Engagement(Strict):
    """opened / clicked / sent <template key>: needs live data, evaluated by the step function."""

    opened: TemplateRef | None = None
    clicked: TemplateRef | None = None
    sent: TemplateRef | None = None

    @model_validator(mode="after")
    def _one(self) -> Engagement:
        if sum(v is not None for v in (self.opened, self.clicked, self.sent)) != 1:
            raise ValueError("use exactly one of opened, clicked, sent")
        return self

    @property
    def kind(self) -> str:
        return "opened" if self.opened else "clicked" if self.clicked else "sent"

    @property
    def template(self) -> str:
        return self.opened or self.clicked or self.sent or ""


# A step's name (``name: welcome``): what a ``{opened: {step: welcome}}`` condition names.
StepName = Annotated[str, BeforeValidator(partial(validate_name, what="step name"))]


class StepRef(Strict):
    step: StepName


class StepEngagement(Strict):
    """opened / clicked {step: <name>}: a person opened (clicked) the mail that the named send
    step of this execution sent; machine opens and clicks do not count. Live data: evaluated
    by the step function."""

    opened: StepRef | None = None
    clicked: StepRef | None = None

    @model_validator(mode="after")
    def _one(self) -> StepEngagement:
        if (self.opened is None) == (self.clicked is None):
            raise ValueError("use exactly one of opened, clicked")
        return self

    @property
    def kind(self) -> str:
        return "opened" if self.opened else "clicked"

    @property
    def step(self) -> str:
        ref = self.opened or self.clicked
        assert ref is not None
        return ref.step


class All(Strict):
    all: list[Condition] = Field(min_length=1)


class Any_(Strict):  # noqa: N801 - 'any' is the YAML keyword
    any: list[Condition] = Field(min_length=1)


class Not(Strict):
    not_: Condition = Field(alias="not")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


Condition = HasTag | AttributeCondition | Engagement | StepEngagement | All | Any_ | Not
CONDITION_KEYS: dict[str, type[BaseModel]] = {
    "tag": HasTag,
    "attribute": AttributeCondition,
    "opened": Engagement,
    "clicked": Engagement,
    "sent": Engagement,
    "all": All,
    "any": Any_,
    "not": Not,
}


def parse_condition(value: Any) -> Condition:
    """Pick the condition type by its leading key (clear errors instead of a union dump)."""
    if isinstance(value, HasTag | AttributeCondition | Engagement | StepEngagement | All | Any_ | Not):
        return value
    if not isinstance(value, dict) or not value:
        raise ValueError("a condition is a mapping such as {tag: pro} or {attribute: plan, equals: pro}")
    kinds = [k for k in value if k in CONDITION_KEYS]
    if not kinds:
        raise ValueError(
            f"unknown condition {sorted(value)[0]!r}: "
            "use tag, attribute, opened, clicked, sent, all, any or not"
        )
    model = CONDITION_KEYS[kinds[0]]
    if kinds[0] in ("opened", "clicked") and isinstance(value[kinds[0]], dict):
        model = StepEngagement  # {opened: {step: welcome}}: the mail of a named step
    if model in (All, Any_):
        return model.model_validate(
            {
                kinds[0]: [parse_condition(c) for c in _as_list(value[kinds[0]])],
                **{k: v for k, v in value.items() if k != kinds[0]},
            }
        )
    if model is Not:
        return Not.model_validate(
            {"not": parse_condition(value["not"]), **{k: v for k, v in value.items() if k != "not"}}
        )
    condition: Condition = model.model_validate(value)  # type: ignore[assignment]
    return condition


def _as_list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError("all/any take a list of conditions")
    return value


def uses_live_data(condition: Condition) -> bool:
    """True when the condition needs more than the profile snapshot (engagement, send log)."""
    if isinstance(condition, Engagement | StepEngagement):
        return True
    if isinstance(condition, All):
        return any(uses_live_data(c) for c in condition.all)
    if isinstance(condition, Any_):
        return any(uses_live_data(c) for c in condition.any)
    if isinstance(condition, Not):
        return uses_live_data(condition.not_)
    return False


def step_references(condition: Condition, path: Path_ = ()) -> Iterator[tuple[Path_, StepEngagement]]:
    """Every ``{opened|clicked: {step: name}}`` in the condition, with its path below ``path``
    (``("all", 1, "opened", "step")``): what the validator checks against the step names."""
    if isinstance(condition, StepEngagement):
        yield (*path, condition.kind, "step"), condition
    elif isinstance(condition, All | Any_):
        word = "all" if isinstance(condition, All) else "any"
        for index, part in enumerate(condition.all if isinstance(condition, All) else condition.any):
            yield from step_references(part, (*path, word, index))
    elif isinstance(condition, Not):
        yield from step_references(condition.not_, (*path, "not"))


def condition_to_data(condition: Condition) -> dict[str, Any]:
    """Plain JSON for the step function's ``check`` payload (round-trips through parse_condition)."""
    if isinstance(condition, All):
        return {"all": [condition_to_data(c) for c in condition.all]}
    if isinstance(condition, Any_):
        return {"any": [condition_to_data(c) for c in condition.any]}
    if isinstance(condition, Not):
        return {"not": condition_to_data(condition.not_)}
    return condition.model_dump(by_alias=True, exclude_none=True)


# ----- steps --------------------------------------------------------------------------
class Variant(Strict):
    send: TemplateRef | None = None
    subject: str | None = None
    weight: int = Field(default=1, ge=1, le=100)

    @model_validator(mode="after")
    def _something(self) -> Variant:
        if self.send is None and self.subject is None:
            raise ValueError("a variant changes the template (send) or the subject, or both")
        return self


class SendStep(Strict):
    send: TemplateRef
    name: StepName | None = None
    subject: str | None = Field(default=None, min_length=1, max_length=300)
    variants: list[Variant] = Field(default_factory=list, max_length=9)
    weight: int = Field(default=1, ge=1, le=100)  # weight of the step's own template among variants

    def templates(self) -> list[str]:
        return [self.send] + [v.send for v in self.variants if v.send]


class WaitStep(Strict):
    wait: int
    name: StepName | None = None

    @field_validator("wait", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> int:
        return parse_duration(value)


def _one_or_more(what: str, problem: str) -> BeforeValidator:
    """One name or a list of names, each checked as ``what``; ``problem`` for anything else."""

    def names(value: Any) -> list[str]:
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list):
            raise ValueError(problem)
        return [validate_name(v, what) for v in values]

    return BeforeValidator(names)


TagNames = Annotated[list[str], _one_or_more("tag", "must be a tag or a list of tags")]
EventTypes = Annotated[
    list[str], _one_or_more("event type", "exit_on must be an event type or a list of event types")
]


class TagChangeStep(Strict):
    add: TagNames = Field(default_factory=list)
    remove: TagNames = Field(default_factory=list)

    @model_validator(mode="after")
    def _some(self) -> TagChangeStep:
        if not self.add and not self.remove:
            raise ValueError("tag needs add or remove")
        if set(self.add) & set(self.remove):
            raise ValueError(f"tags both added and removed: {sorted(set(self.add) & set(self.remove))}")
        return self


class TagStep(Strict):
    tag: TagChangeStep
    name: StepName | None = None


class ExitStep(Strict):
    exit: Literal[True] = True


class IfStep(Strict):
    if_: Condition = Field(alias="if")
    then: list[Step] = Field(default_factory=list)
    else_: list[Step] = Field(default_factory=list, alias="else")
    name: StepName | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("if_", mode="before")
    @classmethod
    def _condition(cls, value: Any) -> Condition:
        return parse_condition(value)


Step = Annotated[SendStep | WaitStep | IfStep | TagStep | ExitStep, "step"]
STEP_KEYS = {"send": SendStep, "wait": WaitStep, "if": IfStep, "tag": TagStep, "exit": ExitStep}


# ----- the file -----------------------------------------------------------------------
def trigger_filter(value: Any) -> Condition | None:
    """A trigger's (or one-off's) ``where``: tag and attribute conditions only."""
    if value is None:
        return None
    condition = parse_condition(value)
    if uses_live_data(condition):
        raise ValueError("a trigger filter may use tag and attribute conditions only")
    return condition


TriggerFilter = Annotated[Condition | None, BeforeValidator(trigger_filter)]


class Trigger(Strict):
    event: EventType
    where: TriggerFilter = None


class Sender(Strict):
    from_: str = Field(alias="from", min_length=3, max_length=320)
    reply_to: str | None = Field(default=None, min_length=3, max_length=320)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("from_", "reply_to")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is not None and ("@" not in value or any(c in value for c in "\r\n")):
            raise ValueError(f"{value[:70]!r} is not an email address")
        return value


class SendWindow(Strict):
    """Mail is only sent between ``start`` and ``end`` local time on ``days``.

    Local time is the subscriber's ``timezone`` attribute (an IANA zone) when valid, else
    ``timezone`` here.
    """

    days: list[str] = Field(default_factory=lambda: list(WEEKDAYS))
    start: str = "00:00"
    end: str = "24:00"
    timezone: str = "UTC"

    @field_validator("days", mode="before")
    @classmethod
    def _days(cls, value: Any) -> list[str]:
        if not isinstance(value, list) or not value:
            raise ValueError(f"days must be a non-empty list of {', '.join(WEEKDAYS)}")
        days = [str(v).lower()[:3] for v in value]
        bad = [v for v in value if str(v).lower()[:3] not in WEEKDAYS]
        if bad:
            raise ValueError(f"unknown day {bad[0]!r}: use {', '.join(WEEKDAYS)}")
        return sorted(set(days), key=WEEKDAYS.index)

    @field_validator("start", "end", mode="before")
    @classmethod
    def _hour(cls, value: Any) -> str:
        if isinstance(value, int) and 0 <= value <= 24:
            value = f"{value:02d}:00"
        if not isinstance(value, str) or not HOUR_RE.fullmatch(value):
            raise ValueError(f"bad time of day {str(value)[:20]!r}: use HH:MM (24h)")
        return value

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"unknown time zone {value[:60]!r} (use an IANA name such as Europe/Paris)"
            ) from None
        return value

    @model_validator(mode="after")
    def _order(self) -> SendWindow:
        if self.start >= self.end:
            raise ValueError(f"start {self.start} must be before end {self.end}")
        return self


class OneOff(Strict):
    """``on: {event, send, subject}``: one transactional mail per matching event, no drip."""

    event: EventType
    send: TemplateRef
    subject: str | None = Field(default=None, min_length=1, max_length=300)
    where: TriggerFilter = None


class Sequence(Strict):
    """One file of ``sequences/``. ``id`` is the file name (without .yaml)."""

    id: Annotated[str, BeforeValidator(partial(validate_name, what="sequence id"))]
    description: str | None = Field(default=None, max_length=500)
    trigger: Trigger | None = None
    on: OneOff | None = None
    exit_on: EventTypes = Field(default_factory=list)
    transactional: bool = False
    # ignore: enter once (re-triggers while active or after the end do nothing);
    # allow: enter again once the previous execution ended; restart: stop and start over.
    reentry: Literal["ignore", "allow", "restart"] = "ignore"
    sender: Sender | None = None
    # topics.yaml: a reader who opted out of it gets none of this sequence's mails (skipped
    # ``topic_opt_out``); transactional sequences take no topic.
    topic: TopicId | None = None
    timeout: int | None = None
    send_window: SendWindow | None = None
    steps: list[Step] = Field(default_factory=list)

    @field_validator("trigger", mode="before")
    @classmethod
    def _trigger(cls, value: Any) -> Any:
        return {"event": value} if isinstance(value, str) else value

    @field_validator("timeout", mode="before")
    @classmethod
    def _timeout(cls, value: Any) -> int | None:
        return None if value is None else parse_duration(value)

    @property
    def is_one_off(self) -> bool:
        return self.on is not None

    @property
    def trigger_event(self) -> str:
        if self.on is not None:
            return self.on.event
        assert self.trigger is not None
        return self.trigger.event

    @property
    def trigger_filter(self) -> Condition | None:
        return self.on.where if self.on is not None else self.trigger.where if self.trigger else None


All.model_rebuild()
Any_.model_rebuild()
Not.model_rebuild()
IfStep.model_rebuild()
