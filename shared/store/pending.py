"""Pending sign-ups: the adapter of the ``SUB#<email>`` / ``PENDING`` item (main table).

A pending sign-up is never a profile: no audience, scan or sequence reads it as a
subscriber. It holds the reader's choices until they confirm, ``expires_at`` (epoch
seconds) and the table's TTL attribute. Every read here treats an item past ``expires_at``
as absent: TTL deletion may lag by days and is never relied on.

A sign-up reads everything its decision needs in ONE consistent BatchGetItem
(:meth:`PendingSignups.read_state`): the address's profile, ``SUPPRESSION`` item, erase
tombstone and pending item, its mailbox's cooldown item and its domain's counter of this
hour. A sign-up that may mail is admitted by ONE transaction (:meth:`PendingSignups.admit`):
the pending item (conditioned on the one that was read), the mailbox's cooldown (at most one
confirmation mail per mailbox per cooldown window: the key folds case, drops a ``+tag`` and
folds what the provider documents as one mailbox, :func:`mailbox_key`), the domain's hourly
cap (or, over it, the domain's held budget of the hour: a HELD sign-up, mailed later) and the
absence of a ``SUPPRESSION`` item. Before all that, one conditional counter per client address
and hour (:meth:`PendingSignups.count_source`) stops one machine before it fills a domain's cap.

A new sign-up (no live one before) is counted (``signup`` of ``shared.store.stats``) once its
confirmation mail went out (:meth:`PendingSignups.mailed`, from the send pipeline): the
pending item carries ``uncounted`` until then, and the count removes it in the same
transaction, so once.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from shared.core.models import SUBSCRIBED
from shared.core.specs import TTL_ATTRIBUTE
from shared.store import keys
from shared.store.dynamo import (
    Action,
    TableAdapter,
    TransactionConflict,
    batch_get,
    deserialize,
    from_dynamo,
    key,
    page_start,
    serialize,
    transact,
    values,
)
from shared.store.stats import SIGNUP, retry_contended, signup_counters
from shared.store.subscribers import Profile

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import (
        ConditionCheckTypeDef,
        PutTypeDef,
        TransactWriteItemTypeDef,
        UpdateTypeDef,
    )


DOUBLE = "double"
SINGLE = "single"
UNCOUNTED = "uncounted"  # on a pending item whose sign-up is new and not counted yet
MAILED = "mailed"  # on a pending item whose confirmation mail went out
HELD_AT = "held_at"  # on a pending item held by its domain's cap: when (its mail is delayed)
# Confirmation mails to one recipient domain per hour mailed at once; above this, sign-ups of the
# domain are HELD (mailed later, the answer says so) up to DOMAIN_HELD_PER_HOUR more, then
# refused with "try again after the hour" (list bombing spread over many mailboxes).
DOMAIN_CAP_PER_HOUR = 1000
DOMAIN_HELD_PER_HOUR = 100
# Sign-ups per client address (API Gateway's sourceIp) per hour, before anything else is read.
SOURCE_CAP_PER_HOUR = 100
# The providers' documented rules about which spellings reach one mailbox (docs/signup.md, "The
# cooldown is per mailbox"): a domain that is another name of the same mail service, and the
# domains whose local parts ignore dots. Gmail: "Dots don't matter in Gmail addresses"
# (https://support.google.com/mail/answer/7436150); googlemail.com is Gmail under its other name
# (https://support.google.com/mail/answer/10313).
GMAIL = "gmail.com"
SAME_MAILBOX_DOMAINS = {"googlemail.com": GMAIL}
DOTLESS_DOMAINS = frozenset({GMAIL})
DomainMode = Literal["open", "held", "full"]
# What an admission wrote: a NEW sign-up (no live one before), or a live one RENEWED after the
# cooldown (a new sign-up id: the earlier link no longer confirms).
Claimed = Literal["new", "renewed"]
NEW: Claimed = "new"
RENEWED: Claimed = "renewed"


@dataclass(frozen=True)
class PendingSignup:
    email: str
    signup_id: str  # random; the confirmation token names it
    form: str  # the form id the sign-up came from
    created_at: str  # ISO timestamp
    expires_at: int  # epoch seconds: after this the sign-up is gone
    last_mail_at: int  # epoch seconds of the last confirmation mail (0: none went out)
    first_name: str | None = None
    topics: tuple[str, ...] | None = None  # None: no choice made (defaults apply)
    mailed: bool = False  # its confirmation mail went out (a redelivered job sends nothing)
    held_at: int = 0  # epoch seconds it was held by its domain's cap (0: not held)

    def to_item(self, *, uncounted: bool = False) -> dict[str, Any]:
        pk, sk = keys.pending_key(self.email)
        item: dict[str, Any] = {
            "PK": pk,
            "SK": sk,
            "email": self.email,
            "signup_id": self.signup_id,
            "form": self.form,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "last_mail_at": self.last_mail_at,
            TTL_ATTRIBUTE: self.expires_at,
        }
        if self.first_name is not None:
            item["first_name"] = self.first_name
        if self.topics is not None:
            item["topics"] = list(self.topics)
        if uncounted:
            item[UNCOUNTED] = True
        if self.held_at:
            item[HELD_AT] = self.held_at
        return item

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> PendingSignup:
        plain = from_dynamo(item)  # Decimal -> int/float, sets -> sorted lists
        return cls(
            email=plain["email"],
            signup_id=plain["signup_id"],
            form=plain.get("form", ""),
            created_at=plain.get("created_at", ""),
            expires_at=int(plain.get("expires_at", 0)),
            last_mail_at=int(plain.get("last_mail_at", 0)),
            first_name=plain.get("first_name"),
            topics=tuple(plain["topics"]) if "topics" in plain else None,
            mailed=bool(plain.get(MAILED, False)),
            held_at=int(plain.get(HELD_AT, 0)),
        )

    def expired(self, now: float) -> bool:
        return self.expires_at <= now

    @property
    def step(self) -> str:
        """The send-once step of this sign-up's confirmation mail (source ``signup``)."""
        return f"{CONFIRM_STEP}{self.signup_id}"


