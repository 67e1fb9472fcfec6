"""Subscriber administration: what ``mailstep subscribers ...`` and the MCP tools do.

Every write goes through :class:`shared.store.subscribers.SubscriberStore` (profile and TAG# partners
in one transaction); stopping sequences goes through the sequence engine, exactly as the
unsubscribe pages and suppression do:
- ``unsubscribe`` stops the subscriber's marketing executions (transactional ones go on);
- ``delete`` (GDPR erase) stops every execution, then erases every item of the subscriber
  in both tables, partners included (``SubscriberStore.erase``).

Listing pages through the table with an opaque cursor (the key of the last subscriber
shown, base64url JSON): ``list(limit=50)`` then ``list(limit=50, cursor=page.cursor)``.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError as PydanticValidationError

from shared.core.aws import ClientFactory
from shared.core.errors import FieldProblem, InvalidInput, NotFound, SubscriberNotFound
from shared.core.models import (
    SUBSCRIBED,
    UNSUBSCRIBED,
    InboundEvent,
    normalise_email,
    problems_from,
    validate_attributes,
    validate_name,
)
from shared.core.observability import logger, redact_email
from shared.core.settings import Settings
from shared.engagement.suppression import Suppression, Suppressions
from shared.sequences.engine import SequenceEngine
from shared.sequences.sfn import StepFunctions
from shared.sequences.validate import Catalog
from shared.store import keys
from shared.store.subscribers import Change, EraseReport, Execution, Profile, SubscriberStore

if TYPE_CHECKING:
    from mypy_boto3_stepfunctions.literals import ExecutionStatusType

    from ops.targets import Target

STATUSES = (SUBSCRIBED, UNSUBSCRIBED)
MAX_PAGE = 1000


@dataclass(frozen=True)
class SubscriberDetail:
    profile: Profile
    executions: tuple[Execution, ...] = ()
    suppression: Suppression | None = None

    def public(self) -> dict[str, Any]:
        return {
            **self.profile.public(),
            "executions": [
                {
                    "sequence": e.sequence_id,
                    "execution_arn": e.execution_arn,
                    "started_at": e.started_at,
                    "transactional": e.transactional,
                }
                for e in self.executions
            ],
            "suppression": self.suppression.public() if self.suppression else None,
        }


@dataclass(frozen=True)
class Page:
    subscribers: tuple[Profile, ...]
    cursor: str | None  # pass back to get the next page; None: this was the last page

    def public(self) -> dict[str, Any]:
        return {"subscribers": [p.public() for p in self.subscribers], "cursor": self.cursor}


@dataclass(frozen=True)
class WriteResult:
    email: str
    changed: bool
    profile: Profile | None
    tags_added: tuple[str, ...] = ()
    tags_removed: tuple[str, ...] = ()
    sequences_stopped: tuple[str, ...] = ()

    @classmethod
    def of(cls, email: str, change: Change, stopped: Iterable[str] = ()) -> WriteResult:
        return cls(
            email, change.changed, change.profile, change.tags_added, change.tags_removed, tuple(stopped)
        )

    def public(self) -> dict[str, Any]:
        return {
            "email": self.email,
            "changed": self.changed,
            "tags_added": list(self.tags_added),
            "tags_removed": list(self.tags_removed),
            "sequences_stopped": list(self.sequences_stopped),
            "subscriber": self.profile.public() if self.profile else None,
        }


@dataclass(frozen=True)
class DeleteResult:
    email: str
    main_items: int
    event_items: int
    sequences_stopped: tuple[str, ...] = ()

    def public(self) -> dict[str, Any]:
        return {
            "email": self.email,
            "deleted_items": self.main_items,
            "deleted_events": self.event_items,
            "sequences_stopped": list(self.sequences_stopped),
        }


@dataclass(frozen=True)
class Update:
    """A validated change: tags to add/remove, attributes to set (None deletes), first name."""

    add_tags: tuple[str, ...] = ()
    remove_tags: tuple[str, ...] = ()
    attributes: Mapping[str, Any] = field(default_factory=dict)
    first_name: str | None = None

    @property
    def empty(self) -> bool:
        return not (self.add_tags or self.remove_tags or self.attributes or self.first_name is not None)


def email_arg(raw: str) -> str:
    """A command-line/tool email, normalised like every other entry point."""
    try:
        return normalise_email(raw)
    except ValueError as exc:
        raise InvalidInput(f"email {exc}", [FieldProblem("email", str(exc))]) from None


def tag_arg(raw: str) -> str:
    try:
        return validate_name(raw, "tag")
    except ValueError as exc:
        raise InvalidInput(str(exc), [FieldProblem("tag", str(exc))]) from None


def status_arg(raw: str | None) -> str | None:
    if raw is not None and raw not in STATUSES:
        raise InvalidInput(f"status must be one of {', '.join(STATUSES)}", [FieldProblem("status", raw)])
    return raw


def make_update(
    add_tags: Iterable[str] = (),
    remove_tags: Iterable[str] = (),
    attributes: Mapping[str, Any] | None = None,
    first_name: str | None = None,
) -> Update:
    """Validate a change like an event's: tag names, attribute names and values (a ``None``
    value deletes the attribute), first name."""
    add = [tag_arg(t) for t in add_tags]
    remove = [tag_arg(t) for t in remove_tags]
    both = set(add) & set(remove)
    if both:
        raise InvalidInput(f"tags both added and removed: {sorted(both)}", [FieldProblem("tag", str(both))])
    attrs = dict(attributes or {})
    try:
        validate_attributes({k: "" if v is None else v for k, v in attrs.items()})  # deletions: names only
    except ValueError as exc:
        raise InvalidInput(f"attributes: {exc}", [FieldProblem("attributes", str(exc))]) from None
    if first_name is not None:
        try:
            first_name = InboundEvent.model_validate(
                {"type": "subscriber.updated", "email": "x@example.com", "first_name": first_name}
            ).first_name
        except PydanticValidationError as exc:
            problems = problems_from(exc)
            raise InvalidInput(f"first_name: {problems[0].message}", problems) from None
    return Update(tuple(dict.fromkeys(add)), tuple(dict.fromkeys(remove)), attrs, first_name)


def parse_update(
    tags: Iterable[str] = (), attributes: Iterable[str] = (), first_name: str | None = None
) -> Update:
    """Command-line form: ``tags`` like ``+pro``/``-trial`` (a bare name adds); ``attributes``
    like ``plan=pro``: the value is JSON when it parses as a JSON number, boolean, list or
    object (``seats=3``, ``beta=true``), else the string as written; ``key=`` deletes it."""
    add: list[str] = []
    remove: list[str] = []
    for raw in tags:
        if raw.startswith("-"):
            remove.append(raw[1:])
        else:
            add.append(raw.removeprefix("+"))
    attrs: dict[str, Any] = {}
    for raw in attributes:
        name, sep, value = raw.partition("=")
        if not sep:
            raise InvalidInput(f"attribute {raw!r} must be key=value", [FieldProblem("attr", raw)])
        attrs[name] = None if value == "" else _attribute_value(value)
    return make_update(add, remove, attrs, first_name)


def _attribute_value(value: str) -> Any:
    try:
        parsed = json.loads(value)
    except ValueError:
        return value
    return parsed if isinstance(parsed, bool | int | float | list | dict) else value


def encode_cursor(kind: str, raw_key: Mapping[str, Any]) -> str:
    payload = json.dumps(
        {"k": kind, "pk": raw_key["PK"]["S"], "sk": raw_key["SK"]["S"]}, separators=(",", ":")
    )
    return base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")


def decode_cursor(cursor: str, kind: str) -> dict[str, Any]:
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if data["k"] != kind or not isinstance(data["pk"], str) or not isinstance(data["sk"], str):
            raise ValueError("cursor of another listing")
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise InvalidInput(
            "cursor is not one this listing returned", [FieldProblem("cursor", "invalid")]
        ) from None
    return {"PK": {"S": data["pk"]}, "SK": {"S": data["sk"]}}


class SubscriberAdmin:
    # Seconds an erase waits for in-flight sequence steps before its second sweep: a step's
    # send, then its SES events through the engagement queue (batching window 2 s).
    erase_grace_s: float = 6.0

    def __init__(self, store: SubscriberStore, engine: SequenceEngine | None = None) -> None:
        self.store = store
        # Stopping needs no catalog: the EXEC pairs name the executions.
        self.engine = engine or SequenceEngine(catalog=Catalog(), arn_prefix="", store=store)
        self.suppressions = Suppressions(store, self.engine)

    @classmethod
    def from_settings(cls, settings: Settings, aws: ClientFactory | None = None) -> SubscriberAdmin:
        """Wired to ``settings`` through ``aws`` (by default the environment's clients)."""
        aws = aws or ClientFactory()
        store = SubscriberStore(
            settings.table_name, settings.events_table_name, client=aws.client("dynamodb")
        )
        engine = SequenceEngine(
            catalog=Catalog(),
            arn_prefix=settings.state_machine_arn_prefix,
            store=store,
            sfn=StepFunctions(aws.client("stepfunctions")),
        )
        return cls(store, engine)

    @classmethod
    def of(cls, target: Target) -> SubscriberAdmin:
        return cls.from_settings(target.settings, target.aws)

    # ----- reads ---------------------------------------------------------------------------
    def get(self, email: str) -> SubscriberDetail:
        email = email_arg(email)
        profile = self.store.require_profile(email)
        return SubscriberDetail(
            profile=profile,
            executions=tuple(self.store.list_executions(email)),
            suppression=self.suppressions.get(email),
        )

    def list(
        self,
        *,
        tag: str | None = None,
        status: str | None = None,
        prefix: str = "",
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page:
        """One page of subscribers, filtered by tag and/or status; without a tag, in address
        order, optionally only addresses starting with ``prefix`` (case-blind)."""
        if not 1 <= limit <= MAX_PAGE:
            raise InvalidInput(f"limit must be 1..{MAX_PAGE}", [FieldProblem("limit", str(limit))])
        status = status_arg(status)
        kind = f"tag:{tag_arg(tag)}" if tag else f"dir:{prefix.lower()}"
        start = decode_cursor(cursor, kind) if cursor else None
        found: list[Profile] = []
        walker = iter(self._walk(tag, status, start, prefix=prefix, chunk=limit + 1))
        for profile, raw_key in walker:
            found.append(profile)
            if len(found) == limit:
                # Only say "more" when there is more: one further (read with this page).
                more = next(walker, None) is not None
                return Page(tuple(found), encode_cursor(kind, raw_key) if more else None)
        return Page(tuple(found), None)

    def iter(self, *, tag: str | None = None, status: str | None = None) -> Iterator[Profile]:
        """Every matching subscriber, streamed page by page (export). Without a tag, a Scan of
        the profiles: an export reads the whole table anyway, and reaches every profile, one
        written before the directory existed too (docs/deploy.md, upgrading)."""
        status = status_arg(status)
        if tag is None:
            for profile, _ in self.store.iter_profiles(status=status):
                yield profile
            return
        for profile, _ in self._walk(tag_arg(tag), status, None):
            yield profile

    def _walk(
        self,
        tag: str | None,
        status: str | None,
        start: dict[str, Any] | None,
        *,
        prefix: str = "",
        chunk: int = 100,
    ) -> Iterator[tuple[Profile, dict[str, Any]]]:
        """Matching profiles with the raw key a cursor resumes after: a tag's ``TAG#``
        partition, else the subscriber directory (``SubscriberStore.iter_directory``); their
        profiles read ``chunk`` at a time (BatchGetItem)."""
        members: Iterator[tuple[str, dict[str, Any]]]
        if tag is None:
            # each directory shard holds about 1/16 of a chunk: read twice that per Query
            found = self.store.iter_directory(
                prefix=prefix,
                status=status,
                after=start["SK"]["S"] if start else None,
                page=max(10, -(-2 * chunk // keys.DIRECTORY_SHARDS)),
            )
            members = ((email, {"PK": {"S": keys.DIR}, "SK": {"S": sk}}) for email, sk in found)
        else:
            members = self.store.iter_tag_members(tag, start=start, page=chunk)
        batch: list[tuple[str, dict[str, Any]]] = []
        for member in members:
            batch.append(member)
            if len(batch) == chunk:
                yield from self._profiles_of(batch, status)
                batch = []
        yield from self._profiles_of(batch, status)

    def _profiles_of(
        self, members: Sequence[tuple[str, dict[str, Any]]], status: str | None
    ) -> Iterator[tuple[Profile, dict[str, Any]]]:
        profiles = self.store.get_profiles(email for email, _ in members)
        for email, raw_key in members:
            profile = profiles.get(email)
            if profile is not None and (status is None or profile.status == status):
                yield profile, raw_key

    # ----- writes ----------------------------------------------------------------------------
    def update(self, email: str, change: Update) -> WriteResult:
        """Change tags, attributes or the first name of an EXISTING subscriber."""
        email = email_arg(email)
        if change.empty:
            raise InvalidInput("nothing to update: give --tag, --attr or --first-name")
        self.store.require_profile(email)
        result = self.store.upsert(
            email,
            first_name=change.first_name,
            attributes=dict(change.attributes),
            add_tags=change.add_tags,
            remove_tags=change.remove_tags,
        )
        logger.info("subscriber updated", subscriber=redact_email(email), changed=result.changed)
        return WriteResult.of(email, result)

    def unsubscribe(self, email: str) -> WriteResult:
        """Opt the subscriber out (remembered even for an unknown address) and stop their
        marketing sequences, as the unsubscribe link does."""
        email = email_arg(email)
        change = self.store.unsubscribe(email)
        stopped = self.engine.stop_all(email, reason="unsubscribed by an operator", transactional_too=False)
        logger.info("subscriber unsubscribed", subscriber=redact_email(email), changed=change.changed)
        return WriteResult.of(email, change, stopped)

    def resubscribe(self, email: str) -> WriteResult:
        """An explicit opt-in again (does not lift a suppression: ``suppression remove`` does)."""
        email = email_arg(email)
        change = self.store.resubscribe(email)
        logger.info("subscriber resubscribed", subscriber=redact_email(email), changed=change.changed)
        return WriteResult.of(email, change)

    def delete(self, email: str) -> DeleteResult:
        """GDPR erase: stop every execution, then delete every item in both tables."""
        email = email_arg(email)
        unknown = self.store.get_profile(email) is None and not self.store.list_executions(email)
        if unknown and not self.store.list_events(email) and self.suppressions.get(email) is None:
            raise SubscriberNotFound("no such subscriber")
        stopped = self.engine.stop_all(email, reason="erased by an operator")
        report: EraseReport = self.store.erase(email)
        if stopped:
            # A step already running when its execution was stopped may still finish (its
            # send log item, its events): sweep again once such a step has had time to end.
            time.sleep(self.erase_grace_s)
            again = self.store.erase(email)
            report = EraseReport(report.main_items + again.main_items, report.event_items + again.event_items)
        logger.info(
            "subscriber erased",
            subscriber=redact_email(email),
            main_items=report.main_items,
            event_items=report.event_items,
        )
        return DeleteResult(email, report.main_items, report.event_items, tuple(stopped))


# ----- sequence executions -------------------------------------------------------------------
FAILED_STATUSES: tuple[ExecutionStatusType, ...] = ("FAILED", "TIMED_OUT", "ABORTED")


@dataclass(frozen=True)
class FailedExecution:
    sequence: str
    status: str
    name: str
    execution_arn: str
    started_at: str
    stopped_at: str

    def public(self) -> dict[str, Any]:
        return dict(self.__dict__)


def failed_executions(
    sequence: str | None = None,
    sfn: StepFunctions | None = None,
    arn_prefix: str = "",
    aws: ClientFactory | None = None,
) -> list[FailedExecution]:
    """FAILED, TIMED_OUT and ABORTED executions of the sequence state machines (named after
    the target's ``state_machine_arn_prefix`` + sequence id), newest first; one sequence with
    ``sequence``. ``aws``: the target's clients (by default the environment's)."""
    from ops.targets import sequence_state_machines

    aws = aws or ClientFactory()
    sfn = sfn or StepFunctions(aws.client("stepfunctions"))
    machines = sequence_state_machines(arn_prefix, aws)
    if sequence is not None:
        try:
            sequence = validate_name(sequence, "sequence id")
        except ValueError as exc:
            raise InvalidInput(str(exc), [FieldProblem("sequence", str(exc))]) from None
        if sequence not in machines:
            raise NotFound(f"no state machine for sequence {sequence!r}")
        machines = {sequence: machines[sequence]}
    found = []
    for sequence_id, arn in sorted(machines.items()):
        for status in FAILED_STATUSES:
            for item in sfn.list_executions(arn, status):
                found.append(
                    FailedExecution(
                        sequence=sequence_id,
                        status=str(item.get("status", status)),
                        name=str(item["name"]),
                        execution_arn=str(item["executionArn"]),
                        started_at=_iso(item.get("startDate")),
                        stopped_at=_iso(item.get("stopDate")),
                    )
                )
    return sorted(found, key=lambda f: f.stopped_at or f.started_at, reverse=True)


def _iso(value: Any) -> str:
    return value.isoformat() if hasattr(value, "isoformat") else str(value or "")
