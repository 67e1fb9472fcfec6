"""The subscriber store: the only code that writes profiles and their inverted items.

Invariants (DESIGN.md section 3), kept by construction:
- ``PROFILE.tags`` and the ``TAG#<tag>/SUB#<email>`` items change together in ONE
  TransactWriteItems guarded by the profile's ``version`` (optimistic concurrency), so two
  concurrent writers can never leave a tag without its partner or the reverse.
- The ``SUB#/EXEC#<seq>`` and ``EXEC#<seq>/SUB#`` pair is written and deleted in one
  transaction, conditioned on the execution ARN, and only while the profile exists.

Merge rules of :meth:`SubscriberStore.upsert` (documented in docs/data-model.md):
- tags in ``add`` are added, tags in ``remove`` are removed, others are kept;
- attributes are merged key by key, a ``null`` value deletes the key;
- ``first_name`` is replaced when given;
- an upsert never clears ``unsubscribed`` or ``suppressed``: only :meth:`resubscribe`
  (an explicit opt-in) and suppression removal do.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypedDict

from botocore.exceptions import ClientError
from typing_extensions import Unpack

from shared.core import clock
from shared.core.errors import (
    AlreadyEntered,
    ConcurrentModification,
    Conflict,
    ExecutionAlreadyActive,
    FieldProblem,
    InvalidInput,
    SubscriberNotFound,
)
from shared.core.models import (
    MAX_ATTRIBUTES,
    MAX_ATTRIBUTES_BYTES,
    MAX_TAGS_PER_SUBSCRIBER,
    SUBSCRIBED,
    UNSUBSCRIBED,
    attributes_size,
)
from shared.core.public import public_fields
from shared.core.retry import Backoff
from shared.core.specs import TTL_ATTRIBUTE
from shared.core.topics import TopicCatalog
from shared.store import keys
from shared.store.dynamo import (
    CONDITION_FAILED,
    TRANSACTION_LIMIT,
    Action,
    Cancellation,
    TableAdapter,
    TransactionConflict,
    Unprocessed,
    batch_delete,
    batch_get,
    deserialize,
    from_dynamo,
    key,
    page_start,
    query_all,
    serialize,
    transact,
    try_transact,
    values,
)
from shared.store.events import event_record
from shared.store.hygiene import engagement_item
from shared.store.send_log import SendLog
from shared.store.stats import busy, retry_contended, source_and_day_adds

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import (
        ConditionCheckTypeDef,
        DeleteTypeDef,
        PutTypeDef,
        TransactWriteItemTypeDef,
    )


SUPPRESSION_ROLE = "suppression"  # the check, in a new subscriber's write, that none exists

# Optimistic concurrency: a write whose profile version changed under it re-reads and tries
# again, 8 tries in all, after pauses of up to 5 ms, 10 ms, ... 200 ms (full jitter).
WRITE_RETRY = Backoff(attempts=8, base=0.005, cap=0.2)
MAX_ATTEMPTS = WRITE_RETRY.attempts
# How long an erase is remembered: SES events (an open, a click, a late complaint) of mail sent
# before the erase can still arrive; after this, the tombstone expires (DynamoDB TTL).
ERASED_MEMORY_DAYS = 400


# Roles of the actions of an execution entry (put_execution) and its removal.
PROFILE_EXISTS, EXEC_FORWARD, EXEC_INVERSE, ENTERED = (
    "profile_exists",
    "exec_forward",
    "exec_inverse",
    "entered",
)


def entry_refusal(cancellation: Cancellation, sequence_id: str) -> Exception:
    """Why an execution entry was refused, from the action whose condition failed: no
    profile, an active execution (either half of the pair exists), or the sequence was
    entered before (``once``)."""
    if cancellation.failed(PROFILE_EXISTS):
        return SubscriberNotFound("no such subscriber")
    if cancellation.failed(EXEC_FORWARD, EXEC_INVERSE):
        return ExecutionAlreadyActive(f"an execution of {sequence_id} is already active")
    return AlreadyEntered(f"the subscriber already entered {sequence_id}")


# Profile.public(): its keys, in order (then consent and topic choices, when there are any).
_PROFILE_KEYS = "email status first_name attributes tags suppressed created_at updated_at"


@dataclass(frozen=True)
class Profile:
    email: str
    status: str = SUBSCRIBED
    first_name: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    tags: frozenset[str] = frozenset()
    suppressed: bool = False
    created_at: str = ""
    updated_at: str = ""
    version: int = 0
    # Consent (shared/consent): the last recorded opt-in (time, form, method, IP hash, user
    # agent) and the reader's topic choices; topics named in neither set follow topics.yaml.
    consent: dict[str, Any] | None = None
    topics_in: frozenset[str] = frozenset()
    topics_out: frozenset[str] = frozenset()

    def receives(self, topic: str, catalog: TopicCatalog) -> bool:
        """Whether this reader receives mail of ``topic`` (``TopicCatalog.receives``)."""
        return catalog.receives(topic, self.topics_in, self.topics_out)

    def to_item(self) -> dict[str, Any]:
        item: dict[str, Any] = {
            "PK": keys.sub_pk(self.email),
            "SK": keys.PROFILE,
            "email": self.email,
            "status": self.status,
            "attributes": self.attributes,
            "suppressed": self.suppressed,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "version": self.version,
        }
        if self.first_name is not None:
            item["first_name"] = self.first_name
        if self.tags:  # DynamoDB string sets cannot be empty
            item["tags"] = set(self.tags)
        if self.consent is not None:
            item["consent"] = self.consent
        if self.topics_in:
            item["topics_in"] = set(self.topics_in)
        if self.topics_out:
            item["topics_out"] = set(self.topics_out)
        return item

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> Profile:
        return cls(
            email=item["email"],
            status=item.get("status", SUBSCRIBED),
            first_name=item.get("first_name"),
            attributes=from_dynamo(item.get("attributes", {})),
            tags=frozenset(item.get("tags", set())),
            suppressed=bool(item.get("suppressed", False)),
            created_at=item.get("created_at", ""),
            updated_at=item.get("updated_at", ""),
            version=int(item.get("version", 0)),
            consent=from_dynamo(item["consent"]) if "consent" in item else None,
            topics_in=frozenset(item.get("topics_in", set())),
            topics_out=frozenset(item.get("topics_out", set())),
        )

    def public(self) -> dict[str, Any]:
        return {
            **public_fields(self, _PROFILE_KEYS, tags=sorted(self.tags)),
            **({"consent": self.consent} if self.consent is not None else {}),
            **({"topics_in": sorted(self.topics_in)} if self.topics_in else {}),
            **({"topics_out": sorted(self.topics_out)} if self.topics_out else {}),
        }


def tag_item(tag: str, email: str, now: str) -> dict[str, Any]:
    """The ``TAG#<tag>`` / ``SUB#<email>`` partner of a tagged profile."""
    return {"PK": keys.tag_pk(tag), "SK": keys.sub_pk(email), "email": email, "created_at": now}