CONFIRM_STEP = "confirm-"


def mailbox_domain(domain: str) -> str:
    """The mail service's own name of ``domain`` (``googlemail.com`` -> ``gmail.com``)."""
    lowered = domain.lower()
    return SAME_MAILBOX_DOMAINS.get(lowered, lowered)


def mailbox_key(email: str) -> str:
    """The mailbox an address reaches, as the cooldown knows it: the local part with case
    folded and anything from the first ``+`` dropped (``Ada+news@Example.com`` and
    ``ada@example.com`` are one mailbox), dots removed where the provider documents that they
    do not matter (Gmail: ``a.d.a@gmail.com`` is ``ada@gmail.com``), then ``@`` and the
    domain under the service's own name (``googlemail.com`` is ``gmail.com``). A local part
    that starts with ``+`` (or is only dots) is kept whole."""
    local, _, domain = email.rpartition("@")
    domain = mailbox_domain(domain)
    base = local.split("+", 1)[0] or local
    if domain in DOTLESS_DOMAINS:
        base = base.replace(".", "") or base
    return f"{base.casefold()}@{domain}"


def domain_of(email: str) -> str:
    """The recipient domain the hourly cap counts (its service's own name: one Gmail)."""
    return mailbox_domain(email.rpartition("@")[2])


def hour_of(now: int) -> str:
    return datetime.fromtimestamp(now, UTC).strftime("%Y%m%d%H")


