"""Pending sign-ups: the adapter of the ``SUB#<email>`` / ``PENDING`` item (main table).

A pending sign-up is never a profile: no audience, scan or sequence reads it as a
subscriber. It holds the reader's choices until they confirm, ``expires_at`` (epoch
seconds) and the table's TTL attribute. Every read here treats an item past ``expires_at``
as absent: TTL deletion may lag by days and is never relied on.

The per-address cooldown is ONE conditional PutItem: a new sign-up is written (and a
confirmation mail may go out) only when there is no pending item, its last mail is older
than the cooldown, or it has expired. The same request returns the item it replaced, which
tells a NEW sign-up (no live one before) from a live one mailed again after the cooldown.

A new sign-up is counted (``signup`` of ``shared.store.stats``) once its confirmation mail
went out, in the transaction that drops the mail's send claim (:meth:`PendingSignups.mailed`),
conditioned on the claim, so once. A new sign-up whose mail could not go out is deleted again
(:meth:`PendingSignups.release`): the retry is new too, and counted when it mails.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from shared.core.specs import TTL_ATTRIBUTE
from shared.store import keys
from shared.store.dynamo import (
    Action,
    TableAdapter,
    TransactionConflict,
    deserialize,
    from_dynamo,
    key,
    page_start,
    serialize,
    transact,
    values,
)
from shared.store.stats import SIGNUP, retry_contended, signup_counter

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef


DOUBLE = "double"
SINGLE = "single"
COOLDOWN_CONDITION = "attribute_not_exists(PK) OR last_mail_at < :cutoff OR expires_at <= :now"
# What a claim wrote: a NEW sign-up (no live one before), or a live one RENEWED after the cooldown.
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

    def to_item(self) -> dict[str, Any]:
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
        return item

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> PendingSignup:
        plain = from_dynamo(item)
        return cls(
            email=plain["email"],
            signup_id=plain["signup_id"],
            form=plain.get("form", ""),
            created_at=plain.get("created_at", ""),
            expires_at=int(plain.get("expires_at", 0)),
            last_mail_at=int(plain.get("last_mail_at", 0)),
            first_name=plain.get("first_name"),
            topics=tuple(plain["topics"]) if "topics" in plain else None,
        )

    def expired(self, now: float) -> bool:
        return self.expires_at <= now


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

    def claim(self, pending: PendingSignup, *, cooldown_seconds: int, now: int) -> Claimed | None:
        """Write ``pending`` unless the address got a confirmation mail within the cooldown
        (one conditional PutItem returning the item it replaced): ``"new"`` when no live
        sign-up was there, ``"renewed"`` when a live one is mailed again; None: within the
        cooldown, nothing written."""
        try:
            answer = self.client.put_item(
                TableName=self.table,
                Item=serialize(pending.to_item()),
                ConditionExpression=COOLDOWN_CONDITION,
                ExpressionAttributeValues=values(cutoff=now - cooldown_seconds, now=now),
                ReturnValues="ALL_OLD",
            )
        except self.client.exceptions.ConditionalCheckFailedException:
            return None
        old = answer.get("Attributes")
        if old and not PendingSignup.from_item(deserialize(old)).expired(now):
            return RENEWED
        return NEW

    def mailed(self, email: str, source: str, step: str, *, claimed: Claimed, at: str) -> None:
        """The confirmation mail went out: drop its send-once claim (the cooldown already keeps
        it single, and an address that never confirms must leave no item that outlives its
        sign-up; the ``SENT#`` log expires with it). A NEW sign-up is counted in the same
        transaction, conditioned on the claim still being there, so once."""
        claim_key = key(keys.sub_pk(email), keys.send_claim_sk(source, step))
        if claimed != NEW:
            self.client.delete_item(TableName=self.table, Key=claim_key)
            return
        actions = [
            Action(
                "claim",
                {
                    "Delete": {
                        "TableName": self.table,
                        "Key": claim_key,
                        "ConditionExpression": "attribute_exists(PK)",
                    }
                },
            ),
            Action("counters", signup_counter(self.table, SIGNUP, at=at)),
        ]
        try:
            retry_contended(lambda: transact(self.client, actions), sleep=self._sleep)
        except TransactionConflict:
            return  # the claim was dropped before: this sign-up was counted with it

    def release(self, email: str, signup_id: str, *, claimed: Claimed) -> None:
        """No mail went out after all: lift the cooldown of this sign-up (a retry may mail).
        A NEW sign-up is deleted (nothing was sent for it: the retry is a new sign-up, counted
        when it mails); a RENEWED one keeps its item with ``last_mail_at`` reset."""
        pk, sk = keys.pending_key(email)
        try:
            if claimed == NEW:
                self.client.delete_item(
                    TableName=self.table,
                    Key=key(pk, sk),
                    ConditionExpression="signup_id = :id",
                    ExpressionAttributeValues=values(id=signup_id),
                )
            else:
                self.client.update_item(
                    TableName=self.table,
                    Key=key(pk, sk),
                    UpdateExpression="SET last_mail_at = :zero",
                    ConditionExpression="signup_id = :id",
                    ExpressionAttributeValues=values(zero=0, id=signup_id),
                )
        except self.client.exceptions.ConditionalCheckFailedException:
            return

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