def directory_items(profile: Profile) -> list[dict[str, Any]]:
    """The subscriber's directory items (``keys.directory_key``: address and status): one in the
    directory of everyone, and one in its status's sparse directory unless it is subscribed."""
    pk, sk = keys.directory_key(profile.email)
    items = [{"PK": pk, "SK": sk, "email": profile.email, "status": profile.status}]
    if profile.status != SUBSCRIBED:
        pk = keys.directory_key(profile.email, profile.status)[0]
        items.append({"PK": pk, "SK": sk, "email": profile.email, "status": profile.status})
    return items


def profile_items(profile: Profile, now: str) -> list[dict[str, Any]]:
    """Every item a new profile is stored as: the profile, its ``TAG#`` partners and its
    directory items (what :meth:`SubscriberStore.mutate` writes in one transaction; seeders
    that write many subscribers at once with BatchWriteItem write these). Not its list-hygiene
    item (events table, ``shared.store.hygiene``)."""
    return [
        profile.to_item(),
        *(tag_item(t, profile.email, now) for t in sorted(profile.tags)),
        *directory_items(profile),
    ]


@dataclass(frozen=True)
class Change:
    """What a profile write did."""

    profile: Profile | None
    created: bool = False
    changed: bool = False
    tags_added: tuple[str, ...] = ()
    tags_removed: tuple[str, ...] = ()


@dataclass(frozen=True)
class Known:
    """One address as a read found it: its profile (None: it has none) and whether its
    ``SUPPRESSION`` item exists (None: not read). :meth:`SubscriberStore.mutate` starts from it
    instead of reading again; its write is still conditioned on the profile's version.

    :data:`ASSUMED_NEW` is an address not read at all, written as a new subscriber: the write's
    own conditions stand for the read (no profile, no ``SUPPRESSION`` item), and a refusal
    brings back what it found (see :meth:`SubscriberStore.mutate`)."""

    profile: Profile | None
    suppressed: bool | None = None
    assumed: bool = False  # not read: tried as a new subscriber


ASSUMED_NEW = Known(profile=None, suppressed=False, assumed=True)


@dataclass(frozen=True)
class Upsert:
    """One address of :meth:`SubscriberStore.upsert_many`: its state as just read, and the
    change (:class:`ProfileChange`) to merge into it."""

    email: str
    known: Known
    change: ProfileChange = field(default_factory=lambda: ProfileChange())


@dataclass(frozen=True)
class Execution:
    email: str
    sequence_id: str
    execution_arn: str
    started_at: str
    transactional: bool


@dataclass(frozen=True)
class EraseReport:
    main_items: int
    event_items: int


Mutation = Callable[[Profile | None, str], Profile | None]


