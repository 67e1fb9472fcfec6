"""Send-once claims and the ``SENT#`` send log (main table, under ``SUB#<email>``).

One claim item per (subscriber, source, step): ``SK = SEND#<source>#<step>``.

- ``claim`` is one conditional PutItem: it succeeds when no claim exists, or when a
  previous claim is still ``sending`` but its lease expired (that worker crashed). A
  claim in state ``sent`` never expires and blocks every later send of that key.
- ``complete`` writes the ``SENT#`` item (with ``ttl``), then turns the claim ``sent``
  (only if it is still ours).
- ``release`` deletes our claim when nothing was sent (SES refused or throttled), so a
  retry can send.

Why not Powertools idempotency: its records are built to expire (``expires_after_seconds``)
and are deleted when the function raises. Send-once needs a record that never stops
blocking after success, and a lease that tells "in flight" from "crashed", in one
conditional write; a plain conditional claim does exactly that with no second record.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Literal

from botocore.exceptions import ClientError

from shared import keys
from shared.aws import client as aws_client
from shared.dynamo import deserialize, key, serialize, values

SENDING = "sending"
SENT = "sent"

ClaimStatus = Literal["claimed", "already_sent", "in_flight"]


@dataclass(frozen=True)
class Claim:
    status: ClaimStatus
    claim_id: str = ""
    message_id: str | None = None  # when already sent
    lease_until: int = 0  # when in flight


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


class SendLog:
    def __init__(self, table_name: str, client: Any | None = None) -> None:
        self.table = table_name
        self._client = client

    @property
    def client(self) -> Any:
        return self._client or aws_client("dynamodb")

    def claim(
        self, email: str, source: str, step: str, *, send_id: str, template: str, now: int, lease_seconds: int
    ) -> Claim:
        claim_id = uuid.uuid4().hex
        item = {
            "PK": keys.sub_pk(email),
            "SK": keys.send_claim_sk(source, step),
            "state": SENDING,
            "claim_id": claim_id,
            "lease_until": now + lease_seconds,
            "send_id": send_id,
            "template": template,
            "source": source,
            "step": step,
            "claimed_at": now,
        }
        try:
            self.client.put_item(
                TableName=self.table,
                Item=serialize(item),
                ConditionExpression="attribute_not_exists(PK) OR (#state = :sending AND lease_until < :now)",
                ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues=values(sending=SENDING, now=now),
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            raw = exc.response.get("Item")  # ALL_OLD; older endpoints omit it: read instead
            current = deserialize(raw) if raw else (self._get(email, source, step) or {})
            if current.get("state") == SENT:
                return Claim("already_sent", message_id=current.get("ses_message_id"))
            return Claim("in_flight", lease_until=int(current.get("lease_until", 0)))
        return Claim("claimed", claim_id=claim_id)

    def complete(self, claim_id: str, record: SentRecord) -> bool:
        """Write SENT#, then mark the claim sent. False when the lease was lost (another
        worker took over; its own SENT# records its own send).

        Two plain writes, in this order, rather than one transaction: a crash between them
        leaves SENT# and a ``sending`` claim, so a retry after the lease sends one duplicate
        and logs it too; no send is ever left unlogged. It also costs 2 write units instead
        of the 4 of a two-item transaction.
        """
        sent_item = {
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
        self.client.put_item(TableName=self.table, Item=serialize(sent_item))
        done = {
            "PK": keys.sub_pk(record.email),
            "SK": keys.send_claim_sk(record.source, record.step),
            "state": SENT,
            "send_id": record.send_id,
            "template": record.template,
            "source": record.source,
            "step": record.step,
            "ses_message_id": record.ses_message_id,
            "sent_at": record.sent_at,
            "sent_sk": sent_item["SK"],
        }
        try:
            self.client.put_item(
                TableName=self.table,
                Item=serialize(done),
                ConditionExpression="claim_id = :cid",
                ExpressionAttributeValues=values(cid=claim_id),
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            return False
        return True

    def release(self, email: str, source: str, step: str, claim_id: str) -> None:
        try:
            self.client.delete_item(
                TableName=self.table,
                Key=key(keys.sub_pk(email), keys.send_claim_sk(source, step)),
                ConditionExpression="claim_id = :cid AND #state = :sending",
                ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues=values(cid=claim_id, sending=SENDING),
            )
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
