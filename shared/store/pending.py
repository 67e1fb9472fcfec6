"""Pending sign-ups: the adapter of the ``SUB#<email>`` / ``PENDING`` item (main table).

A pending sign-up is never a profile: no audience, scan or sequence reads it as a
subscriber. It holds the reader's choices until they confirm, ``expires_at`` (epoch
seconds) and the table's TTL attribute. Every read here treats an item past ``expires_at``
as absent: TTL deletion may lag by days and is never relied on.

The per-address cooldown is ONE conditional PutItem: a new sign-up is written (and a
confirmation mail may go out) only when there is no pending item, its last mail is older
than the cooldown, or it has expired.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from shared.core.aws import client as aws_client
from shared.core.specs import TTL_ATTRIBUTE
from shared.store import keys
from shared.store.dynamo import deserialize, from_dynamo, key, serialize, values

DOUBLE = "double"
SINGLE = "single"
COOLDOWN_CONDITION = "attribute_not_exists(PK) OR last_mail_at < :cutoff OR expires_at <= :now"


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


class PendingSignups:
    def __init__(self, table_name: str, client: Any | None = None) -> None:
        self.table = table_name
        self._client = client

    @property
    def client(self) -> Any:
        return self._client or aws_client("dynamodb")

    def get(self, email: str, *, now: float) -> PendingSignup | None:
        """The live pending sign-up of ``email``; an expired one reads as None."""
        pk, sk = keys.pending_key(email)
        item = self.client.get_item(TableName=self.table, Key=key(pk, sk), ConsistentRead=True).get("Item")
        if not item:
            return None
        pending = PendingSignup.from_item(deserialize(item))
        return None if pending.expired(now) else pending

    def claim(self, pending: PendingSignup, *, cooldown_seconds: int, now: int) -> bool:
        """Write ``pending`` unless the address got a confirmation mail within the cooldown
        (one conditional PutItem); False: within the cooldown, nothing written."""
        try:
            self.client.put_item(
                TableName=self.table,
                Item=serialize(pending.to_item()),
                ConditionExpression=COOLDOWN_CONDITION,
                ExpressionAttributeValues=values(cutoff=now - cooldown_seconds, now=now),
            )
        except self.client.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def release(self, email: str, signup_id: str) -> None:
        """No mail went out after all: lift the cooldown of this sign-up (a retry may mail)."""
        pk, sk = keys.pending_key(email)
        try:
            self.client.update_item(
                TableName=self.table,
                Key=key(pk, sk),
                UpdateExpression="SET last_mail_at = :zero",
                ConditionExpression="signup_id = :id",
                ExpressionAttributeValues=values(zero=0, id=signup_id),
            )
        except self.client.exceptions.ConditionalCheckFailedException:
            return

    def delete_action(self, email: str, signup_id: str) -> dict[str, Any]:
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

    def forget_send_claim(self, email: str, source: str, step: str) -> None:
        """Drop the send-once claim of a confirmation mail once it went out: the cooldown
        already keeps it single, and an address that never confirms must leave no item that
        outlives its sign-up (the ``SENT#`` log expires with it)."""
        self.client.delete_item(
            TableName=self.table, Key=key(keys.sub_pk(email), keys.send_claim_sk(source, step))
        )

    def live(self, *, now: int) -> Iterator[PendingSignup]:
        """Every unexpired pending sign-up (a filtered Scan; operators' listing)."""
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "FilterExpression": "SK = :sk AND expires_at > :now",
            "ExpressionAttributeValues": values(sk=keys.PENDING, now=now),
        }
        start: dict[str, Any] | None = None
        while True:
            page = self.client.scan(**kwargs, **({"ExclusiveStartKey": start} if start else {}))
            for raw in page.get("Items", []):
                yield PendingSignup.from_item(deserialize(raw))
            start = page.get("LastEvaluatedKey")
            if not start:
                return
