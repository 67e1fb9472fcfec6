"""Broadcast models: the request (validated CLI input), the audience filter with its
``--where`` grammar, the stored record, and the two queue envelopes (DESIGN.md section 6b).

``--where`` grammar (one condition per option; all conditions must hold)::

    NAME = VALUE        plan=pro          equal (numbers numerically, true/false as booleans)
    NAME != VALUE       plan!=free        not equal (also true when the attribute is missing)
    NAME > VALUE        seats>3           also >=, <, <= (numbers numerically, else as text)
    NAME in A,B,...     country in de,fr  one of (a list attribute: any element)
    NAME not in A,B     country not in us also true when the attribute is missing

A subscriber without the attribute matches no condition except ``!=`` and ``not in``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator
from pydantic import ValidationError as PydanticValidationError

from shared.broadcasts.abtest import AbTest, Decision, Split
from shared.core.clock import iso
from shared.core.envelopes import decode, encode
from shared.core.errors import FieldProblem, InvalidInput
from shared.core.models import (
    TemplateKey,
    TopicId,
    invalid_input,
    is_attribute_name,
    listed,
    validate_name,
    validate_tags,
)
from shared.core.public import public_fields

SCHEDULED = "scheduled"
RESOLVING = "resolving"
SENDING = "sending"
DONE = "done"
CANCELLED = "cancelled"
FAILED = "failed"
# The reputation guardrail paused marketing sending (docs/reputation.md): nothing more is sent,
# nothing counted failed; `mailstep reputation resume` resumes it (a new round, send-once).
PAUSED_REPUTATION = "paused_reputation"
# SES said "not yet" (docs/broadcasts.md, "Held"): the sending identity is not verified yet
# (``identity_unverified``), the account's 24-hour quota is spent (``daily_quota``) or today's
# warm-up allowance is used (``warmup``). Nothing counted failed; it resumes by itself at
# ``resume_at`` (a new round, send-once), or earlier with `mailstep broadcast resume`.
HELD = "held"
HOLD_UNVERIFIED = "identity_unverified"
HOLD_DAILY_QUOTA = "daily_quota"
HOLD_WARMUP = "warmup"
STATUSES = (SCHEDULED, RESOLVING, SENDING, DONE, CANCELLED, FAILED, PAUSED_REPUTATION, HELD)
ACTIVE = frozenset({SCHEDULED, RESOLVING, SENDING})
STEP = "broadcast"  # the send-once key of a broadcast mail is (subscriber, broadcast id, STEP)
SKIP_REASONS = ("no_profile", "suppressed", "unsubscribed", "topic_opt_out", "cancelled")
MAX_FILTER_TAGS = 20
MAX_WHERE = 20
MAX_IN_VALUES = 50
MAX_ENGAGEMENT_SOURCES = 10  # broadcasts or sequences named by --opened, --clicked, --not-opened
MAX_ENGAGEMENT_DAYS = 3650

Op = Literal["=", "!=", ">", ">=", "<", "<=", "in", "not in"]
_CMP = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(!=|>=|<=|=|>|<)\s*(.*?)\s*$")
_IN = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s+(not\s+in|in)\s+(.+?)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Condition:
    name: str
    op: Op
    values: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> Condition:
        if not isinstance(text, str) or not text.strip():
            raise ValueError("a --where condition must not be empty")
        if len(text) > 1000:
            raise ValueError("a --where condition is at most 1000 characters")
        match = _IN.fullmatch(text)
        if match:
            name, op_text, raw = match.groups()
            op: Op = "not in" if op_text.lower().startswith("not") else "in"
            values = tuple(v.strip() for v in raw.split(","))
            if not all(values) or len(values) > MAX_IN_VALUES:
                raise ValueError(
                    f"{text!r}: 'in' takes 1-{MAX_IN_VALUES} non-empty values separated by commas"
                )
        else:
            match = _CMP.fullmatch(text)
            if not match:
                raise ValueError(
                    f"{text!r} is not a condition: use NAME=VALUE, NAME!=VALUE, NAME>N (>=, <, <=), "
                    "NAME in A,B or NAME not in A,B"
                )
            name, op, raw = match.group(1), match.group(2), match.group(3)  # type: ignore[assignment]
            if raw == "":
                raise ValueError(f"{text!r}: the value is missing")
            values = (raw,)
        if not is_attribute_name(name):
            raise ValueError(f"{text!r}: attribute names match [A-Za-z_][A-Za-z0-9_]* (<= 64 characters)")
        return cls(name=name, op=op, values=values)

    def __str__(self) -> str:
        if self.op in ("in", "not in"):
            return f"{self.name} {self.op} {','.join(self.values)}"
        return f"{self.name}{self.op}{self.values[0]}"

    def matches(self, attributes: dict[str, Any]) -> bool:
        if self.name not in attributes or attributes[self.name] is None:
            return self.op in ("!=", "not in")
        value = attributes[self.name]
        if self.op == "=":
            return _equal(value, self.values[0])
        if self.op == "!=":
            return not _equal(value, self.values[0])
        if self.op == "in":
            return any(_equal(value, v) for v in self.values)
        if self.op == "not in":
            return not any(_equal(value, v) for v in self.values)
        return _compare(value, self.op, self.values[0])


def _number(text: str) -> float | None:
    try:
        number = float(text)
    except ValueError:
        return None
    return number if number == number else None  # NaN is no number


def _equal(value: Any, raw: str) -> bool:
    if isinstance(value, list):
        return any(_equal(v, raw) for v in value)
    if isinstance(value, bool):
        return raw.lower() == str(value).lower()
    if isinstance(value, int | float):
        number = _number(raw)
        return number is not None and float(value) == number
    return isinstance(value, str) and value == raw


def _compare(value: Any, op: str, raw: str) -> bool:
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = _number(raw)
        if number is None:
            return False
        return _ordered(float(value), op, number)
    if isinstance(value, str):
        return _ordered(value, op, raw)
    return False


_Ordered = TypeVar("_Ordered", float, str)


def _ordered(left: _Ordered, op: str, right: _Ordered) -> bool:
    return {">": left > right, ">=": left >= right, "<": left < right, "<=": left <= right}[op]


def _conditions(value: Any) -> tuple[str, ...]:
    return tuple(str(Condition.parse(v)) for v in listed(value, MAX_WHERE, "conditions"))


def _optional_name(value: Any) -> str | None:
    return None if value is None else validate_name(value, "broadcast id")


def _sources(value: Any) -> tuple[str, ...]:
    """Broadcast or sequence ids (the ``source`` of their mails), repeats dropped."""
    listed_ = listed(value, MAX_ENGAGEMENT_SOURCES, "broadcast or sequence ids")
    return tuple(dict.fromkeys(validate_name(v, "broadcast or sequence id") for v in listed_))


FilterTags = Annotated[tuple[str, ...], BeforeValidator(partial(validate_tags, limit=MAX_FILTER_TAGS))]
Conditions = Annotated[tuple[str, ...], BeforeValidator(_conditions)]
Sources = Annotated[tuple[str, ...], BeforeValidator(_sources)]
Days = Annotated[int | None, Field(default=None, ge=1, le=MAX_ENGAGEMENT_DAYS, strict=True)]


class Audience(BaseModel):
    """Who receives a broadcast. No tag filter at all means every subscriber ("everyone").

    ``tags``: must carry all; ``any_tags``: at least one; ``exclude_tags``: none of them;
    ``where``: every attribute condition. Unsubscribed and suppressed subscribers are never
    part of the audience. ``topic`` (topics.yaml) names the kind of mail: a reader who does not
    receive it is left out (counted as skipped ``topic_opt_out``).

    Engagement (docs/engagement.md, "Audiences on engagement"; ``shared.broadcasts.engagement``):
    ``opened``/``clicked``: opened (clicked) a mail of each of these broadcasts or sequences;
    ``not_opened``: was sent each of these broadcasts and did not open it; ``engaged_within_days``
    / ``not_engaged_within_days``: opened or clicked any mail within the last N days, or not.
    People only, unless ``machine_opens`` (opens and clicks machines made count too).
    ``recipients_of``: only the recipients of that broadcast's last round (a resend)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tags: FilterTags = ()
    any_tags: FilterTags = ()
    exclude_tags: FilterTags = ()
    where: Conditions = ()
    topic: TopicId | None = None
    opened: Sources = ()
    clicked: Sources = ()
    not_opened: Sources = ()
    engaged_within_days: Days = None
    not_engaged_within_days: Days = None
    machine_opens: bool = False
    recipients_of: Annotated[str | None, BeforeValidator(_optional_name)] = None
    split: Split | None = None  # an A/B test's test groups or its rest (shared.broadcasts.abtest)

    @model_validator(mode="after")
    def _consistent(self) -> Audience:
        both = (set(self.tags) | set(self.any_tags)) & set(self.exclude_tags)
        if both:
            raise ValueError(f"tags both required and excluded: {sorted(both)} (the audience would be empty)")
        opened_and_not = set(self.opened) & set(self.not_opened)
        if opened_and_not:
            raise ValueError(
                f"both opened and not opened: {sorted(opened_and_not)} (the audience would be empty)"
            )
        within, not_within = self.engaged_within_days, self.not_engaged_within_days
        if within is not None and not_within is not None and not_within <= within:
            raise ValueError(
                f"engaged within {within} days and not within {not_within}: the audience would be empty"
            )
        if self.recipients_of is not None and (self.tags or self.any_tags):
            raise ValueError("recipients_of takes no tag filter (it reads that broadcast's recipients)")
        return self

    @property
    def engagement(self) -> bool:
        """Whether any engagement condition applies (``shared.broadcasts.engagement``)."""
        return bool(
            self.opened
            or self.clicked
            or self.not_opened
            or self.engaged_within_days is not None
            or self.not_engaged_within_days is not None
        )

    @property
    def conditions(self) -> tuple[Condition, ...]:
        return tuple(Condition.parse(w) for w in self.where)

    @property
    def everyone(self) -> bool:
        return not self.tags and not self.any_tags

    def matches(self, tags: frozenset[str] | set[str], attributes: dict[str, Any]) -> bool:
        if not set(self.tags) <= tags:
            return False
        if self.any_tags and not tags & set(self.any_tags):
            return False
        if tags & set(self.exclude_tags):
            return False
        return all(c.matches(attributes) for c in self.conditions)

    def describe(self) -> str:
        parts = []
        if self.tags:
            parts.append("all of " + ", ".join(self.tags))
        if self.any_tags:
            parts.append("any of " + ", ".join(self.any_tags))
        if self.exclude_tags:
            parts.append("none of " + ", ".join(self.exclude_tags))
        parts += list(self.where)
        parts += self._engagement_parts()
        if self.recipients_of:
            parts.insert(0, f"recipients of {self.recipients_of}")
        if self.split is not None:
            parts.append(self.split.describe())
        described = "; ".join(parts) or "everyone"
        return f"{described} (topic {self.topic})" if self.topic else described

    def _engagement_parts(self) -> list[str]:
        who = "" if self.machine_opens else " as a person"
        parts = [f"opened {s}{who}" for s in self.opened]
        parts += [f"clicked {s}{who}" for s in self.clicked]
        parts += [f"sent {s} and did not open it{who}" for s in self.not_opened]
        if self.engaged_within_days is not None:
            parts.append(f"engaged{who} within {self.engaged_within_days} days")
        if self.not_engaged_within_days is not None:
            parts.append(f"not engaged{who} within {self.not_engaged_within_days} days")
        if self.machine_opens and self.engagement:
            parts.append("machine opens and clicks count")
        return parts