@dataclass(frozen=True)
class SignupState:
    """What one read found for a sign-up (:meth:`PendingSignups.read_state`)."""

    profile: Profile | None
    suppressed: bool  # the address's SUPPRESSION item exists (profile or not)
    erased: bool  # its erase tombstone exists
    pending: PendingSignup | None  # the live pending sign-up (an expired one reads as None)
    pending_id: str | None  # the signup_id of the pending item as stored (expired or not)
    mailbox_last_mail_at: int  # the mailbox's last confirmation mail (0: none remembered)
    domain_mails: int  # confirmation mails to the address's domain this hour
    domain_held: int = 0  # sign-ups of the domain held this hour (mailed later)

    def domain_mode(self, *, cap: int, held_cap: int) -> DomainMode:
        """``open``: mailed now; ``held``: over the cap, mailed later; ``full``: the held budget
        of the hour is spent too (the reader is asked to try again after the hour)."""
        if self.domain_mails < cap:
            return "open"
        return "held" if self.domain_held < held_cap else "full"

    def within_cooldown(self, *, cooldown_seconds: int, now: int) -> bool:
        return self.mailbox_last_mail_at >= now - cooldown_seconds and self.mailbox_last_mail_at > 0


class PendingSignups(TableAdapter):
    def __init__(
        self,
        table_name: str,
        client: DynamoDBClient | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(table_name, client)
        self._sleep = sleep  # the pause before a counted transaction runs again (contention)

    def get(self, email: str, *, now: float) -> PendingSignup | None:
        """The live pending sign-up of ``email``; an expired one reads as None."""
        pk, sk = keys.pending_key(email)
        item = self.client.get_item(TableName=self.table, Key=key(pk, sk), ConsistentRead=True).get("Item")
        if not item:
            return None
        pending = PendingSignup.from_item(deserialize(item))
        return None if pending.expired(now) else pending

    def read_state(self, email: str, *, now: int) -> SignupState:
        """Everything a sign-up of ``email`` decides on, in ONE consistent BatchGetItem (the
        same request whatever the address's state)."""
        sub = keys.sub_pk(email)
        wanted = {
            "profile": (sub, keys.PROFILE),
            "suppression": (sub, keys.SUPPRESSION),
            "erased": (keys.erased_pk(email), keys.ERASED),
            "pending": keys.pending_key(email),
            "mailbox": (keys.signup_mailbox_pk(mailbox_key(email)), keys.COOLDOWN),
            "domain": keys.signup_domain_key(domain_of(email), hour_of(now)),
        }
        found = {
            (item["PK"], item["SK"]): item
            for item in (
                deserialize(raw)
                for raw in batch_get(
                    self.client, self.table, [key(pk, sk) for pk, sk in wanted.values()], ConsistentRead=True
                )
            )
        }
        pending_item = found.get(wanted["pending"])
        pending = PendingSignup.from_item(pending_item) if pending_item else None
        profile_item = found.get(wanted["profile"])
        return SignupState(
            profile=Profile.from_item(profile_item) if profile_item else None,
            suppressed=wanted["suppression"] in found,
            erased=wanted["erased"] in found,
            pending=None if pending is None or pending.expired(now) else pending,
            pending_id=pending.signup_id if pending else None,
            mailbox_last_mail_at=int(found.get(wanted["mailbox"], {}).get("last_mail_at", 0)),
            domain_mails=int(found.get(wanted["domain"], {}).get("mails", 0)),
            domain_held=int(found.get(wanted["domain"], {}).get("held", 0)),
        )

    def count_source(self, source: str, *, cap: int, now: int) -> bool:
        """Count one sign-up from ``source`` (a keyed hash of the client's address) in this
        hour: one conditional UpdateItem. False (nothing written): ``cap`` sign-ups from it
        this hour already."""
        pk, sk = keys.signup_source_key(source, hour_of(now))
        try:
            self.client.update_item(
                TableName=self.table,
                Key=key(pk, sk),
                UpdateExpression="ADD signups :one SET #ttl = :ttl",
                ConditionExpression="attribute_not_exists(signups) OR signups < :cap",
                ExpressionAttributeNames={"#ttl": TTL_ATTRIBUTE},
                ExpressionAttributeValues=values(one=1, cap=cap, ttl=now + 2 * 3600),
            )
        except self.client.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def admit(
        self,
        pending: PendingSignup,
        state: SignupState,
        *,
        cooldown_seconds: int,
        domain_cap: int,
        now: int,
        held_cap: int = DOMAIN_HELD_PER_HOUR,
    ) -> Claimed | None:
        """Write ``pending`` in ONE transaction whose conditions are the sign-up rules, so it
        commits only for an address that may be mailed, whatever the read before it saw:
        the pending item is the one ``state`` read (or none), the mailbox's last confirmation
        mail is older than the cooldown, the domain's mails this hour are under the cap, the
        address has no ``SUPPRESSION`` item, its profile (if any) is neither subscribed nor
        suppressed, and no erase tombstone holds it back (one older than its profile does
        not). A ``pending`` with ``held_at`` (its domain was over the cap when read) takes one
        of the domain's held places of the hour instead (the counter's ``held`` under
        ``held_cap``, its ``mails`` at the cap). Every sign-up of a domain in one state sends
        this same request (the answer takes the same time whatever the address's state); a
        refused one writes nothing. ``"new"`` (no live sign-up before: counted when mailed) or
        ``"renewed"``; None: refused."""
        claimed: Claimed = NEW if state.pending is None else RENEWED
        pk, sk = keys.pending_key(pending.email)
        sub = keys.sub_pk(pending.email)
        mailbox_pk = keys.signup_mailbox_pk(mailbox_key(pending.email))
        domain_pk, domain_sk = keys.signup_domain_key(domain_of(pending.email), hour_of(now))
        put_pending: PutTypeDef = {
            "TableName": self.table,
            "Item": serialize(pending.to_item(uncounted=claimed == NEW)),
            "ConditionExpression": "attribute_not_exists(PK)",
        }
        if state.pending_id is not None:
            put_pending["ConditionExpression"] = "signup_id = :id"
            put_pending["ExpressionAttributeValues"] = values(id=state.pending_id)
        actions = [
            Action("pending", {"Put": put_pending}),
            Action(
                "mailbox",
                {
                    "Put": {
                        "TableName": self.table,
                        "Item": serialize(
                            {
                                "PK": mailbox_pk,
                                "SK": keys.COOLDOWN,
                                "last_mail_at": now,
                                TTL_ATTRIBUTE: now + max(cooldown_seconds, 1),
                            }
                        ),
                        "ConditionExpression": "attribute_not_exists(PK) OR last_mail_at < :cutoff",
                        "ExpressionAttributeValues": values(cutoff=now - cooldown_seconds),
                    }
                },
            ),
            Action(
                "domain",
                {"Update": self._domain_count(pending, domain_pk, domain_sk, domain_cap, held_cap, now)},
            ),
            Action(
                "suppression",
                {
                    "ConditionCheck": {
                        "TableName": self.table,
                        "Key": key(sub, keys.SUPPRESSION),
                        "ConditionExpression": "attribute_not_exists(PK)",
                    }
                },
            ),
            Action(
                "profile",
                {
                    "ConditionCheck": {
                        "TableName": self.table,
                        "Key": key(sub, keys.PROFILE),
                        "ConditionExpression": "attribute_not_exists(PK) OR "
                        "(#status <> :subscribed AND (attribute_not_exists(suppressed) OR suppressed = :no))",
                        "ExpressionAttributeNames": {"#status": "status"},
                        "ExpressionAttributeValues": values(subscribed=SUBSCRIBED, no=False),
                    }
                },
            ),
        ]
        # The erase tombstone holds the address back unless a profile came back after the
        # erase (through the events API: the profile, created after the tombstone, decides).
        tombstone: ConditionCheckTypeDef = {
            "TableName": self.table,
            "Key": key(keys.erased_pk(pending.email), keys.ERASED),
            "ConditionExpression": "attribute_not_exists(PK)",
        }
        if state.profile is not None and state.profile.created_at:
            tombstone["ConditionExpression"] = "attribute_not_exists(PK) OR #at < :created"
            tombstone["ExpressionAttributeNames"] = {"#at": "at"}
            tombstone["ExpressionAttributeValues"] = values(created=state.profile.created_at)
        actions.append(Action("erased", {"ConditionCheck": tombstone}))
        try:
            retry_contended(lambda: transact(self.client, actions), sleep=self._sleep)
        except TransactionConflict:
            return None
        return claimed

    def _domain_count(
        self, pending: PendingSignup, pk: str, sk: str, cap: int, held_cap: int, now: int
    ) -> UpdateTypeDef:
        """The domain counter's part of an admission: one more mail under the cap, or (a held
        sign-up) one more held place at the cap, under ``held_cap``."""
        counter: UpdateTypeDef = {
            "TableName": self.table,
            "Key": key(pk, sk),
            "UpdateExpression": "ADD mails :one SET #ttl = :ttl",
            "ConditionExpression": "attribute_not_exists(mails) OR mails < :cap",
            "ExpressionAttributeNames": {"#ttl": TTL_ATTRIBUTE},
            "ExpressionAttributeValues": values(one=1, cap=cap, ttl=now + 2 * 3600),
        }
        if not pending.held_at:
            return counter
        return {
            **counter,
            "UpdateExpression": "ADD held :one SET #ttl = :ttl, held_since = if_not_exists(held_since, :now)",
            "ConditionExpression": "mails >= :cap AND (attribute_not_exists(held) OR held < :held_cap)",
            "ExpressionAttributeValues": values(
                one=1, cap=cap, held_cap=held_cap, now=now, ttl=now + 2 * 3600
            ),
        }

    def confirmation(
        self, email: str, step: str, *, now: int
    ) -> tuple[Profile | None, bool, PendingSignup | None]:
        """What the confirmation mail of ``step`` goes to, in ONE consistent BatchGetItem: the
        address's profile, whether its ``SUPPRESSION`` item exists, and its live pending
        sign-up when it is the one ``step`` names (None: gone, expired or replaced)."""
        sub = keys.sub_pk(email)
        wanted = [key(sub, keys.PROFILE), key(sub, keys.SUPPRESSION), key(*keys.pending_key(email))]
        found = {
            item["SK"]: item
            for item in (
                deserialize(raw) for raw in batch_get(self.client, self.table, wanted, ConsistentRead=True)
            )
        }
        pending = PendingSignup.from_item(found[keys.PENDING]) if keys.PENDING in found else None
        if pending is not None and (pending.expired(now) or pending.step != step):
            pending = None
        profile = Profile.from_item(found[keys.PROFILE]) if keys.PROFILE in found else None
        return profile, keys.SUPPRESSION in found, pending

    def sent(self, pending: PendingSignup, source: str, *, at: str) -> None:
        """The confirmation mail of ``pending`` went out: the pending item is marked ``mailed``
        (a redelivered job then sends nothing) and a new sign-up is counted in the same
        transaction (its ``uncounted`` mark removed, so once, however often the job is
        delivered); then the mail's send-once claim is dropped (no item may outlive the
        sign-up; the ``SENT#`` log expires with it)."""
        pk, sk = keys.pending_key(pending.email)
        mark: UpdateTypeDef = {
            "TableName": self.table,
            "Key": key(pk, sk),
            "UpdateExpression": f"SET {MAILED} = :yes REMOVE {UNCOUNTED}",
            "ConditionExpression": f"signup_id = :id AND attribute_exists({UNCOUNTED})",
            "ExpressionAttributeValues": values(id=pending.signup_id, yes=True),
        }
        actions = [
            Action("pending", {"Update": mark}),
            *(Action("counters", c) for c in signup_counters(self.table, SIGNUP, at=at)),
        ]
        try:
            retry_contended(lambda: transact(self.client, actions), sleep=self._sleep)
        except TransactionConflict:  # renewed, or counted by an earlier delivery of the job
            # confirmed or replaced meanwhile: nothing left to mark
            with contextlib.suppress(self.client.exceptions.ConditionalCheckFailedException):
                self.client.update_item(
                    TableName=self.table,
                    Key=key(pk, sk),
                    UpdateExpression=f"SET {MAILED} = :yes",
                    ConditionExpression="signup_id = :id",
                    ExpressionAttributeValues=values(id=pending.signup_id, yes=True),
                )
        self.client.delete_item(
            TableName=self.table,
            Key=key(keys.sub_pk(pending.email), keys.send_claim_sk(source, pending.step)),
        )

    def delete_action(self, email: str, signup_id: str) -> TransactWriteItemTypeDef:
        """A transaction action deleting this very sign-up (it must still be there)."""
        pk, sk = keys.pending_key(email)
        return {
            "Delete": {
                "TableName": self.table,
                "Key": key(pk, sk),
                "ConditionExpression": "signup_id = :id",
                "ExpressionAttributeValues": values(id=signup_id),
            }
        }

    def delete(self, email: str) -> None:
        pk, sk = keys.pending_key(email)
        self.client.delete_item(TableName=self.table, Key=key(pk, sk))

    def live(self, *, now: int) -> Iterator[PendingSignup]:
        """Every unexpired pending sign-up (a filtered Scan; operators' listing)."""
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "FilterExpression": "SK = :sk AND expires_at > :now",
            "ExpressionAttributeValues": values(sk=keys.PENDING, now=now),
        }
        start: dict[str, Any] | None = None
        while True:
            page = self.client.scan(**kwargs, **page_start(start))
            for raw in page.get("Items", []):
                yield PendingSignup.from_item(deserialize(raw))
            start = page.get("LastEvaluatedKey")
            if not start:
                return

    def held(self, *, now: int) -> tuple[list[HeldHour], list[PendingSignup]]:
        """What the domain caps hold (operators' view; one filtered Scan, paged): the domain
        counters of the last two hours that held sign-ups, and the live held sign-ups whose
        confirmation mail has not gone out yet."""
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "FilterExpression": "(begins_with(PK, :domains) AND attribute_exists(held)) OR "
            f"(SK = :sk AND attribute_exists({HELD_AT}) AND attribute_not_exists({MAILED}) "
            "AND expires_at > :now)",
            "ExpressionAttributeValues": values(domains=keys.SIGNUP_DOMAIN_PREFIX, sk=keys.PENDING, now=now),
        }
        hours: list[HeldHour] = []
        waiting: list[PendingSignup] = []
        start: dict[str, Any] | None = None
        while True:
            page = self.client.scan(**kwargs, **page_start(start))
            for raw in page.get("Items", []):
                found = deserialize(raw)
                if found["SK"] == keys.PENDING:
                    waiting.append(PendingSignup.from_item(found))
                else:
                    hours.append(HeldHour.from_item(found))
            start = page.get("LastEvaluatedKey")
            if not start:
                return hours, waiting


@dataclass(frozen=True)
class HeldHour:
    """One domain's counter of one hour that held sign-ups."""

    domain: str
    hour: str  # YYYYMMDDHH (UTC)
    mails: int  # confirmation mails mailed at once this hour (the cap's count)
    held: int  # sign-ups held this hour
    held_since: int  # epoch seconds of the hour's first held sign-up

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> HeldHour:
        plain = from_dynamo(item)
        return cls(
            domain=str(plain["PK"]).removeprefix(keys.SIGNUP_DOMAIN_PREFIX),
            hour=str(plain["SK"]).removeprefix("HOUR#"),
            mails=int(plain.get("mails", 0)),
            held=int(plain.get("held", 0)),
            held_since=int(plain.get("held_since", 0)),
        )
