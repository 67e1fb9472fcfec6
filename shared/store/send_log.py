"""Send-once claims and the ``SENT#`` send log (main table, under ``SUB#<email>``).

One claim item per (subscriber, source, step): ``SK = SEND#<source>#<step>``.

- ``claim`` is one conditional PutItem: it succeeds when no claim exists, or when a
  previous claim's lease expired (that worker crashed, or it finished: see below). The
  claim carries what a recovery needs to write the send's log entry without the worker:
  ``send_id``, ``sent_at`` (so the ``SENT#`` key is known before SES is called) and
  ``count`` (whether the send is counted with its log entry).
- ``complete`` writes the ``SENT#`` item (with ``ttl``), conditioned on not existing. The
  ``SENT#`` item is what says "sent": the claim is not written a second time, so a send
  costs 2 writes (claim, log). A single send's entry is marked ``fold_count``: the stats fold
  adds its ``send`` to the source, template and day counters from the entry's stream record,
  exactly once (``shared.store.stream_counts``); a broadcast worker counts a whole batch at once
  instead (``shared.broadcasts.records``). The send itself writes no counter, so a busy counter
  never holds up the log of a mail SES accepted.
- When a claim is found taken (a redelivered job) or is taken over after its lease
  (``ReturnValues=ALL_OLD`` shows a previous claim), the subscriber's ``SENT#`` log is read
  for that (source, step): found -> ``already_sent``. Only these rare paths read.
- ``release`` deletes our claim when nothing was sent (SES refused or throttled), so a
  retry can send.

Crash window and its recovery: a worker that dies after SES accepted the message but
before ``SENT#`` was written leaves a claim ``sending`` and no log. SES's events for that
message carry the send's tags (source, step, send id); the engagement consumer, seeing an
event that proves SES accepted the message (Send, Delivery, Bounce, Complaint,
DeliveryDelay), calls :meth:`SendLog.record_evidence`: when the claim is ``sending`` for
that send id and its ``SENT#`` entry is missing, it writes the entry from the event
(``recovered: ses_event``, counted when the claim says so). A takeover after the lease then
finds the entry and answers ``already_sent``; SES is not called again. Only when no such
event arrived before the lease ended does the takeover send again: a duplicate is possible
only if SES accepted the first message and its events were later than the lease.

The SES message id of a send that returned is not written to the claim: that would be a
third write per send, and the window it would close (SES answered, ``SENT#`` not yet
written) is the one the event covers.

The same read settles send counts the send path left pending: a ``SENT#`` entry's
``count_pending`` (written by versions that counted a single send in its own transaction, when
that transaction found a counters item busy) and, for sends a batch counts (the claim's
``count`` is false), the ``STATS#<source>`` / ``UNCOUNTED#<template>`` ledger (read in the same
BatchGetItem).

``SENT#`` items expire after ``DATA_TTL_DAYS``: a claim taken over after its log could have
expired (``log_until`` passed) counts as sent, so an expired log never turns into a second
send.

Claims expire too (``ttl``), once nothing can ask for their send again
(docs/data-model.md, "What expires, and when"):

- by default :data:`CLAIM_DAYS` after the claim: a sequence step is retried only inside its
  execution, and a Step Functions standard execution runs at most one year, so every retry
  of a send comes within a year of it (send jobs on the send queue too: SQS keeps a message
  at most 14 days, and each redrive of a dead letter at most 14 more);
- a sign-up's confirmation mail: its sign-up's expiry (``log_until``) plus a day: after it
  the job finds no sign-up and sends nothing, whatever the claim says;
- a broadcast's mails: the end of the broadcast's send window plus a day, given by the
  worker (:meth:`SendLog.expiring_at`): after the window the broadcast sends nothing more
  (``shared.broadcasts.records``).

A claim whose ``ttl`` passed but that DynamoDB has not deleted yet still blocks (it reads
as a finished claim): only its deletion frees the key, and by then no retry needs it.

Why not Powertools idempotency: its records are built to expire (``expires_after_seconds``)
and are deleted when the function raises. Send-once needs a record that never stops
blocking after success, and a lease that tells "in flight" from "crashed", in one
conditional write; a plain conditional claim does exactly that with no second record.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from botocore.exceptions import ClientError

from shared.core import clock
from shared.core.errors import ConcurrentModification
from shared.core.observability import logger
from shared.core.specs import TTL_ATTRIBUTE
from shared.store import keys
from shared.store.dynamo import (
    TableAdapter,
    batch_get,
    deserialize,
    key,
    query_all,
    serialize,
    values,
)
from shared.store.stats import (
    COUNT_PENDING,
    SIGNUP_SOURCE,
    settle_send,
    settle_soon,
    settle_uncounted,
)
from shared.store.stream_counts import FOLD_COUNT

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import PutTypeDef


SENDING = "sending"
SENT = "sent"  # claims completed by versions that wrote the claim a second time
RECOVERED_FROM_EVENT = "ses_event"  # ``recovered`` of a SENT# item written from an SES event

ClaimStatus = Literal["claimed", "already_sent", "in_flight"]

# How long a claim outlives the send it guards (docs/data-model.md, "What expires, and when").
EXPIRY_MARGIN_DAYS = 1  # clock skew between writers, a Lambda still running at the window's end
EXECUTION_MAX_DAYS = 366  # a Step Functions standard execution runs at most one year
CLAIM_DAYS = EXECUTION_MAX_DAYS + EXPIRY_MARGIN_DAYS


def _entry(logged: dict[tuple[str, str], dict[str, Any]], claim: dict[str, Any]) -> dict[str, Any] | None:
    """The ``SENT#`` entry ``claim`` names among those read (None: none, or an older claim
    without ``sent_at``, whose entry only a query of the log finds)."""
    sent_at = str(claim.get("sent_at") or "")
    if not sent_at:
        return None
    email = keys.email_from_sub(str(claim["PK"]))
    return logged.get((email, keys.sent_sk(sent_at, str(claim["source"]), str(claim["send_id"]))))


@dataclass(frozen=True)
class Claim:
    status: ClaimStatus
    claim_id: str = ""
    message_id: str | None = None  # when already sent
    lease_until: int = 0  # when in flight
    took_over: bool = False  # claimed after an earlier claim's lease ended, with no log found


@dataclass(frozen=True)
class SentRecord:
    email: str
    source: str
    step: str
    send_id: str
    template: str
    subject: str
    ses_message_id: str
    transactional: bool
    sent_at: str  # ISO timestamp
    ttl: int  # epoch seconds
    after_takeover: bool = False  # sent again after an earlier claim's lease ended
    recovered: str | None = None  # RECOVERED_FROM_EVENT: written by the engagement consumer


@dataclass(frozen=True)
class SendEvidence:
    """An SES event that proves SES accepted the message of a send (its tags name it)."""

    email: str
    source: str
    step: str
    send_id: str
    template: str
    ses_message_id: str
    subject: str
    transactional: bool
    at: str  # the event's timestamp
    sent_at: str = ""  # the send's ``sent_at`` as the sender tagged it (its SENT# key); "": untagged


def sent_item(record: SentRecord) -> dict[str, Any]:
    item: dict[str, Any] = {
        "PK": keys.sub_pk(record.email),
        "SK": keys.sent_sk(record.sent_at, record.source, record.send_id),
        "email": record.email,
        "template": record.template,
        "subject": record.subject,
        "source": record.source,
        "step": record.step,
        "send_id": record.send_id,
        "ses_message_id": record.ses_message_id,
        "transactional": record.transactional,
        "sent_at": record.sent_at,
        "ttl": record.ttl,
    }
    if record.after_takeover:
        item["after_takeover"] = True
    if record.recovered:
        item["recovered"] = record.recovered
    return item


class SendLog(TableAdapter):
    def __init__(
        self, table_name: str, client: DynamoDBClient | None = None, *, claims_until: int | None = None
    ) -> None:
        """``claims_until``: the ``ttl`` of every claim this log writes (a broadcast's: the end
        of its send window plus a margin); None: the rule of :meth:`claim_ttl`."""
        super().__init__(table_name, client)
        self.claims_until = claims_until

    def expiring_at(self, until: int) -> SendLog:
        """A copy of this log (same table and client), its claims expiring at ``until``."""
        log = copy.copy(self)
        log.claims_until = until
        return log

    def claim_ttl(self, source: str, *, now: int, log_until: int) -> int:
        """The ``ttl`` of a claim taken at ``now`` (see the module doc for each window)."""
        if self.claims_until is not None:
            return self.claims_until
        if source == SIGNUP_SOURCE:  # the sign-up's expiry: later, its job sends nothing
            return log_until + EXPIRY_MARGIN_DAYS * clock.DAY_SECONDS
        return now + CLAIM_DAYS * clock.DAY_SECONDS

    def claim(
        self,
        email: str,
        source: str,
        step: str,
        *,
        send_id: str,
        template: str,
        now: int,
        lease_seconds: int,
        log_until: int,
        sent_at: str = "",
        count: bool = True,
    ) -> Claim:
        """``log_until``: when this send's ``SENT#`` item would expire (its ``ttl``);
        ``sent_at``: the ``sent_at`` its ``SENT#`` item will have (its key); ``count``: whether
        that item is written with the ``send`` counters (a recovery writes it the same way)."""
        claim_id = uuid.uuid4().hex
        item: dict[str, Any] = {
            "PK": keys.sub_pk(email),
            "SK": keys.send_claim_sk(source, step),
            "state": SENDING,
            "claim_id": claim_id,
            "lease_until": now + lease_seconds,
            "log_until": log_until,
            "send_id": send_id,
            "template": template,
            "source": source,
            "step": step,
            "claimed_at": now,
            "count": count,
            TTL_ATTRIBUTE: self.claim_ttl(source, now=now, log_until=log_until),
        }
        if sent_at:
            item["sent_at"] = sent_at
        try:
            response = self.client.put_item(
                TableName=self.table,
                Item=serialize(item),
                ConditionExpression="attribute_not_exists(PK) OR (#state = :sending AND lease_until < :now)",
                ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues=values(sending=SENDING, now=now),
                ReturnValues="ALL_OLD",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            raw = exc.response.get("Item")  # ALL_OLD; older endpoints omit it: read instead
            if isinstance(raw, dict) and raw:
                current = deserialize(raw)
            else:
                current = self._get(email, source, step) or {}
            if current.get("state") == SENT:
                return Claim("already_sent", message_id=current.get("ses_message_id"))
            logged = self.sent(email, source, step)
            if logged is not None:
                return Claim("already_sent", message_id=logged.get("ses_message_id"))
            return Claim("in_flight", lease_until=int(current.get("lease_until", 0)))
        previous = response.get("Attributes")
        if previous:  # we took over an expired claim: did its holder send?
            old = deserialize(previous)
            logged = self.sent(email, source, step)
            if logged is not None or int(old.get("log_until", now)) < now:
                self.release(email, source, step, claim_id, restore=previous)
                return Claim("already_sent", message_id=(logged or {}).get("ses_message_id"))
            return Claim("claimed", claim_id=claim_id, took_over=True)
        return Claim("claimed", claim_id=claim_id)

    def claimed(self, emails: Iterable[str], source: str, step: str) -> set[str]:
        """Those of ``emails`` whose (source, step) send was claimed: sent, or in flight (a
        released claim is deleted). One BatchGetItem per 100, keys only."""
        found = batch_get(
            self.client,
            self.table,
            [key(keys.sub_pk(e), keys.send_claim_sk(source, step)) for e in emails],
            ProjectionExpression="PK",
        )
        return {keys.email_from_sub(deserialize(raw)["PK"]) for raw in found}

    def sent(self, email: str, source: str, step: str) -> dict[str, Any] | None:
        """The ``SENT#`` item of (source, step), if this subscriber's log holds one."""
        return next(self.entries(email, source=source, step=step), None)

    def entries(self, email: str, **match: str) -> Iterator[dict[str, Any]]:
        """The subscriber's ``SENT#`` items, oldest first, whose attributes equal ``match``
        (e.g. ``ses_message_id=...``): the one reader of the send log."""
        names = {f"#a{i}": name for i, name in enumerate(match)}
        params: dict[str, Any] = {f"v{i}": value for i, value in enumerate(match.values())}
        query: dict[str, Any] = {}
        if match:
            query["FilterExpression"] = " AND ".join(f"#a{i} = :v{i}" for i in range(len(match)))
            query["ExpressionAttributeNames"] = names
        for raw in query_all(
            self.client,
            TableName=self.table,
            KeyConditionExpression="PK = :pk AND begins_with(SK, :prefix)",
            ExpressionAttributeValues=values(pk=keys.sub_pk(email), prefix=keys.SENT_PREFIX, **params),
            ConsistentRead=True,
            **query,
        ):
            yield deserialize(raw)

    def complete(self, record: SentRecord, *, count: bool = True) -> bool:
        """Write ``SENT#`` unless it exists (one conditional PutItem). False: the entry was
        written before (by a recovery from an SES event). With ``count`` the entry is marked
        ``fold_count``: the stats fold adds its ``send`` to the source, template and day counters
        from the entry's stream record, once (``shared.store.stream_counts``); without, a caller
        counts it (a broadcast batch). A counter never holds up or fails the record of a mail SES
        accepted: the send writes no counter."""
        item = sent_item(record)
        if count:
            item[FOLD_COUNT] = True
        put: PutTypeDef = {
            "TableName": self.table,
            "Item": serialize(item),
            "ConditionExpression": "attribute_not_exists(PK)",
        }
        return self._put_new(put)

    def _put_new(self, put: PutTypeDef) -> bool:
        try:
            self.client.put_item(**put)
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            return False
        return True

    def record_evidence(self, evidence: list[SendEvidence], *, ttl_days: int) -> list[SendEvidence]:
        """Write the ``SENT#`` entry of every send that ``evidence`` proves SES accepted and
        whose claim is still ``sending`` for that send id with no entry (its worker died
        between SES and the log), and add the send counts its sends left pending (busy
        counters: a ``SENT#`` entry's ``count_pending``, a broadcast's ``UNCOUNTED#`` ledger).
        Returns the evidence that wrote an entry; raises when a pending count stayed busy (the
        caller's records are delivered again).

        Two looks. The first reads eventually consistent and finds nearly every entry written:
        the entry at the key the send's ``sent_at`` tag names, with the ledgers (one
        BatchGetItem, half a read unit per event); for evidence without that tag (mail of
        earlier versions) or whose entry it did not find, the claims, then the entries' keys
        the claims name and the ledgers (two BatchGetItems). A send it finds no entry for is looked at again,
        strongly consistent, before anything is written: a claim read stale could be one that
        was released and taken again since, naming an older ``sent_at``, and an entry a moment
        old could be missed. Only a send whose worker died after SES takes that second look."""
        wanted: dict[tuple[str, str, str], SendEvidence] = {}
        for found in evidence:
            wanted.setdefault((found.email, found.source, found.step), found)
        if not wanted:
            return []
        tagged, tagged_ledgers = self._logged_by_tag(wanted)
        wanted = {k: e for k, e in wanted.items() if k not in tagged}
        orphans = self._orphans(wanted, consistent=False)
        logged, pending_ledgers = self._logs_and_ledgers(list(orphans.values()), consistent=False)
        pending_ledgers += [ledger for ledger in tagged_ledgers if ledger not in pending_ledgers]
        unlogged = {k: wanted[k] for k, (_, claim) in orphans.items() if _entry(logged, claim) is None}
        if unlogged:
            confirmed = self._orphans(unlogged, consistent=True)
            again, _ = self._logs_and_ledgers(list(confirmed.values()), consistent=True)
            logged.update(again)
            orphans = {**{k: o for k, o in orphans.items() if k not in unlogged}, **confirmed}
        written = []
        for found, claim in orphans.values():
            sent_at = str(claim.get("sent_at") or "")
            if sent_at:
                entry = _entry(logged, claim)
                if entry is not None:
                    if entry.get(COUNT_PENDING):
                        self._settle_pending(found, claim, entry)
                    continue
            elif self.sent(found.email, found.source, found.step) is not None:  # an older claim
                continue
            record = SentRecord(
                email=found.email,
                source=found.source,
                step=found.step,
                send_id=found.send_id,
                template=str(claim.get("template") or found.template),
                subject=found.subject,
                ses_message_id=found.ses_message_id,
                transactional=found.transactional,
                sent_at=sent_at or found.at,
                ttl=int(claim.get("log_until") or 0) or clock.ttl_after(ttl_days),
                recovered=RECOVERED_FROM_EVENT,
            )
            if self.complete(record, count=bool(claim.get("count", True))):
                written.append(found)
        self._settle_ledgers(pending_ledgers)
        return written

    def _logged_by_tag(
        self, wanted: dict[tuple[str, str, str], SendEvidence]
    ) -> tuple[set[tuple[str, str, str]], list[dict[str, Any]]]:
        """The sends of ``wanted`` whose ``SENT#`` entry exists, found at the key their
        ``sent_at`` tag names, with no claim read; and the ledgers of their (source, template)
        pairs that hold sends still to be counted. One eventually consistent BatchGetItem (half
        a read unit per event): an entry read stale is missed, never invented, and a send found
        with no entry goes the claims' way (:meth:`_orphans`), which writes nothing before its
        strongly consistent look. An entry left ``count_pending`` is settled here."""
        by_key = {
            (found.email, keys.sent_sk(found.sent_at, found.source, found.send_id)): k
            for k, found in wanted.items()
            if found.sent_at
        }
        if not by_key:
            return set(), []
        ledgers = {keys.uncounted_key(wanted[k].source, wanted[k].template) for k in by_key.values()}
        entries = [key(keys.sub_pk(email), sk) for email, sk in by_key]
        logged, pending = self._read_logs(entries, ledgers, consistent=False)
        found: set[tuple[str, str, str]] = set()
        for entry_key, entry in logged.items():
            k = by_key[entry_key]
            if entry.get(COUNT_PENDING):
                self._settle_pending(wanted[k], {}, entry)
            found.add(k)
        return found, pending

    def _orphans(
        self, wanted: dict[tuple[str, str, str], SendEvidence], *, consistent: bool
    ) -> dict[tuple[str, str, str], tuple[SendEvidence, dict[str, Any]]]:
        """The sends of ``wanted`` whose claim is ``sending`` for the evidence's send id, with
        their claims (one BatchGetItem per 100)."""
        claim_keys = [key(keys.sub_pk(e), keys.send_claim_sk(src, step)) for e, src, step in wanted]
        claims: dict[tuple[str, str, str], dict[str, Any]] = {}
        for raw in batch_get(self.client, self.table, claim_keys, ConsistentRead=consistent):
            item = deserialize(raw)
            claims[(keys.email_from_sub(item["PK"]), str(item.get("source")), str(item.get("step")))] = item
        return {
            k: (e, claims[k])
            for k, e in wanted.items()
            if k in claims and claims[k].get("state") == SENDING and claims[k].get("send_id") == e.send_id
        }

    def _logs_and_ledgers(
        self, orphans: list[tuple[SendEvidence, dict[str, Any]]], *, consistent: bool
    ) -> tuple[dict[tuple[str, str], dict[str, Any]], list[dict[str, Any]]]:
        """One BatchGetItem: the ``SENT#`` entries the claims name (key and ``count_pending``)
        and, for sends a caller counts (a broadcast batch: the claim's ``count`` is false),
        their (source, template) ledger of sends still to be counted, when it holds some. A
        ledger read stale is safe: the move is conditioned on what it still holds."""
        ledgers = {
            keys.uncounted_key(e.source, str(c.get("template") or e.template))
            for e, c in orphans
            if not c.get("count", True)
        }
        read = [
            key(keys.sub_pk(e.email), keys.sent_sk(c["sent_at"], e.source, e.send_id))
            for e, c in orphans
            if c.get("sent_at")
        ]
        return self._read_logs(read, ledgers, consistent=consistent)

    def _read_logs(
        self, entries: list[dict[str, Any]], ledgers: set[tuple[str, str]], *, consistent: bool
    ) -> tuple[dict[tuple[str, str], dict[str, Any]], list[dict[str, Any]]]:
        """The ``SENT#`` ``entries`` that exist, by (email, SK), and the ``ledgers`` that hold
        sends to count: one BatchGetItem per 100 keys, only what the checks read."""
        logged: dict[tuple[str, str], dict[str, Any]] = {}
        pending: list[dict[str, Any]] = []
        if not entries and not ledgers:
            return logged, pending
        for item in map(
            deserialize,
            batch_get(
                self.client,
                self.table,
                [*entries, *(key(pk, sk) for pk, sk in sorted(ledgers))],
                ConsistentRead=consistent,
                ProjectionExpression="PK, SK, #pending, #send, #source, #template",
                ExpressionAttributeNames={
                    "#pending": COUNT_PENDING,
                    "#send": "send",
                    "#source": "source",
                    "#template": "template",
                },
            ),
        ):
            if str(item["PK"]).startswith(f"{keys.SUB}{keys.SEP}"):
                logged[(keys.email_from_sub(item["PK"]), str(item["SK"]))] = item
            elif int(item.get("send", 0)) > 0:
                pending.append(item)
        return logged, pending

    def _settle_ledgers(self, ledgers: list[dict[str, Any]]) -> None:
        for ledger in ledgers:
            source, template, n = str(ledger["source"]), str(ledger["template"]), int(ledger["send"])

            def move(source: str = source, template: str = template, n: int = n) -> bool:
                return settle_uncounted(self.client, self.table, source, template, n, at=clock.iso())

            moved = settle_soon(move)
            if moved is None:
                raise ConcurrentModification("a broadcast's uncounted sends stayed busy: retry")
            logger.info("uncounted sends counted", source=source, template=template, sends=n, moved=moved)

    def _settle_pending(self, found: SendEvidence, claim: dict[str, Any], entry: dict[str, Any]) -> None:
        template = str(claim.get("template") or found.template)
        sent_key = key(str(entry["PK"]), str(entry["SK"]))
        settled = settle_soon(
            lambda: settle_send(
                self.client, self.table, sent_key, found.source, template, at=clock.iso(), step=found.step
            )
        )
        if settled is None:
            raise ConcurrentModification("a pending send count stayed busy: retry")
        logger.info("pending send count added", source=found.source, send_id=found.send_id, added=settled)

    def release(
        self, email: str, source: str, step: str, claim_id: str, *, restore: dict[str, Any] | None = None
    ) -> None:
        """Drop our claim (nothing was sent); ``restore`` puts back the claim we took over
        (its attributes as DynamoDB returned them)."""
        condition: dict[str, Any] = {
            "ConditionExpression": "claim_id = :cid AND #state = :sending",
            "ExpressionAttributeNames": {"#state": "state"},
            "ExpressionAttributeValues": values(cid=claim_id, sending=SENDING),
        }
        try:
            if restore is not None:
                self.client.put_item(TableName=self.table, Item=restore, **condition)
            else:
                claim_key = key(keys.sub_pk(email), keys.send_claim_sk(source, step))
                self.client.delete_item(TableName=self.table, Key=claim_key, **condition)
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise

    def _get(self, email: str, source: str, step: str) -> dict[str, Any] | None:
        response = self.client.get_item(
            TableName=self.table,
            Key=key(keys.sub_pk(email), keys.send_claim_sk(source, step)),
            ConsistentRead=True,
        )
        item = response.get("Item")
        return deserialize(item) if item else None
