"""Send-once claims and the ``SENT#`` send log (main table, under ``SUB#<email>``).

One claim item per (subscriber, source, step): ``SK = SEND#<source>#<step>``.

- ``claim`` is one conditional PutItem: it succeeds when no claim exists, or when a
  previous claim's lease expired (that worker crashed, or it finished: see below).
- ``complete`` writes the ``SENT#`` item (with ``ttl``). The ``SENT#`` item is what says
  "sent": the claim is not written a second time, so a send costs 2 writes (claim, log).
  A single send also ADDs 1 to ``send`` of its source and template counters in the same
  transaction (``count=True``); a broadcast worker counts a whole batch at once instead
  (``shared.broadcasts.records``).
- When a claim is found taken (a redelivered job) or is taken over after its lease
  (``ReturnValues=ALL_OLD`` shows a previous claim), the subscriber's ``SENT#`` log is read
  for that (source, step): found -> ``already_sent``. Only these rare paths read.
- ``release`` deletes our claim when nothing was sent (SES refused or throttled), so a
  retry can send.

Crash window: a worker that dies after SES accepted the message but before ``SENT#`` was
written leaves a claim and no log; after the lease a retry sends again (at most one
duplicate, never a loss). ``SENT#`` items expire after ``DATA_TTL_DAYS``: a claim taken over
after its log could have expired (``log_until`` passed) counts as sent, so an expired log
never turns into a second send.

Why not Powertools idempotency: its records are built to expire (``expires_after_seconds``)
and are deleted when the function raises. Send-once needs a record that never stops
blocking after success, and a lease that tells "in flight" from "crashed", in one
conditional write; a plain conditional claim does exactly that with no second record.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from botocore.exceptions import ClientError

from shared.core.aws import client as aws_client
from shared.store import keys
from shared.store.dynamo import Action, deserialize, key, query_all, serialize, transact, values
from shared.store.stats import send_counters

SENDING = "sending"
SENT = "sent"  # claims completed by versions that wrote the claim a second time

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
    ) -> Claim:
        """``log_until``: when this send's ``SENT#`` item would expire (its ``ttl``)."""
        claim_id = uuid.uuid4().hex
        item = {
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
        }
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
            current = deserialize(raw) if raw else (self._get(email, source, step) or {})
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
        return Claim("claimed", claim_id=claim_id)

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

    def complete(self, record: SentRecord, *, count: bool = True) -> None:
        """Write ``SENT#``; with ``count``, ADD 1 to ``send`` of the source and template
        counters in the same transaction (the count and the log never disagree)."""
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
        if not count:
            self.client.put_item(TableName=self.table, Item=serialize(sent_item))
            return
        counters = send_counters(self.table, {(record.source, record.template): 1}, at=record.sent_at)
        transact(
            self.client,
            [
                Action("sent", {"Put": {"TableName": self.table, "Item": serialize(sent_item)}}),
                *(Action("counters", update) for update in counters),
            ],
        )

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