class BroadcastRequest(BaseModel):
    """What ``mailstep broadcast send`` asks for (validated; errors name the option)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: Annotated[str, BeforeValidator(partial(validate_name, what="broadcast id"))]
    template: TemplateKey
    subject: str | None = Field(default=None, min_length=1, max_length=500)
    audience: Audience = Field(default_factory=Audience)
    at: datetime | None = None
    ab: AbTest | None = None  # an A/B test (docs/broadcasts.md, "A/B tests")

    @field_validator("at", mode="before")
    @classmethod
    def _at(cls, value: Any) -> datetime | None:
        if value is None or isinstance(value, datetime):
            moment = value
        else:
            try:
                moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
            except ValueError:
                raise ValueError(f"{value!r} is not an ISO 8601 time (e.g. 2026-12-01T09:00:00Z)") from None
        if moment is not None and moment.tzinfo is None:
            raise ValueError("needs a time zone (e.g. 2026-12-01T09:00:00Z or +01:00)")
        return moment.astimezone(UTC) if moment is not None else None

    def check_future(self, now: datetime) -> None:
        if self.at is not None and self.at <= now:
            message = f"{iso(self.at)} is not in the future (now {iso(now)})"
            raise InvalidInput(f"--at {message}", [FieldProblem("at", message)])

    def same_as(self, record: Broadcast) -> bool:
        return (
            record.template == self.template
            and record.subject == self.subject
            and record.audience == self.audience
            and record.at == (iso(self.at) if self.at else None)
            and record.ab == self.ab
        )


def parse_request(**values: Any) -> BroadcastRequest:
    """Validate CLI input; InvalidInput names the first bad option."""
    try:
        return BroadcastRequest.model_validate(values)
    except PydanticValidationError as exc:
        raise invalid_input(exc, "broadcast") from None


# Broadcast.public(): its keys, in order (``audience`` is the resolved audience's size).
_BROADCAST_KEYS = (
    "id status template subject audience_filter filters created_at at round resolved audience processed"
    " sent failed skipped finished_at error send_rate dead_lettered_batches dead_lettered_recipients"
    " hold_reason resume_at ab ab_decision"
)


@dataclass
class Broadcast:
    """The ``BROADCAST`` record: definition, status, resolution checkpoint and counters.

    Counters are changed with atomic ADD only: ``audience`` (recipients resolved),
    ``processed`` (recipients whose batch was counted), ``sent``, ``failed`` and
    ``skipped_<reason>``. ``round`` starts at 1 and grows on every resume."""

    id: str
    sk: str
    template: str
    subject: str | None
    audience: Audience
    status: str
    created_at: str
    at: str | None = None
    round: int = 1
    page: int = 0  # next page to resolve in this round
    cursor: str | None = None  # JSON resolution position of ``page``
    resolved: bool = False
    audience_size: int = 0
    processed: int = 0
    sent: int = 0
    failed: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    updated_at: str = ""
    finished_at: str | None = None
    error: str | None = None
    execution_arn: str | None = None
    send_rate: float = 1.0  # mails per second for all broadcast workers (set when it is sent)
    # Batches of this round that ended in the dead-letter queue (marked on their final
    # receive) and not counted since, and their recipients.
    dead_lettered_batches: int = 0
    dead_lettered_recipients: int = 0
    hold_reason: str | None = None  # while ``held``: why (HOLD_*)
    resume_at: str | None = None  # while ``held``: when it resumes by itself
    ab: AbTest | None = None  # the A/B test this broadcast's test groups are (abtest.py)
    ab_decision: Decision | None = None  # its winner, numbers and reason, once decided

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> Broadcast:
        return cls(
            id=item["id"],
            sk=item["SK"],
            template=item["template"],
            subject=item.get("subject"),
            audience=Audience.model_validate(json.loads(item.get("filters", "{}"))),
            status=item["status"],
            created_at=item.get("created_at", ""),
            at=item.get("at"),
            round=int(item.get("round", 1)),
            page=int(item.get("page", 0)),
            cursor=item.get("cursor"),
            resolved=bool(item.get("resolved", False)),
            audience_size=int(item.get("audience_size", 0)),
            processed=int(item.get("processed", 0)),
            sent=int(item.get("sent", 0)),
            failed=int(item.get("failed", 0)),
            skipped={r: int(item[f"skipped_{r}"]) for r in SKIP_REASONS if item.get(f"skipped_{r}")},
            updated_at=item.get("updated_at", ""),
            finished_at=item.get("finished_at"),
            error=item.get("error"),
            execution_arn=item.get("execution_arn"),
            send_rate=float(item.get("send_rate", 1.0)),
            dead_lettered_batches=int(item.get("dead_lettered_batches", 0)),
            dead_lettered_recipients=int(item.get("dead_lettered_recipients", 0)),
            hold_reason=item.get("hold_reason"),
            resume_at=item.get("resume_at"),
            ab=AbTest.model_validate_json(item["ab"]) if item.get("ab") else None,
            ab_decision=Decision.model_validate_json(item["ab_decision"])
            if item.get("ab_decision")
            else None,
        )

    @property
    def stalled(self) -> bool:
        """Still active, but every resolved recipient was counted or is in a batch that
        ended in the dead-letter queue: nothing moves until the DLQ is redriven."""
        return (
            self.status in ACTIVE
            and self.resolved
            and self.dead_lettered_batches > 0
            and self.processed + self.dead_lettered_recipients >= self.audience_size
        )

    @property
    def filters_json(self) -> str:
        return self.audience.model_dump_json()

    def public(self) -> dict[str, Any]:
        return public_fields(
            self,
            _BROADCAST_KEYS,
            audience_filter=self.audience.describe(),
            filters=self.audience.model_dump(mode="json"),
            audience=self.audience_size,
            skipped=dict(self.skipped),
            ab=self.ab.model_dump(mode="json") if self.ab else None,
            ab_decision=self.ab_decision.model_dump(mode="json") if self.ab_decision else None,
        )


# ----- queue envelopes (DESIGN.md section 6b) ------------------------------------------------
RESOLVE_CONTRACT = "broadcast.resolve"
BATCH_CONTRACT = "broadcast.batch"
MAX_BATCH_EMAILS = 100


class _PageMessage(BaseModel):
    """What names a page of one round of a broadcast, as both queues' messages carry it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    broadcast_id: str
    round: int = Field(ge=1)
    page: int = Field(ge=0)
    # A held broadcast's wake-up (put on the queue by the hold): the only message that resumes
    # a ``held`` record; ``wake_after_s``: how much longer it waits once delivered (a hold
    # longer than SQS's 15-minute delay travels as a chain of delayed messages).
    wake: bool = False
    wake_after_s: int = Field(default=0, ge=0)

    @field_validator("broadcast_id")
    @classmethod
    def _id(cls, value: str) -> str:
        return validate_name(value, "broadcast_id")


class ResolveMessage(_PageMessage):
    """Resolve page ``page`` of round ``round`` of a broadcast (the resolver's self-chain)."""


class BatchMessage(_PageMessage):
    """Send the broadcast to these subscribers (ids: emails). ``(round, page, index)`` names
    the batch; its outcomes are counted once."""

    index: int = Field(ge=0)
    emails: tuple[str, ...] = Field(min_length=1, max_length=MAX_BATCH_EMAILS)


def to_body(contract: str, message: BaseModel) -> str:
    return encode(contract, message)


def parse_resolve(body: str) -> ResolveMessage:
    return decode(body, RESOLVE_CONTRACT, ResolveMessage)


def parse_batch(body: str) -> BatchMessage:
    return decode(body, BATCH_CONTRACT, BatchMessage)