class SubscriberStore(TableAdapter):
    def __init__(
        self,
        table_name: str,
        events_table_name: str,
        client: DynamoDBClient | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(table_name, client)
        self._events_table = events_table_name
        self._sleep = sleep  # the pause between retries (WRITE_RETRY, unprocessed batch items)

    @property
    def events_table(self) -> str:
        """The events table; a function whose spec grants none has no name for it (empty
        ``EVENTS_TABLE_NAME``), and reaching for it is a wiring error, said plainly."""
        if not self._events_table:
            raise RuntimeError("no events table configured (EVENTS_TABLE_NAME is empty for this function)")
        return self._events_table

    # ----- reads -------------------------------------------------------------------
    def get_profile(self, email: str, consistent: bool = True) -> Profile | None:
        response = self.client.get_item(
            TableName=self.table, Key=key(keys.sub_pk(email), keys.PROFILE), ConsistentRead=consistent
        )
        item = response.get("Item")
        return Profile.from_item(deserialize(item)) if item else None

    def require_profile(self, email: str) -> Profile:
        profile = self.get_profile(email)
        if profile is None:
            raise SubscriberNotFound("no such subscriber")
        return profile

    def list_executions(self, email: str) -> list[Execution]:
        items = query_all(
            self.client,
            TableName=self.table,
            KeyConditionExpression="PK = :pk AND begins_with(SK, :prefix)",
            ExpressionAttributeValues=values(pk=keys.sub_pk(email), prefix=keys.EXEC_PREFIX),
            ConsistentRead=True,
        )
        return [self._execution(deserialize(i)) for i in items]

    def tag_members(self, tag: str) -> list[str]:
        return self._members(keys.tag_pk(tag))

    def sequence_members(self, sequence_id: str, limit: int | None = None) -> list[str]:
        """The subscribers with an active execution of the sequence (its ``EXEC#`` partition; the
        first ``limit`` in address order when given: one page). How many there are, without
        reading the partition: ``StatsStore.active_of``."""
        return self._members(keys.exec_pk(sequence_id), limit)

    def _members(self, pk: str, limit: int | None = None) -> list[str]:
        """The emails of a membership partition (a tag's or a sequence's pairs: SK ``SUB#<email>``)."""
        request: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "PK = :pk",
            "ExpressionAttributeValues": values(pk=pk),
            "ProjectionExpression": "SK",
        }
        if limit is not None:
            items = self.client.query(**request, Limit=limit).get("Items", [])
        else:
            items = list(query_all(self.client, **request))
        return [keys.email_from_sub(i["SK"]["S"]) for i in items]

    # ----- paged listings (operator commands: CLI, MCP, export) ----------------------
    def iter_profiles(
        self, *, start: dict[str, Any] | None = None, status: str | None = None
    ) -> Iterator[tuple[Profile, dict[str, Any]]]:
        """Every profile (a filtered Scan, page by page), each with its raw key.

        A raw key is a valid ``start`` for a later call: listing resumes right after it.
        """
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "FilterExpression": "SK = :sk" + (" AND #status = :status" if status else ""),
            "ExpressionAttributeValues": values(sk=keys.PROFILE, **({"status": status} if status else {})),
        }
        if status:
            kwargs["ExpressionAttributeNames"] = {"#status": "status"}
        while True:
            page = self.client.scan(**kwargs, **page_start(start))
            for raw in page.get("Items", []):
                yield Profile.from_item(deserialize(raw)), {"PK": raw["PK"], "SK": raw["SK"]}
            start = page.get("LastEvaluatedKey")
            if not start:
                return

    def iter_directory(
        self, *, prefix: str = "", status: str | None = None, after: str | None = None, page: int = 50
    ) -> Iterator[tuple[str, str]]:
        """(email, directory sort key) of every subscriber in address order (lowercased),
        optionally only addresses starting with ``prefix`` (case-blind) and of one ``status``,
        from after the sort key ``after`` on: each directory partition queried ``page`` items at
        a time, merged: the first pages at once, a shard's next page when the merge reaches it.
        A status other than ``subscribed`` reads its own sparse directory (no filter); ``subscribed``
        filters the directory of everyone (most pass)."""
        low = prefix.lower()
        high = low + "\U0010ffff"  # above every address that starts with the prefix
        if after is not None and low and after >= high:
            return

        # a status other than subscribed has its own sparse directory: no filter there
        sparse = status is not None and status != SUBSCRIBED
        pks = keys.directory_pks(status if sparse else None)
        if sparse:
            status = None

        def query(pk: str) -> dict[str, Any]:
            names = {"#sk": "SK"}
            params: dict[str, Any] = {"pk": pk}
            if low and after is not None:
                condition = " AND #sk BETWEEN :low AND :high"
                params.update(low=max(low, after), high=high)
            elif low:
                condition, params["low"] = " AND begins_with(#sk, :low)", low
            elif after is not None:
                condition, params["after"] = " AND #sk > :after", after
            else:
                condition, names = "", {}
            kwargs: dict[str, Any] = {
                "TableName": self.table,
                "KeyConditionExpression": "PK = :pk" + condition,
                "ConsistentRead": True,
                "Limit": page,
            }
            if status:
                kwargs["FilterExpression"] = "#status = :status"
                names["#status"] = "status"
                params["status"] = status
            if names:
                kwargs["ExpressionAttributeNames"] = names
            kwargs["ExpressionAttributeValues"] = values(**params)
            return kwargs

        def shard(kwargs: dict[str, Any], answer: Any) -> Iterator[tuple[str, str]]:
            while True:
                for raw in answer.get("Items", []):
                    sk = raw["SK"]["S"]
                    if sk != after:  # BETWEEN includes its lower bound
                        yield keys.email_from_directory(sk), sk
                start = answer.get("LastEvaluatedKey")
                if not start:
                    return
                answer = self.client.query(**kwargs, **page_start(start))

        requests = [query(pk) for pk in pks]
        with ThreadPoolExecutor(max_workers=len(requests), thread_name_prefix="directory") as pool:
            firsts = list(pool.map(lambda kwargs: self.client.query(**kwargs), requests))  # at once
        shards = (shard(kwargs, first) for kwargs, first in zip(requests, firsts, strict=True))
        yield from heapq.merge(*shards, key=lambda found: found[1])

    def count_tag_members(self, tag: str) -> int:
        """How many hold ``tag``: its TAG# partition counted by DynamoDB (``Select=COUNT``: no
        item is returned; the partition is still read, 1 MB a page)."""
        counted, start = 0, None
        while True:
            answer = self.client.query(
                TableName=self.table,
                KeyConditionExpression="PK = :pk",
                ExpressionAttributeValues=values(pk=keys.tag_pk(tag)),
                Select="COUNT",
                **page_start(start),
            )
            counted += answer.get("Count", 0)
            start = answer.get("LastEvaluatedKey")
            if not start:
                return counted

    def iter_tag_members(
        self, tag: str, *, start: dict[str, Any] | None = None, page: int | None = None
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """The emails holding ``tag`` (its TAG# partition, ``page`` items a Query, else as many
        as 1 MB holds), each with its raw key."""
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "PK = :pk",
            "ExpressionAttributeValues": values(pk=keys.tag_pk(tag)),
            "ProjectionExpression": "PK, SK",
        }
        if page is not None:
            kwargs["Limit"] = page
        while True:
            answer = self.client.query(**kwargs, **page_start(start))
            for raw in answer.get("Items", []):
                yield keys.email_from_sub(raw["SK"]["S"]), {"PK": raw["PK"], "SK": raw["SK"]}
            start = answer.get("LastEvaluatedKey")
            if not start:
                return

    def get_profiles(self, emails: Iterable[str]) -> dict[str, Profile]:
        """Profiles of ``emails`` (BatchGetItem, 100 per request); missing ones are left out."""
        found = self._read_items(emails, (keys.PROFILE,))
        return {email: Profile.from_item(item) for (email, _), item in found.items()}

    def known(self, emails: Iterable[str]) -> dict[str, Known]:
        """Every address of ``emails`` as it is now: its profile and whether it is suppressed,
        both read in the same consistent BatchGetItem requests (50 addresses per request)."""
        wanted = list(dict.fromkeys(emails))
        found = self._read_items(wanted, (keys.PROFILE, keys.SUPPRESSION))
        return {
            email: Known(
                profile=Profile.from_item(item) if (item := found.get((email, keys.PROFILE))) else None,
                suppressed=(email, keys.SUPPRESSION) in found,
            )
            for email in wanted
        }

    def _read_items(self, emails: Iterable[str], sort_keys: Sequence[str]) -> dict[tuple[str, str], Any]:
        """The items ``SUB#<email>/<sort key>`` that exist, by (email, sort key): consistent
        BatchGetItem requests of 100 keys."""
        wanted = [key(keys.sub_pk(e), sk) for e in dict.fromkeys(emails) for sk in sort_keys]
        try:
            items = [
                deserialize(raw) for raw in batch_get(self.client, self.table, wanted, ConsistentRead=True)
            ]
        except Unprocessed as exc:
            raise ConcurrentModification(str(exc)) from None
        return {(keys.email_from_sub(item["PK"]), item["SK"]): item for item in items}

    # ----- profile writes (profile + TAG# partners in one transaction) ---------------
    def mutate(
        self,
        email: str,
        mutation: Mutation,
        *,
        extra: Sequence[TransactWriteItemTypeDef] = (),
        known: Known | None = None,
    ) -> Change:
        """Apply ``mutation(current, now)`` with optimistic concurrency.

        The mutation returns the new profile (tags included) or None for "no change".
        The profile and every added/removed TAG# partner are written in one transaction
        conditioned on the version that was read; a lost race re-reads and retries.
        ``known``: the address as the caller just read it (:meth:`known`), the first attempt's
        state instead of a read of its own (a stale one loses the race and is read again).
        :data:`ASSUMED_NEW`: the address is written as new without a read; when DynamoDB refuses
        because the profile exists, its refusal carries the profile (ALL_OLD) and the next try
        starts from it; when the address's ``SUPPRESSION`` item exists, the next try creates the
        profile suppressed. Either way one refused transaction replaces the read.
        ``extra`` actions (e.g. deleting a pending sign-up) join that transaction when there is
        a write; when one of their conditions fails, :class:`Conflict` is raised (no retry).
        """
        for _ in WRITE_RETRY.tries(sleep=self._sleep):
            state, known = known or Known(self.get_profile(email)), None
            current = state.profile
            now = clock.iso()
            proposed = mutation(current, now)
            if proposed is None or (current is not None and same(current, proposed)):
                return Change(profile=current)
            change, actions = self._planned(email, state, proposed, now)
            actions += [Action("extra", request) for request in extra]
            try:
                transact(self.client, actions)
            except TransactionConflict as exc:
                if exc.failed("extra"):
                    raise Conflict("a condition of this write no longer holds") from None
                if state.assumed:
                    known = _found_instead(exc.cancellation, actions)
                continue
            return change
        raise ConcurrentModification("profile kept changing under us")

    def _planned(self, email: str, state: Known, proposed: Profile, now: str) -> tuple[Change, list[Action]]:
        """Writing ``proposed`` over ``state``'s profile: the change it makes and its actions (the
        profile, conditioned on the version read, and every TAG# partner added or removed).
        :class:`InvalidInput` when it breaks a per-subscriber limit (:func:`limit_problems`)."""
        current = state.profile
        unread: list[Action] = []  # what the write checks instead of a read (an address assumed new)
        if state.assumed and not proposed.suppressed:
            unread.append(self._no_suppression(email))
        elif current is None and not proposed.suppressed and self._suppressed(email, state):
            # an address suppressed before it was a subscriber (a bounce or complaint of
            # other mail): the new profile starts suppressed (read with the profile when the
            # caller passed `known`, else one read per creation)
            proposed = replace(proposed, suppressed=True)
        problems = limit_problems(current, proposed)
        if problems:
            raise InvalidInput(f"{problems[0].field}: {problems[0].message}", problems)
        before = current.tags if current else frozenset()
        added = tuple(sorted(proposed.tags - before))
        removed = tuple(sorted(before - proposed.tags))
        new = replace(
            proposed,
            email=email,
            created_at=current.created_at if current else now,
            updated_at=now,
            version=(current.version if current else 0) + 1,
        )
        actions = [self._put_profile(new, current), *unread]
        if current is None or current.status != new.status:
            for item in directory_items(new):
                put = {"TableName": self.table, "Item": serialize(item)}
                actions.append(Action("directory", {"Put": put}))  # type: ignore[typeddict-item]
            if current is not None and current.status != SUBSCRIBED:
                actions.append(self._delete(*keys.directory_key(email, current.status)))
        actions += [self._put_tag(tag, email, now) for tag in added]
        actions += [self._delete(keys.tag_pk(tag), keys.sub_pk(email)) for tag in removed]
        if new.status == SUBSCRIBED and (current is None or current.status != SUBSCRIBED):
            # list hygiene's starting point: (re)subscribed now, no engagement yet (shared.store.hygiene)
            put = {"TableName": self.events_table, "Item": serialize(engagement_item(email, now))}
            actions.append(Action("engagement", {"Put": put}))  # type: ignore[typeddict-item]
        change = Change(
            profile=new, created=current is None, changed=True, tags_added=added, tags_removed=removed
        )
        return change, actions

    def upsert_many(self, upserts: Sequence[Upsert]) -> list[Change | InvalidInput]:
        """:meth:`upsert` of several addresses, each started from its ``known`` state (read
        just before with :meth:`known`), in as few TransactWriteItems as fit: each holds the
        writes of whole subscribers (a profile and its TAG# partners are never split), at most
        :data:`TRANSACTION_LIMIT` actions (so at most 100 profiles of about 12 KB at most: far
        under the 4 MB a transaction may hold). An address that would change nothing writes
        nothing.

        When DynamoDB cancels a shared transaction (a profile changed since it was read, or a
        conflicting write), nothing of it was written and each of its addresses is written on
        its own with :meth:`upsert` (which reads again the one that changed). The answer, in
        order: each address's :class:`Change`, or the :class:`InvalidInput` of a per-subscriber
        limit its write would break (nothing written for it)."""
        results: list[Change | InvalidInput | None] = [None] * len(upserts)
        group: list[tuple[int, Change, list[Action]]] = []

        def commit() -> None:
            cancelled = try_transact(self.client, [a for _, _, actions in group for a in actions])
            for index, change, actions in group:
                if cancelled is None:
                    results[index] = change
                    continue
                one = upserts[index]
                # the one whose condition failed changed since it was read: read it again
                stale = any(cancelled.code_of(a) == CONDITION_FAILED for a in actions)
                try:
                    results[index] = self.upsert(one.email, known=None if stale else one.known, **one.change)
                except InvalidInput as exc:  # the profile changed meanwhile, past a limit
                    results[index] = exc
            group.clear()

        now = clock.iso()
        for index, one in enumerate(upserts):
            current = one.known.profile
            proposed = merged(current, one.email, **one.change)
            if current is not None and same(current, proposed):
                results[index] = Change(profile=current)
                continue
            try:
                change, actions = self._planned(one.email, one.known, proposed, now)
            except InvalidInput as exc:
                results[index] = exc
                continue
            if group and sum(len(a) for _, _, a in group) + len(actions) > TRANSACTION_LIMIT:
                commit()
            group.append((index, change, actions))
        if group:
            commit()
        return [r for r in results if r is not None]

    def upsert(
        self,
        email: str,
        *,
        known: Known | None = None,
        extra: Sequence[TransactWriteItemTypeDef] = (),
        **change: Unpack[ProfileChange],
    ) -> Change:
        """Create or merge a profile (rules in the module docstring, :func:`merged`) in one
        transaction. ``unsubscribe=True`` also opts the subscriber out (a new profile is
        created unsubscribed, so the opt-out is remembered). ``known``, ``extra``: see
        :meth:`mutate`."""

        def apply(current: Profile | None, now: str) -> Profile:
            return merged(current, email, **change)

        return self.mutate(email, apply, known=known, extra=extra)

    def unsubscribe(self, email: str) -> Change:
        """Mark the subscriber unsubscribed (creating a profile that remembers the opt-out)."""
        return self.upsert(email, unsubscribe=True)

    def resubscribe(self, email: str) -> Change:
        """Explicit opt-in again. Does not lift a suppression (bounces and complaints)."""

        def apply(current: Profile | None, now: str) -> Profile:
            if current is None:
                raise SubscriberNotFound("no such subscriber")
            return replace(current, status=SUBSCRIBED)

        return self.mutate(email, apply)

    def set_topics(self, email: str, *, on: Iterable[str] = (), off: Iterable[str] = ()) -> Change:
        """Change some of the reader's topic choices (the others stay): ``on`` topics are
        received, ``off`` topics are not, whatever their defaults. Idempotent (a repeat changes
        nothing); a reader without a profile is ``SubscriberNotFound``."""
        turn_on, turn_off = frozenset(on), frozenset(off)

        def apply(current: Profile | None, now: str) -> Profile:
            if current is None:
                raise SubscriberNotFound("no such subscriber")
            return replace(
                current,
                topics_in=(current.topics_in - turn_off) | turn_on,
                topics_out=(current.topics_out - turn_on) | turn_off,
            )

        return self.mutate(email, apply)

    def set_suppressed(self, email: str, suppressed: bool) -> Change:
        def apply(current: Profile | None, now: str) -> Profile:
            base = current or Profile(email=email, status=SUBSCRIBED)
            return replace(base, suppressed=suppressed)

        return self.mutate(email, apply)

    # ----- execution pairs -------------------------------------------------------------
    def put_execution(
        self,
        email: str,
        sequence_id: str,
        execution_arn: str,
        *,
        transactional: bool = False,
        once: bool = False,
    ) -> Execution:
        """Write the EXEC pair (and the ``ENTERED#`` marker) in one transaction.

        ``once=True`` refuses with :class:`AlreadyEntered` when the subscriber entered this
        sequence before (the marker exists), even if that execution has ended.
        """
        now = clock.iso()
        actions = self._entry_actions(email, sequence_id, execution_arn, now, transactional, once)
        try:
            self._transact_retried(actions)
        except TransactionConflict as exc:
            raise entry_refusal(exc.cancellation, sequence_id) from None
        return Execution(email, sequence_id, execution_arn, now, transactional)

    def _entry_actions(
        self, email: str, sequence_id: str, execution_arn: str, now: str, transactional: bool, once: bool
    ) -> list[Action]:
        """The actions of :meth:`put_execution`, each named by its role (see :func:`entry_refusal`)."""
        body = {"execution_arn": execution_arn, "started_at": now, "transactional": transactional}
        forward = {
            "PK": keys.sub_pk(email),
            "SK": keys.exec_sk(sequence_id),
            "sequence_id": sequence_id,
            **body,
        }
        inverse = {"PK": keys.exec_pk(sequence_id), "SK": keys.sub_pk(email), "email": email, **body}
        marker: PutTypeDef = {
            "TableName": self.table,
            "Item": serialize(
                {
                    "PK": keys.sub_pk(email),
                    "SK": keys.entered_sk(sequence_id),
                    "at": now,
                    "execution_arn": execution_arn,
                }
            ),
        }
        if once:
            marker["ConditionExpression"] = "attribute_not_exists(PK) OR execution_arn = :arn"
            marker["ExpressionAttributeValues"] = values(arn=execution_arn)
        absent = "attribute_not_exists(PK)"
        return [
            Action(
                PROFILE_EXISTS,
                {
                    "ConditionCheck": {
                        "TableName": self.table,
                        "Key": key(keys.sub_pk(email), keys.PROFILE),
                        "ConditionExpression": "attribute_exists(PK)",
                    }
                },
            ),
            Action(
                EXEC_FORWARD,
                {"Put": {"TableName": self.table, "Item": serialize(forward), "ConditionExpression": absent}},
            ),
            Action(
                EXEC_INVERSE,
                {"Put": {"TableName": self.table, "Item": serialize(inverse), "ConditionExpression": absent}},
            ),
            Action(ENTERED, {"Put": marker}),
        ]

    def _transact_retried(self, actions: list[Action]) -> None:
        """``transact(actions)``, run again while only a concurrent transaction on one of its items
        (or throttling) cancelled it: nothing was written (``stats.retry_contended``). The
        sequence's executions count is not in it: the stats fold counts the pair from the change
        stream (``shared.store.stream_counts``)."""
        retry_contended(lambda: transact(self.client, actions), sleep=self._sleep, retryable=busy)

    def forget_entry(self, email: str, sequence_id: str, execution_arn: str) -> None:
        """Undo the ``ENTERED#`` marker of an execution that never started."""
        try:
            self.client.delete_item(
                TableName=self.table,
                Key=key(keys.sub_pk(email), keys.entered_sk(sequence_id)),
                ConditionExpression="execution_arn = :arn",
                ExpressionAttributeValues=values(arn=execution_arn),
            )
        except self.client.exceptions.ConditionalCheckFailedException:
            return

    def mark_execution_ended(self, email: str, sequence_id: str, execution_arn: str, ended: str) -> None:
        """Leave ``ended`` on the subscriber's EXEC item before the pair is deleted, so the delete
        in the table's change stream says how the execution ended (webhooks: sequence.completed);
        nothing when the item is gone or names another execution."""
        try:
            self.client.update_item(
                TableName=self.table,
                Key=key(keys.sub_pk(email), keys.exec_sk(sequence_id)),
                UpdateExpression="SET ended = :ended",
                ConditionExpression="execution_arn = :arn",
                ExpressionAttributeValues=values(ended=ended, arn=execution_arn),
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise

    def delete_execution(self, email: str, sequence_id: str, execution_arn: str | None = None) -> bool:
        """Remove the pair; with ``execution_arn`` only if it still belongs to that execution (an
        execution that ran to its last step is marked first: :meth:`mark_execution_ended`).

        Returns False when there was nothing (or another execution's pair) to delete.
        """

        def delete(pk: str, sk: str) -> DeleteTypeDef:
            request: DeleteTypeDef = {"TableName": self.table, "Key": key(pk, sk)}
            if execution_arn is None:
                request["ConditionExpression"] = "attribute_exists(PK)"
            else:
                request["ConditionExpression"] = "execution_arn = :arn"
                request["ExpressionAttributeValues"] = values(arn=execution_arn)
            return request

        actions = [
            Action(EXEC_FORWARD, {"Delete": delete(keys.sub_pk(email), keys.exec_sk(sequence_id))}),
            Action(EXEC_INVERSE, {"Delete": delete(keys.exec_pk(sequence_id), keys.sub_pk(email))}),
        ]
        try:
            self._transact_retried(actions)
        except TransactionConflict:
            return False
        return True

    # ----- erase (GDPR) -------------------------------------------------------------
    def erase(self, email: str) -> EraseReport:
        """Delete every item of a subscriber in both tables, partners included.

        Order keeps the invariants at every step: the profile and its TAG# partners go in
        one transaction first (after which no execution pair can be created, because
        ``put_execution`` requires the profile); then each execution pair in its own
        transaction; then the remaining items (send log, suppression) and the events.
        """
        self.remember_erased(email)
        main_items = 0
        for _ in WRITE_RETRY.tries(sleep=self._sleep):
            current = self.get_profile(email)
            if current is None:
                break
            actions = [
                Action(
                    "profile",
                    {
                        "Delete": {
                            "TableName": self.table,
                            "Key": key(keys.sub_pk(email), keys.PROFILE),
                            "ConditionExpression": "version = :v",
                            "ExpressionAttributeValues": values(v=current.version),
                        }
                    },
                )
            ]
            actions += [self._delete(keys.tag_pk(t), keys.sub_pk(email)) for t in sorted(current.tags)]
            actions += [self._delete(i["PK"], i["SK"]) for i in directory_items(current)]
            try:
                transact(self.client, actions)
            except TransactionConflict:
                continue
            main_items += len(actions)
            break
        else:
            raise ConcurrentModification("profile kept changing during erase")

        rest = list(
            query_all(
                self.client,
                TableName=self.table,
                KeyConditionExpression="PK = :pk",
                ExpressionAttributeValues=values(pk=keys.sub_pk(email)),
                ConsistentRead=True,
            )
        )
        plain = []
        for raw in rest:
            sk = raw["SK"]["S"]
            if sk.startswith(keys.EXEC_PREFIX):
                if self.delete_execution(email, keys.sequence_from_exec(sk)):
                    main_items += 2
            else:
                plain.append({"PK": raw["PK"], "SK": raw["SK"]})
        main_items += batch_delete(self.client, self.table, plain, sleep=self._sleep)

        events = [
            {"PK": raw["PK"], "SK": raw["SK"]}
            for raw in query_all(
                self.client,
                TableName=self.events_table,
                KeyConditionExpression="PK = :pk",
                ExpressionAttributeValues=values(pk=keys.sub_pk(email)),
                ProjectionExpression="PK, SK",
            )
        ]
        event_items = batch_delete(self.client, self.events_table, events, sleep=self._sleep)
        return EraseReport(main_items=main_items, event_items=event_items)

    def remember_erased(self, email: str, days: int = ERASED_MEMORY_DAYS) -> None:
        """The erase tombstone (no address in it, only its hash), expiring after ``days``."""
        at = clock.utc_now()
        self.client.put_item(
            TableName=self.table,
            Item=serialize(
                {
                    "PK": keys.erased_pk(email),
                    "SK": keys.ERASED,
                    "at": clock.iso(at),
                    TTL_ATTRIBUTE: clock.ttl_after(days, at),
                }
            ),
        )

    def erased_among(self, emails: Iterable[str]) -> set[str]:
        """Which of ``emails`` were erased and have not subscribed again since (a tombstone and
        no profile), strongly consistent: their tombstones first (one BatchGetItem per 100
        addresses), then the profiles of those that have one. An erased address is rare, so an
        SES event's recipient costs one read unit here, not two (docs/engagement.md)."""
        wanted = sorted(set(emails))
        tombstones = self.existing((keys.erased_pk(e), keys.ERASED) for e in wanted)
        erased = [e for e in wanted if (keys.erased_pk(e), keys.ERASED) in tombstones]
        if not erased:
            return set()
        profiles = self.existing((keys.sub_pk(e), keys.PROFILE) for e in erased)
        return {e for e in erased if (keys.sub_pk(e), keys.PROFILE) not in profiles}

    def is_erased(self, email: str) -> bool:
        """Whether ``email``'s erase tombstone exists (one strongly consistent GetItem). Paths
        that may create a profile check it when they find none: an erased address is not
        re-created from an old link."""
        found = self.client.get_item(
            TableName=self.table,
            Key=key(keys.erased_pk(email), keys.ERASED),
            ConsistentRead=True,
            ProjectionExpression="PK",
        )
        return "Item" in found

    # ----- events table -------------------------------------------------------------
    def record_event(self, email: str, item: dict[str, Any]) -> None:
        """Write one events-table item of ``email`` (built by ``shared.store.events.event_record``)."""
        self.client.put_item(**self.event_put(email, item)["Put"], ReturnConsumedCapacity="TOTAL")

    def event_put(self, email: str, item: dict[str, Any]) -> TransactWriteItemTypeDef:
        """The ``Put`` of one events-table item of ``email``, for a transaction (the profile's:
        ``upsert(..., extra=[...])``, one request for both; docs/bench.md, subscribe)."""
        return {
            "Put": {"TableName": self.events_table, "Item": serialize({"PK": keys.sub_pk(email), **item})}
        }

    def add_event(
        self,
        email: str,
        kind: str,
        *,
        at: datetime | str,
        ttl_days: int,
        suffix: str | None = None,
        **fields: Any,
    ) -> None:
        """Record one ``kind`` event of ``email``: the item of ``event_record`` with these arguments."""
        self.record_event(email, event_record(email, kind, at=at, ttl_days=ttl_days, suffix=suffix, **fields))

    def list_events(self, email: str) -> list[dict[str, Any]]:
        """The subscriber's timeline, oldest first: the events table's items and the
        ``SENT#`` send log (as ``type: send``: SES Send events are not published)."""
        items = [
            from_dynamo(deserialize(i))
            for i in query_all(
                self.client,
                TableName=self.events_table,
                KeyConditionExpression="PK = :pk AND begins_with(SK, :prefix)",
                ExpressionAttributeValues=values(pk=keys.sub_pk(email), prefix=f"{keys.EVT}{keys.SEP}"),
            )
        ]
        for sent in self.send_log.entries(email):
            sent = from_dynamo(sent)
            items.append({**sent, "type": "send", "origin": "mailstep", "at": sent.get("sent_at", "")})
        return sorted(items, key=lambda i: str(i.get("at", "")))

    def has_event(self, email: str, kind: str, template: str) -> bool:
        """Whether the subscriber's timeline holds a ``kind`` event of ``template`` that a person
        made (an open Apple's Mail Privacy Protection made is not one: ``machine``)."""
        items = query_all(
            self.client,
            TableName=self.events_table,
            KeyConditionExpression="PK = :pk AND begins_with(SK, :prefix)",
            FilterExpression="#type = :kind AND template = :tpl AND attribute_not_exists(machine)",
            ExpressionAttributeValues=values(
                pk=keys.sub_pk(email), prefix=f"{keys.EVT}{keys.SEP}", tpl=template, kind=kind
            ),
            ExpressionAttributeNames={"#type": "type"},
            ProjectionExpression="SK",
        )
        return any(True for _ in items)

    def has_step_event(self, email: str, kind: str, *, source: str, step: str, since: str) -> bool:
        """Whether a person made a ``kind`` event (open, click) of the one mail of ``source`` whose
        send-once ``step`` this is (a sequence step's mail in one execution), at or after
        ``since``: the subscriber's events from then on, filtered (no machine verdict)."""
        items = query_all(
            self.client,
            TableName=self.events_table,
            KeyConditionExpression="PK = :pk AND SK BETWEEN :low AND :high",
            FilterExpression="#type = :kind AND #source = :source AND #step = :step "
            "AND attribute_not_exists(machine)",
            ExpressionAttributeValues=values(
                pk=keys.sub_pk(email),
                low=f"{keys.EVT}{keys.SEP}{since}",
                high=f"{keys.EVT}{keys.SEP}~",  # after every ISO time
                kind=kind,
                source=source,
                step=step,
            ),
            ExpressionAttributeNames={"#type": "type", "#source": "source", "#step": "step"},
            ProjectionExpression="SK",
        )
        return any(True for _ in items)

    def has_sent(self, email: str, template: str) -> bool:
        """Whether the subscriber's ``SENT#`` log holds a mail of ``template``."""
        items = query_all(
            self.client,
            TableName=self.table,
            KeyConditionExpression="PK = :pk AND begins_with(SK, :prefix)",
            FilterExpression="template = :tpl",
            ExpressionAttributeValues=values(pk=keys.sub_pk(email), prefix=keys.SENT_PREFIX, tpl=template),
            ProjectionExpression="SK",
        )
        return any(True for _ in items)

    # ----- send log, counters, transactions of other capabilities -----------------------
    @property
    def send_log(self) -> SendLog:
        """The send-once claims and ``SENT#`` log of this table, on this store's client."""
        return SendLog(self.table, client=self._client)

    def existing(self, item_keys: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
        """Which of these (PK, SK) main-table items exist (strongly consistent BatchGetItem)."""
        wanted = [key(pk, sk) for pk, sk in dict.fromkeys(item_keys)]
        items = batch_get(
            self.client,
            self.table,
            wanted,
            sleep=self._sleep,
            ConsistentRead=True,
            ProjectionExpression="PK, SK",
        )
        return {(i["PK"]["S"], i["SK"]["S"]) for i in items}

    def write_transaction(self, actions: Sequence[Action]) -> Cancellation | None:
        """One TransactWriteItems of ``actions`` (any table): None when it committed, else why
        DynamoDB cancelled it, per action. Other errors raise."""
        return try_transact(self.client, actions)

    def add_to_counter(self, source: str, metric: str, amount: int = 1) -> None:
        """Atomic ADD to ``metric`` of ``STATS#<source>`` / ``COUNTERS`` and of today's day
        counters, in one transaction (``shared.store.stats.source_and_day_adds``)."""
        at = clock.iso()
        self.client.transact_write_items(
            TransactItems=source_and_day_adds(self.table, source, {metric: amount}, at=at)
        )

    # ----- suppression records (shared.engagement.suppression decides; this stores) -----
    def put_suppression(self, item: dict[str, Any]) -> bool:
        """Write the subscriber's ``SUPPRESSION`` item unless one exists (the first reason is
        kept). True when written."""
        try:
            self.client.put_item(
                TableName=self.table,
                Item=serialize({**item, "PK": keys.sub_pk(item["email"]), "SK": keys.SUPPRESSION}),
                ConditionExpression="attribute_not_exists(PK)",
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            return False
        return True

    def _suppressed(self, email: str, state: Known) -> bool:
        """Whether ``email`` has a ``SUPPRESSION`` item (``state``'s answer, else one read)."""
        return state.suppressed if state.suppressed is not None else self.get_suppression(email) is not None

    def get_suppression(self, email: str) -> dict[str, Any] | None:
        raw = self.client.get_item(
            TableName=self.table, Key=key(keys.sub_pk(email), keys.SUPPRESSION), ConsistentRead=True
        ).get("Item")
        return deserialize(raw) if raw else None

    def delete_suppression(self, email: str) -> None:
        self.client.delete_item(TableName=self.table, Key=key(keys.sub_pk(email), keys.SUPPRESSION))

    def suppression_items(self) -> Iterator[dict[str, Any]]:
        """Every ``SUPPRESSION`` item (a filtered scan: an operator command, not a hot path)."""
        start: dict[str, Any] | None = None
        while True:
            page = self.client.scan(
                TableName=self.table,
                FilterExpression="SK = :sk",
                ExpressionAttributeValues=values(sk=keys.SUPPRESSION),
                **page_start(start),
            )
            yield from (deserialize(i) for i in page.get("Items", []))
            start = page.get("LastEvaluatedKey")
            if not start:
                return

    # ----- helpers ------------------------------------------------------------------
    def _put_profile(self, new: Profile, current: Profile | None) -> Action:
        put: PutTypeDef = {"TableName": self.table, "Item": serialize(new.to_item())}
        if current is None:
            put["ConditionExpression"] = "attribute_not_exists(PK)"
            put["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"  # a profile found: no read after
        else:
            put["ConditionExpression"] = "version = :v"
            put["ExpressionAttributeValues"] = values(v=current.version)
        return Action("profile", {"Put": put})

    def _no_suppression(self, email: str) -> Action:
        check: ConditionCheckTypeDef = {
            "TableName": self.table,
            "Key": key(keys.sub_pk(email), keys.SUPPRESSION),
            "ConditionExpression": "attribute_not_exists(PK)",
        }
        return Action(SUPPRESSION_ROLE, {"ConditionCheck": check})

    def _put_tag(self, tag: str, email: str, now: str) -> Action:
        # Four strings, written as DynamoDB's JSON directly (what `serialize` makes of them, without
        # its JSON round trip per value: an import writes one of these per tag per subscriber).
        typed = {name: {"S": value} for name, value in tag_item(tag, email, now).items()}
        return Action("tag", {"Put": {"TableName": self.table, "Item": typed}})

    def _delete(self, pk: str, sk: str) -> Action:
        return Action("tag", {"Delete": {"TableName": self.table, "Key": key(pk, sk)}})

    @staticmethod
    def _execution(item: dict[str, Any]) -> Execution:
        return Execution(
            email=keys.email_from_sub(item["PK"]),
            sequence_id=keys.sequence_from_exec(item["SK"]),
            execution_arn=item["execution_arn"],
            started_at=item.get("started_at", ""),
            transactional=bool(item.get("transactional", False)),
        )


def _found_instead(cancellation: Cancellation, actions: Sequence[Action]) -> Known | None:
    """What a write of an address assumed new found instead (:data:`ASSUMED_NEW`): its profile
    (the refusal's ALL_OLD), or its ``SUPPRESSION`` item; None: not said, read it."""
    profile = next((a for a in actions if a.role == "profile"), None)
    found = cancellation.item_of(profile) if profile is not None else None
    if found:
        return Known(Profile.from_item(deserialize(found)))
    if cancellation.failed(SUPPRESSION_ROLE):
        return Known(profile=None, suppressed=True)
    return None


class ProfileChange(TypedDict, total=False):
    """What an upsert changes (every key optional): ``first_name`` (None keeps it),
    ``attributes`` (a None value removes that attribute), ``add_tags``, ``remove_tags``, and
    ``unsubscribe`` (True opts out; never opts back in)."""

    first_name: str | None
    attributes: dict[str, Any] | None
    add_tags: Iterable[str]
    remove_tags: Iterable[str]
    unsubscribe: bool


def merged(current: Profile | None, email: str, **change: Unpack[ProfileChange]) -> Profile:
    """What :meth:`SubscriberStore.upsert` makes of ``current`` (None: a new profile): the one
    merge rule (module docstring). Pure: the store writes it, the CSV import uses it to skip
    rows that would change nothing."""
    unsubscribe = change.get("unsubscribe", False)
    first_name = change.get("first_name")
    base = current or Profile(email=email, status=UNSUBSCRIBED if unsubscribe else SUBSCRIBED)
    attrs = dict(base.attributes)
    for name, value in (change.get("attributes") or {}).items():
        if value is None:
            attrs.pop(name, None)
        else:
            attrs[name] = value
    return replace(
        base,
        status=UNSUBSCRIBED if unsubscribe else base.status,
        first_name=first_name if first_name is not None else base.first_name,
        attributes=attrs,
        tags=(base.tags | frozenset(change.get("add_tags", ()))) - frozenset(change.get("remove_tags", ())),
    )


def limit_problems(current: Profile | None, proposed: Profile) -> list[FieldProblem]:
    """The per-subscriber limits (docs/data-model.md) that writing ``proposed`` over ``current``
    would break, each named by the field of the change that breaks it (``tags``,
    ``attributes``): at most ``MAX_TAGS_PER_SUBSCRIBER`` tags, ``MAX_ATTRIBUTES`` attributes and
    ``MAX_ATTRIBUTES_BYTES`` of attributes (as JSON). A change that does not grow a measure past
    its limit passes, so a profile stored before a limit existed can still shrink, change or
    unsubscribe. :meth:`SubscriberStore.mutate` refuses every write that breaks one; the events
    API checks a whole batch with it before writing anything."""
    problems = []
    was = current or Profile(email=proposed.email)
    tags, attrs = len(proposed.tags), len(proposed.attributes)
    if tags > MAX_TAGS_PER_SUBSCRIBER and tags > len(was.tags):
        problems.append(
            FieldProblem(
                "tags", f"a subscriber holds at most {MAX_TAGS_PER_SUBSCRIBER} tags (this makes {tags})"
            )
        )
    if attrs > MAX_ATTRIBUTES and attrs > len(was.attributes):
        problems.append(
            FieldProblem(
                "attributes", f"a subscriber holds at most {MAX_ATTRIBUTES} attributes (this makes {attrs})"
            )
        )
    size = attributes_size(proposed.attributes)
    if size > MAX_ATTRIBUTES_BYTES and size > attributes_size(was.attributes):
        problems.append(
            FieldProblem(
                "attributes",
                f"a subscriber's attributes hold at most {MAX_ATTRIBUTES_BYTES} bytes as JSON "
                f"(this makes {size})",
            )
        )
    return problems


def same(a: Profile, b: Profile) -> bool:
    """Whether writing ``b`` over ``a`` would change nothing a reader sees."""
    return (a.status, a.first_name, a.attributes, a.tags, a.suppressed) == (
        b.status,
        b.first_name,
        b.attributes,
        b.tags,
        b.suppressed,
    ) and (a.consent, a.topics_in, a.topics_out) == (b.consent, b.topics_in, b.topics_out)
