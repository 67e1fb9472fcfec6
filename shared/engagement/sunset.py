"""Sunset: subscribers without human engagement turn cold, then are unsubscribed.

The rule (docs/hygiene.md): a subscribed, unsuppressed subscriber with no human open or click
(``shared.engagement.machine``: machine opens and clicks do not count) for ``cold_after_days``
(90), or for ``new_subscriber_cold_after_days`` (30) while younger than ``cold_after_days``,
turns **cold**: the tag ``cold`` and a ``subscriber.cold`` event, applied by the events API's own
code (``shared.web.ingest``), so ``trigger: subscriber.cold`` starts sequences like any event. A
human open or click makes them warm again (the tag goes). Still cold ``grace_days`` (30) later,
they are unsubscribed (tag ``sunset``, the event ``subscriber.unsubscribed`` with ``data.reason:
sunset``): not suppressed, they may subscribe again. A subscriber who never engaged counts from
when they (re)subscribed.

What is stored: one ``SUB#<email>/ENGAGEMENT`` item per subscriber in the events table
(``shared.store.hygiene``), in its sparse ``HygieneIndex`` under ``E#<last engagement
day>#<shard>`` (warm) or ``C#<cold day>#<shard>`` (cold); the run's checkpoint
``HYGIENE/STATE`` in the main table.

The engagement consumer (:func:`touch`) moves the item on a subscriber's first human open or click
of a day: one BatchGetItem of the batch's items first, so a busy reader costs a read per open, and a
write (conditional) at most once a day. The first engagement ever is written even on the day the
item starts (the subscription's): its ``engaged_at`` is what "engaged within N days" audiences
read (``shared.broadcasts.engagement``).

The daily run (:func:`run`, the hygiene function on an EventBridge schedule) for day ``T`` reads
only the day buckets that fall due since its last run (16 shard keys each): warm ``E#d`` for the
days ``d`` up to ``T - cold_after_days`` and (young subscribers) ``T - new_subscriber_cold_after_days``,
cold ``C#d`` up to ``T - grace_days``. It never scans. Each change is claimed by a conditional
write on the ENGAGEMENT item before its event is applied, and the events carry ids derived from
the subscriber and the day (Powertools idempotency, as for a retried POST), so a run delivered
twice, two runs at once, or a run resumed after a crash mark each subscriber cold once, apply one
``subscriber.cold`` event and unsubscribe once. The checkpoint moves only after a whole run.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from shared.core import clock
from shared.core.models import SUBSCRIBED, UNSUBSCRIBE_EVENT, UNSUBSCRIBED, InboundEvent
from shared.core.observability import logger, redact_email
from shared.core.specs import HYGIENE_INDEX
from shared.store import dynamo, keys
from shared.store.dynamo import batch_get, deserialize, from_dynamo, key, query_all, serialize, values
from shared.store.hygiene import (
    backfilled_item,
    cold_key,
    day_of,
    days_between,
    engagement_key,
    shift,
    warm_key,
)
from shared.store.subscribers import Known, Profile, SubscriberStore

if TYPE_CHECKING:
    from shared.core.settings import Settings
    from shared.web.ingest import IngestContext

COLD_TAG = "cold"
SUNSET_TAG = "sunset"
COLD_EVENT = "subscriber.cold"
SUNSET = "sunset"  # the unsubscribe's reason
MAX_CATCH_UP_DAYS = 400  # a run reads at most this many days of each kind of bucket
AT_RISK_DAYS = 14  # the report's horizon
AT_RISK_READERS = 16  # the report's bucket Queries in flight at once

Emit = Callable[[InboundEvent], None]  # applies one event as POST /v1/events does


@dataclass(frozen=True)
class SunsetPolicy:
    cold_after_days: int = 90
    new_subscriber_cold_after_days: int = 30
    grace_days: int = 30

    @classmethod
    def from_settings(cls, settings: Settings) -> SunsetPolicy:
        return cls(
            settings.cold_after_days, settings.new_subscriber_cold_after_days, settings.sunset_grace_days
        )

    def young(self, since_day: str, on: str) -> bool:
        """Whether a subscriber since ``since_day`` is younger than ``cold_after_days`` on ``on``."""
        return days_between(since_day, on) < self.cold_after_days


# ----- the consumer's side: the last human engagement ------------------------------------------
@dataclass
class Touched:
    read: int = 0  # ENGAGEMENT items read
    written: int = 0  # moved to a later day (at most once per subscriber per day)
    warmed: list[str] = field(default_factory=list)  # were cold: the tag removed


def touch(store: SubscriberStore, engaged: Mapping[str, str]) -> Touched:
    """Record human engagement: ``engaged`` maps each subscriber to their latest human open or
    click (ISO time) of a batch. One BatchGetItem (eventually consistent) of their items; a write
    only for those whose item names an earlier day or who are cold. A cold subscriber loses the
    ``cold`` tag first (profile + TAG# transaction), then the item turns warm: a crash in
    between is repaired by the redelivery, which finds the item still cold. Subscribers without
    an item (no profile, or a profile from before hygiene that ``mailstep hygiene backfill`` has
    not reached) are left alone."""
    done = Touched()
    if not engaged:
        return done
    wanted = [key(*engagement_key(email)) for email in engaged]
    found = {
        keys.email_from_sub(item["PK"]): item
        for item in (deserialize(raw) for raw in batch_get(store.client, store.events_table, wanted))
    }
    done.read = len(wanted)
    for email, at in engaged.items():
        item = found.get(email)
        if item is None:
            continue
        cold = "cold_at" in item
        first_on_its_day = "engaged_at" not in item and str(item.get("day", "")) == day_of(at)
        if not cold and str(item.get("day", "")) >= day_of(at) and not first_on_its_day:
            continue  # already marked today (or later): no write
        if cold and not (day_of(at) > str(item.get("day", "")) or at > str(item["cold_at"])):
            continue  # an engagement older than what the item knows
        if cold:
            uncold(store, email)
        if _mark_engaged(store, email, at):
            done.written += 1
            if cold:
                done.warmed.append(email)
                logger.info("cold subscriber engaged again", subscriber=redact_email(email))
    return done


def uncold(store: SubscriberStore, email: str) -> None:
    """Take the ``cold`` tag away (profile + TAG# partner in one transaction); a subscriber
    without a profile or the tag is left as is (never created)."""

    def warm(current: Profile | None, now: str) -> Profile | None:
        if current is None or COLD_TAG not in current.tags:
            return None
        return replace(current, tags=current.tags - {COLD_TAG})

    store.mutate(email, warm)


def _update_engagement(
    store: SubscriberStore,
    email: str,
    update: str,
    condition: str,
    names: dict[str, str] | None = None,
    **placeholders: object,
) -> bool:
    """Update the subscriber's ENGAGEMENT item if ``condition`` holds (``placeholders``: the
    expressions' values, ``names``: their attribute names); False when it does not."""
    request: dict[str, Any] = {
        "TableName": store.events_table,
        "Key": key(*engagement_key(email)),
        "UpdateExpression": update,
        "ConditionExpression": condition,
        "ExpressionAttributeValues": values(**placeholders),
    }
    if names:
        request["ExpressionAttributeNames"] = names
    try:
        store.client.update_item(**request)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
            return False
        raise
    return True


def _mark_engaged(store: SubscriberStore, email: str, at: str) -> bool:
    """False: another writer recorded a later engagement meanwhile."""
    day = day_of(at)
    return _update_engagement(
        store,
        email,
        "SET engaged_at = :at, #day = :day, hygiene_key = :key REMOVE cold_at, cold_pending",
        "attribute_exists(PK) AND (#day < :day OR (attribute_not_exists(engaged_at) AND #day = :day)"
        " OR (attribute_exists(cold_at) AND cold_at < :at))",
        names={"#day": "day"},
        at=at,
        day=day,
        key=warm_key(email, day),
    )


# ----- the daily run -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Checkpoint:
    """The last day buckets a run read, per kind (None: never), and the last day it ran."""

    warm_upto: str | None = None  # E# buckets read for cold_after_days
    new_upto: str | None = None  # E# buckets read for new_subscriber_cold_after_days
    cold_upto: str | None = None  # C# buckets read for grace_days
    run_day: str | None = None

    @classmethod
    def read(cls, store: SubscriberStore) -> Checkpoint:
        answer = store.client.get_item(
            TableName=store.table, Key=key(keys.HYGIENE_PK, keys.HYGIENE_STATE), ConsistentRead=True
        )
        item = deserialize(answer["Item"]) if "Item" in answer else {}
        return cls(
            warm_upto=item.get("warm_upto"),
            new_upto=item.get("new_upto"),
            cold_upto=item.get("cold_upto"),
            run_day=item.get("run_day"),
        )

    def write(self, store: SubscriberStore, report: RunReport) -> None:
        item = {
            "PK": keys.HYGIENE_PK,
            "SK": keys.HYGIENE_STATE,
            **{k: v for k, v in asdict(self).items() if v},
        }
        item["last_run"] = {k: v for k, v in report.summary().items() if k != "dry_run"}
        store.client.put_item(TableName=store.table, Item=serialize(item))


def _days(after: str | None, upto: str) -> list[str]:
    """The days in ``(after, upto]`` (only ``upto`` when ``after`` is None), at most
    ``MAX_CATCH_UP_DAYS`` (the latest)."""
    if after is None:
        return [upto]
    count = min(days_between(after, upto), MAX_CATCH_UP_DAYS)
    return [shift(upto, -n) for n in reversed(range(count))] if count > 0 else []


@dataclass(frozen=True)
class Plan:
    day: str
    warm_days: list[str]
    new_days: list[str]
    cold_days: list[str]
    repair_days: list[str]
    checkpoint: Checkpoint  # what the checkpoint becomes after the run

    @classmethod
    def of(cls, day: str, policy: SunsetPolicy, done: Checkpoint) -> Plan:
        warm_to = shift(day, -policy.cold_after_days)
        new_to = shift(day, -policy.new_subscriber_cold_after_days)
        cold_to = shift(day, -policy.grace_days)
        return cls(
            day=day,
            warm_days=_days(done.warm_upto, warm_to),
            new_days=_days(done.new_upto, new_to),
            cold_days=_days(done.cold_upto, cold_to),
            repair_days=_days(done.run_day, day),
            checkpoint=Checkpoint(
                warm_upto=max(filter(None, (done.warm_upto, warm_to))),
                new_upto=max(filter(None, (done.new_upto, new_to))),
                cold_upto=max(filter(None, (done.cold_upto, cold_to))),
                run_day=max(filter(None, (done.run_day, day))),
            ),
        )


@dataclass
class RunReport:
    day: str
    dry_run: bool = False
    buckets_read: int = 0  # HygieneIndex Queries
    items_read: int = 0
    to_mark_cold: list[str] = field(default_factory=list)
    to_unsubscribe: list[str] = field(default_factory=list)
    marked_cold: int = 0
    unsubscribed: int = 0
    repaired: int = 0  # cold marks whose event a crashed run had not confirmed
    warmed_meanwhile: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> subscribers

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    def summary(self) -> dict[str, Any]:
        """Every field of the report, the two lists of emails as their counts."""
        return {
            **asdict(self),
            "to_mark_cold": len(self.to_mark_cold),
            "to_unsubscribe": len(self.to_unsubscribe),
        }


def bucket(
    store: SubscriberStore, kind: str, day: str, report: RunReport | None = None
) -> Iterator[dict[str, Any]]:
    """The ENGAGEMENT items of one day bucket: one Query per shard key of ``HygieneIndex``."""
    for index_key in keys.hygiene_keys(kind, day):
        if report is not None:
            report.buckets_read += 1
        for item in _index_items(store, index_key):
            if report is not None:
                report.items_read += 1
            yield item


def _index_items(store: SubscriberStore, index_key: str) -> Iterator[dict[str, Any]]:
    """The ENGAGEMENT items under one ``HygieneIndex`` key (one Query, paged)."""
    for raw in query_all(
        store.client,
        TableName=store.events_table,
        IndexName=HYGIENE_INDEX,
        KeyConditionExpression="hygiene_key = :k",
        ExpressionAttributeValues=values(k=index_key),
    ):
        yield deserialize(raw)


def _eligible(state: Known | None) -> str | None:
    """Why a subscriber does not count (None: subscribed, not suppressed, has a profile)."""
    if state is None or state.profile is None:
        return "no_profile"
    if state.profile.status != "subscribed":
        return "not_subscribed"
    if state.profile.suppressed or state.suppressed:
        return "suppressed"
    return None


def due(
    store: SubscriberStore, policy: SunsetPolicy, plan: Plan, report: RunReport
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The items the run acts on: (to mark cold, to unsubscribe, cold marks to confirm)."""
    cold: dict[str, dict[str, Any]] = {}
    for day in plan.warm_days:
        for item in bucket(store, keys.HYGIENE_WARM, day, report):
            if item.get("day") == day and "cold_at" not in item:
                cold.setdefault(item["email"], item)
    for day in plan.new_days:
        crossing = shift(day, policy.new_subscriber_cold_after_days)
        for item in bucket(store, keys.HYGIENE_WARM, day, report):
            since = day_of(str(item.get("since", ""))) if item.get("since") else day
            if item.get("day") == day and "cold_at" not in item and policy.young(since, crossing):
                cold.setdefault(item["email"], item)
    repair = [
        item
        for day in plan.repair_days
        for item in bucket(store, keys.HYGIENE_COLD, day, report)
        if item.get("cold_pending")
    ]
    sunset = [
        item
        for day in plan.cold_days
        for item in bucket(store, keys.HYGIENE_COLD, day, report)
        if item.get("cold_at") and day_of(str(item["cold_at"])) == day and not item.get("cold_pending")
    ]
    return list(cold.values()), sunset, repair


def _event_id(kind: str, email: str, day: str) -> str:
    return f"hygiene-{kind}-{day}-{hashlib.sha256(email.encode()).hexdigest()[:24]}"


def cold_event(email: str, cold_day: str, last_day: str) -> InboundEvent:
    return InboundEvent(
        type=COLD_EVENT,
        email=email,
        tags={"add": [COLD_TAG]},  # type: ignore[arg-type]  # validated into a TagChange
        data={"last_engaged_day": last_day},
        id=_event_id("cold", email, cold_day),
    )


def sunset_event(email: str, cold_day: str) -> InboundEvent:
    return InboundEvent(
        type=UNSUBSCRIBE_EVENT,
        email=email,
        tags={"add": [SUNSET_TAG], "remove": [COLD_TAG]},  # type: ignore[arg-type]
        data={"reason": SUNSET, "cold_since": cold_day},
        id=_event_id("sunset", email, cold_day),
    )


def run(
    store: SubscriberStore,
    policy: SunsetPolicy,
    now: datetime,  # the schedule's time: the run works on its UTC day
    emit: Emit | None = None,
    *,
    dry_run: bool = False,
) -> RunReport:
    """The daily run for the UTC day of ``now`` (the schedule's time). ``dry_run`` (or no
    ``emit``): read and report what it would change, write nothing."""
    at = clock.iso(now)
    day = day_of(at)
    done = Checkpoint.read(store)
    plan = Plan.of(day, policy, done)
    report = RunReport(day=day, dry_run=dry_run or emit is None)
    to_cold, to_sunset, to_repair = due(store, policy, plan, report)
    known = store.known([i["email"] for i in (*to_cold, *to_sunset)]) if (to_cold or to_sunset) else {}
    for items, chosen_emails in ((to_cold, report.to_mark_cold), (to_sunset, report.to_unsubscribe)):
        for item in items:
            reason = _eligible(known.get(item["email"]))
            if reason:
                report.skip(reason)
            else:
                chosen_emails.append(item["email"])
    if report.dry_run:
        return report
    assert emit is not None
    for item in to_repair:
        _confirm_cold(store, emit, item, str(item["cold_at"]), report, repair=True)
    chosen = set(report.to_mark_cold)
    for item in to_cold:
        if item["email"] in chosen and _claim_cold(store, item, at):
            _confirm_cold(store, emit, item, at, report)
    chosen = set(report.to_unsubscribe)
    for item in to_sunset:
        if item["email"] in chosen:
            _sunset(store, emit, item, report, at)
    plan.checkpoint.write(store, report)
    logger.info("hygiene run", **{k: v for k, v in report.summary().items() if k != "skipped"})
    return report


def _claim_cold(store: SubscriberStore, item: Mapping[str, Any], at: str) -> bool:
    """Mark the item cold (and pending) if it still names the day the run read: the claim that
    makes this run, and no other, apply the subscriber's cold event. False: engaged since, or
    another run claimed it."""
    email = str(item["email"])
    return _update_engagement(
        store,
        email,
        "SET cold_at = :at, cold_pending = :yes, hygiene_key = :key",
        "#day = :day AND attribute_not_exists(cold_at)",
        names={"#day": "day"},
        at=at,
        yes=True,
        key=cold_key(email, day_of(at)),
        day=item["day"],
    )


def _confirm_cold(
    store: SubscriberStore,
    emit: Emit,
    item: Mapping[str, Any],
    cold_at: str,  # this run's claim time; a repair passes the stored cold_at
    report: RunReport,
    *,
    repair: bool = False,
) -> None:
    """Apply the subscriber's ``subscriber.cold`` event (idempotent by its id), then clear the
    pending mark; when the subscriber engaged in between (the mark is gone), take the tag back."""
    email = str(item["email"])
    emit(cold_event(email, day_of(cold_at), str(item.get("day", ""))))
    if not _update_engagement(store, email, "REMOVE cold_pending", "cold_at = :at", at=cold_at):
        uncold(store, email)
        report.warmed_meanwhile += 1
        return
    if repair:
        report.repaired += 1
    else:
        report.marked_cold += 1


def _sunset(store: SubscriberStore, emit: Emit, item: Mapping[str, Any], report: RunReport, at: str) -> None:
    """Unsubscribe a subscriber still cold after the grace period (idempotent by the event's id),
    then take the item out of the index."""
    email, cold_at = str(item["email"]), str(item["cold_at"])
    emit(sunset_event(email, day_of(cold_at)))
    update = "SET sunset_at = :at REMOVE hygiene_key"
    if not _update_engagement(store, email, update, "cold_at = :cold", at=at, cold=cold_at):
        report.warmed_meanwhile += 1  # engaged at the last moment: unsubscribed all the same
    report.unsubscribed += 1


# ----- the backfill ----------------------------------------------------------------------------
BACKFILL_PAGE = 100  # subscribers per step: one BatchGetItem of their items, one checkpoint
BACKFILL_WORKERS = 8  # subscribers without an item read and written at once
HUMAN_ENGAGEMENT = ("open", "click")
ENGAGEMENT_PAGE = 50  # events per Query page while looking for the newest human open or click

Progress = Callable[[int, int], None]  # (subscribers looked at so far, subscribed in all)


@dataclass
class BackfillReport:
    dry_run: bool
    resumed_after: str | None = None  # the directory key an unfinished run had reached
    total: int = 0  # subscribed subscribers (the directories' counts, for the progress bar)
    read: int = 0  # subscribed subscribers looked at
    had_item: int = 0  # already had their ENGAGEMENT item
    created: int = 0  # items written (a dry run: that would be)
    engaged: int = 0  # of those, with a human open or click in their events
    raced: int = 0  # an item appeared between the read and the write (a subscription, another run)
    gone: int = 0  # no longer a subscribed profile when read
    writes: int = 0  # write requests made (items and the checkpoint)
    done: bool = False


def backfill(
    store: SubscriberStore,
    *,
    dry_run: bool = False,
    restart: bool = False,
    page: int = BACKFILL_PAGE,
    workers: int = BACKFILL_WORKERS,
    progress: Progress | None = None,
) -> BackfillReport:
    """Create the missing ``ENGAGEMENT`` items of subscribed subscribers (profiles from before
    list hygiene) from their records: since = the later of the profile's creation and its
    last recorded opt-in (``consent.at``); the last human open or click = the newest ``open`` or
    ``click`` event without a ``machine`` verdict. Subscribers are read from the subscriber
    directory in address order (Queries, no Scan), ``page`` at a time: one BatchGetItem of
    their items, then for each one without an item (``workers`` at once) its profile and one Query
    of its events (newest first, stopping at the first human engagement), and a conditional Put
    (``attribute_not_exists``: an item written meanwhile, by a subscription or the consumer, is
    never replaced).

    Idempotent: a second run finds every item and writes nothing. Resumable: after each page
    that wrote, the directory key reached is the checkpoint ``HYGIENE`` / ``BACKFILL``; the next
    run starts after it (``restart``: from the first subscriber), and a finished run deletes it.
    ``dry_run`` reads the same and writes nothing."""
    answer = store.client.get_item(
        TableName=store.table, Key=key(keys.HYGIENE_PK, keys.HYGIENE_BACKFILL), ConsistentRead=True
    )
    saved = deserialize(answer["Item"]) if "Item" in answer else None
    report = BackfillReport(dry_run=dry_run, resumed_after=None if restart or not saved else saved["after"])
    report.total = _subscribed_count(store)
    checkpointed = saved is not None
    directory = store.iter_directory(status=SUBSCRIBED, after=report.resumed_after, page=page)
    for emails, last in _pages(directory, page):
        checkpointed |= _backfill_page(store, emails, last, report, workers)
        if progress is not None:
            progress(report.read, report.total)
    if checkpointed and not dry_run:
        store.client.delete_item(TableName=store.table, Key=key(keys.HYGIENE_PK, keys.HYGIENE_BACKFILL))
        report.writes += 1
    report.done = True
    counts: dict[str, Any] = {k: v for k, v in asdict(report).items() if type(v) is int}
    logger.info("hygiene backfill", dry_run=dry_run, **{f"subscribers_{k}": v for k, v in counts.items()})
    return report


def _pages(directory: Iterator[tuple[str, str]], size: int) -> Iterator[tuple[list[str], str]]:
    """The directory's (email, sort key) pairs as pages of ``size`` emails, each with its last key."""
    emails: list[str] = []
    for email, sort_key in directory:
        emails.append(email)
        if len(emails) == size:
            yield emails, sort_key
            emails = []
    if emails:
        yield emails, sort_key


def _subscribed_count(store: SubscriberStore) -> int:
    """Subscribers in the directory of everyone minus those in the unsubscribed one
    (``Select=COUNT`` Queries of the 16 directory partitions: no item returned)."""

    def count(pk: str) -> int:
        counted, start = 0, None
        while True:
            request: dict[str, Any] = {
                "TableName": store.table,
                "KeyConditionExpression": "PK = :pk",
                "ExpressionAttributeValues": values(pk=pk),
                "Select": "COUNT",
            }
            answer = store.client.query(**request, **dynamo.page_start(start))
            counted += answer.get("Count", 0)
            start = answer.get("LastEvaluatedKey")
            if not start:
                return counted

    everyone = sum(count(pk) for pk in keys.directory_pks())
    return everyone - sum(count(pk) for pk in keys.directory_pks(UNSUBSCRIBED))


def _backfill_page(
    store: SubscriberStore, emails: list[str], last: str, report: BackfillReport, workers: int
) -> bool:
    """One page of subscribers (those without an item ``workers`` at once); True when it wrote
    the checkpoint (it wrote an item)."""
    report.read += len(emails)
    wanted = [key(*engagement_key(email)) for email in emails]
    have = {
        keys.email_from_sub(raw["PK"]["S"])
        for raw in batch_get(store.client, store.events_table, wanted, ProjectionExpression="PK")
    }
    report.had_item += len(have)
    missing = [email for email in emails if email not in have]
    profiles = store.get_profiles(missing) if missing else {}
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="backfill") as pool:
        outcomes = Counter(
            pool.map(lambda email: _backfill_one(store, email, profiles.get(email), report.dry_run), missing)
        )
    created = outcomes[CREATED] + outcomes[CREATED_ENGAGED]
    report.gone += outcomes[GONE]
    report.raced += outcomes[RACED]
    report.created += created
    report.engaged += outcomes[CREATED_ENGAGED]
    if report.dry_run:
        return False
    report.writes += created + outcomes[RACED]  # one conditional Put each
    wrote = created > 0
    if wrote:
        checkpoint = {"PK": keys.HYGIENE_PK, "SK": keys.HYGIENE_BACKFILL, "after": last, "at": clock.iso()}
        store.client.put_item(TableName=store.table, Item=serialize(checkpoint))
        report.writes += 1
    return wrote


GONE, RACED, CREATED, CREATED_ENGAGED = "gone", "raced", "created", "created_engaged"


def _backfill_one(store: SubscriberStore, email: str, profile: Profile | None, dry_run: bool) -> str:
    """Create one subscriber's item (a dry run: only read): the outcome."""
    if profile is None or profile.status != SUBSCRIBED:
        return GONE
    engaged_at = last_human_engagement(store, email)
    created = CREATED if engaged_at is None else CREATED_ENGAGED
    if dry_run:
        return created
    item = backfilled_item(email, subscribed_since(profile), engaged_at)
    try:
        store.client.put_item(
            TableName=store.events_table, Item=serialize(item), ConditionExpression="attribute_not_exists(PK)"
        )
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
            raise
        return RACED
    return created


def subscribed_since(profile: Profile) -> str:
    """When the subscriber's current subscription started, as far as the profile tells: its
    creation, or its last recorded opt-in (a confirmation, a sign-up) when later."""
    opted_in = (profile.consent or {}).get("at")
    if isinstance(opted_in, str) and opted_in > profile.created_at:
        return opted_in
    return profile.created_at


def last_human_engagement(store: SubscriberStore, email: str) -> str | None:
    """The time of the subscriber's newest open or click a person made (no ``machine``
    verdict): their events newest first, read until the first one."""
    for raw in query_all(
        store.client,
        TableName=store.events_table,
        KeyConditionExpression="PK = :pk AND begins_with(SK, :prefix)",
        FilterExpression="#type IN (:open, :click) AND attribute_not_exists(machine)",
        ExpressionAttributeNames={"#type": "type", "#at": "at"},
        ExpressionAttributeValues=values(
            pk=keys.sub_pk(email),
            prefix=f"{keys.EVT}{keys.SEP}",
            open=HUMAN_ENGAGEMENT[0],
            click=HUMAN_ENGAGEMENT[1],
        ),
        ProjectionExpression="#at",
        ScanIndexForward=False,
        Limit=ENGAGEMENT_PAGE,  # a page of events at a time: a reader who engaged lately costs little
    ):
        return str(deserialize(raw)["at"])
    return None


# ----- the report ----------------------------------------------------------------------------------
@dataclass
class HygieneReport:
    day: str
    cold: int
    at_risk: int | None  # warm subscribers who turn cold within AT_RISK_DAYS (None: not read)
    at_risk_by_day: dict[str, int]
    next_run: dict[str, Any] | None  # the next daily run's dry run (RunReport.summary); None: not read
    last_run: dict[str, Any] | None
    policy: dict[str, int]


def at_risk(
    store: SubscriberStore,
    policy: SunsetPolicy,
    day: str,
    horizon: int = AT_RISK_DAYS,
    *,
    readers: int = AT_RISK_READERS,
) -> dict[str, int]:
    """Eligible warm subscribers who turn cold on each of the ``horizon`` days after ``day``:
    the E# buckets ``horizon`` days ahead of each rule (a Query per shard key and day, 448 for
    14 days: ``readers`` at once), the profiles of those found (BatchGetItem)."""
    ahead = [shift(day, n) for n in range(1, horizon + 1)]
    wanted = sorted(
        {
            shift(on, -after)
            for on in ahead
            for after in (policy.cold_after_days, policy.new_subscriber_cold_after_days)
        }
    )
    index_keys = [k for d in wanted for k in keys.hygiene_keys(keys.HYGIENE_WARM, d)]
    with ThreadPoolExecutor(max_workers=readers, thread_name_prefix="at-risk") as pool:
        read = dict(
            zip(index_keys, pool.map(lambda k: list(_index_items(store, k)), index_keys), strict=True)
        )
    buckets = {d: [i for k in keys.hygiene_keys(keys.HYGIENE_WARM, d) for i in read[k]] for d in wanted}
    when: dict[str, str] = {}
    for on in ahead:
        last = shift(on, -policy.cold_after_days)
        for item in buckets[last]:
            if item.get("day") == last and "cold_at" not in item:
                when.setdefault(item["email"], on)
        last = shift(on, -policy.new_subscriber_cold_after_days)
        for item in buckets[last]:
            since = day_of(str(item.get("since"))) if item.get("since") else last
            if item.get("day") == last and "cold_at" not in item and policy.young(since, on):
                when.setdefault(item["email"], on)
    known = store.known(when) if when else {}
    counted: dict[str, int] = {}
    for email, on in when.items():
        if _eligible(known.get(email)) is None:
            counted[on] = counted.get(on, 0) + 1
    return dict(sorted(counted.items()))


def report(
    store: SubscriberStore,
    policy: SunsetPolicy,
    now: datetime | None = None,
    *,
    live: bool = True,
    readers: int = AT_RISK_READERS,
) -> HygieneReport:
    """Cold subscribers (the ``cold`` tag), those at risk within ``AT_RISK_DAYS`` (their buckets
    read ``readers`` at once), and what the next daily run would change (its dry run: today's
    when it has not run today, else tomorrow's).

    ``live=False`` (the console's Hygiene page as it opens): neither the at-risk nor the dry run,
    so no day bucket is read (one GetItem and the count of the ``cold`` tag)."""
    moment = now or datetime.now(UTC)
    day = day_of(clock.iso(moment))
    answer = store.client.get_item(TableName=store.table, Key=key(keys.HYGIENE_PK, keys.HYGIENE_STATE))
    last = from_dynamo(deserialize(answer["Item"]).get("last_run")) if "Item" in answer else None
    cold = store.count_tag_members(COLD_TAG)
    if not live:
        return HygieneReport(
            day=day,
            cold=cold,
            at_risk=None,
            at_risk_by_day={},
            next_run=None,
            last_run=last,
            policy=asdict(policy),
        )
    done = Checkpoint.read(store)
    next_day = shift(done.run_day, 1) if done.run_day and done.run_day >= day else day
    next_run = run(store, policy, datetime.fromisoformat(f"{next_day}T04:00:00+00:00"), dry_run=True)
    risky = at_risk(store, policy, day, readers=readers)
    return HygieneReport(
        day=day,
        cold=cold,
        at_risk=sum(risky.values()),
        at_risk_by_day=risky,
        next_run={
            **next_run.summary(),
            "to_mark_cold_emails": next_run.to_mark_cold[:50],
            "to_unsubscribe_emails": next_run.to_unsubscribe[:50],
        },
        last_run=last,
        policy=asdict(policy),
    )


# ----- wiring ---------------------------------------------------------------------------------------
def ingest_emitter(ctx: IngestContext) -> Emit:
    """Apply each event through the events API's own path (``shared.web.ingest.ingest``: profile
    upsert, the event item, sequences started and stopped; idempotent by the event's id)."""
    from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyAlreadyInProgressError

    from shared.core.models import EventBatch
    from shared.web.ingest import ingest

    def emit(event: InboundEvent) -> None:
        try:
            results = ingest(EventBatch(events=[event]), ctx)
        except IdempotencyAlreadyInProgressError:
            logger.info("hygiene event applied by a concurrent run", event_type=event.type)
            return
        errors = [r["error"] for r in results if "error" in r]
        if errors:
            raise RuntimeError(f"hygiene event refused: {errors[0]}")

    return emit


def scheduled_time(event: Mapping[str, Any]) -> datetime:
    """The moment an EventBridge Scheduled Event stands for (its ``time``, the schedule's time);
    now when it has none or it is not a time."""
    value = event.get("time")
    if isinstance(value, str):
        try:
            return clock.parse_iso(value)
        except ValueError:
            logger.warning("scheduled event time is not a time: running for now")
    return datetime.now(UTC)
