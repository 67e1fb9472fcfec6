"""Webhook endpoints and deliveries in the main table, endpoint secrets in Secrets Manager.

Items (docs/data-model.md):

- ``WEBHOOK`` / ``EP#<endpoint id>``: url, events, description, status (``enabled`` or
  ``disabled``), disabled_reason, failing_since, secret_name, secret_version, created_at.
- ``WHD#<endpoint id>`` / ``<event time>#<message id>``: one event for one endpoint: the body
  as signed, its status (``pending``, ``delivered``, ``failed``), attempts, the last answer,
  ``ttl`` after ``DATA_TTL_DAYS``. Created once per (endpoint, message id) by a conditional
  Put, so a redelivered stream record adds nothing.
- ``WHP#<endpoint id>`` / ``<delivery SK>``: a delivery parked while the endpoint's circuit is
  open (``attempt``: the attempt it waits to make; ``ttl`` as its delivery's). The endpoint item
  carries the circuit: ``circuit`` (``open``, ``draining`` or absent), ``circuit_failures``
  (consecutive failed attempts), ``circuit_opens`` (openings since the last success).

Each endpoint's secret is a Secrets Manager secret ``mailstep/webhooks/<table>/<endpoint id>``
holding ``{"current": "whsec_...", "previous": "whsec_..." | null, "previous_until": iso | null}``.
"""

from __future__ import annotations

import json
import re
import secrets as random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from shared.core.aws import client as aws_client
from shared.core.errors import FieldProblem, InvalidInput, NotFound
from shared.core.secrets import get_secret
from shared.core.specs import WEBHOOK_SECRET_PREFIX
from shared.store import keys
from shared.store.dynamo import TableAdapter, deserialize, from_dynamo, key, query_all, serialize, values

ENABLED = "enabled"
DISABLED = "disabled"
PENDING = "pending"
DELIVERED = "delivered"
FAILED = "failed"
OPEN = "open"  # the endpoint's circuit: deliveries are parked, one probe at a time
DRAINING = "draining"  # a probe succeeded: the parked deliveries are being queued again
ENDPOINT_ID = re.compile(r"^ep_[a-f0-9]{16}$")
MAX_DESCRIPTION = 200


def new_endpoint_id() -> str:
    return "ep_" + random.token_hex(8)


def check_endpoint_id(value: str, field: str = "id") -> str:
    if not isinstance(value, str) or not ENDPOINT_ID.match(value):
        raise InvalidInput(
            f"{field}: an endpoint id is ep_ and 16 hex digits",
            [FieldProblem(field, "ep_ and 16 hex digits")],
        )
    return value


def secret_name_prefix(table_name: str) -> str:
    """The name prefix of a deployment's endpoint secrets (the functions' grant covers it)."""
    return f"{WEBHOOK_SECRET_PREFIX}/{table_name}/"


@dataclass
class Endpoint:
    id: str
    url: str
    events: tuple[str, ...]
    description: str = ""
    status: str = ENABLED
    disabled_reason: str | None = None
    disabled_at: str | None = None
    failing_since: str | None = None
    secret_name: str = ""
    secret_version: int = 1
    created_at: str = ""
    circuit: str | None = None  # OPEN, DRAINING or None (closed)
    circuit_failures: int = 0
    circuit_opens: int = 0

    def to_item(self) -> dict[str, Any]:
        item = {
            "PK": keys.WEBHOOK,
            "SK": keys.webhook_endpoint_sk(self.id),
            "id": self.id,
            "url": self.url,
            "events": list(self.events),
            "description": self.description,
            "status": self.status,
            "secret_name": self.secret_name,
            "secret_version": self.secret_version,
            "created_at": self.created_at,
        }
        return item

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> Endpoint:
        item = from_dynamo(item)
        return cls(
            id=item["id"],  # ep_ and 16 hex digits; the SK is EP#<id>
            url=item["url"],
            events=tuple(item.get("events", ())),
            description=item.get("description", ""),
            status=item.get("status", ENABLED),
            disabled_reason=item.get("disabled_reason"),  # "410 Gone" or "failing since <time>"
            disabled_at=item.get("disabled_at"),
            failing_since=item.get("failing_since"),
            secret_name=item.get("secret_name", ""),
            secret_version=int(item.get("secret_version", 1)),  # each rotation adds 1: the secret is reread
            created_at=item.get("created_at", ""),
            circuit=item.get("circuit"),
            circuit_failures=int(item.get("circuit_failures", 0)),
            circuit_opens=int(item.get("circuit_opens", 0)),
        )

    @property
    def troubled(self) -> bool:
        """Failing, or its circuit not closed: a success has state to clear."""
        return bool(self.failing_since or self.circuit or self.circuit_failures)

    def public(self) -> dict[str, Any]:
        """What the operator sees (never the secret)."""
        return {
            "id": self.id,
            "url": self.url,
            "events": list(self.events),
            "description": self.description,
            "status": self.status,
            "disabled_reason": self.disabled_reason,
            "disabled_at": self.disabled_at,
            "failing_since": self.failing_since,
            "circuit": self.circuit or "closed",
            "consecutive_failures": self.circuit_failures,
            "created_at": self.created_at,
        }


@dataclass
class Delivery:
    endpoint_id: str
    sk: str
    message_id: str
    event_type: str
    body: str
    status: str = PENDING
    attempts: int = 0
    created_at: str = ""
    last_attempt_at: str | None = None
    last_status: int | None = None
    last_error: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> Delivery:
        item = from_dynamo(item)
        return cls(
            endpoint_id=item["endpoint_id"],
            sk=item["SK"],  # <event time>#<message id>
            message_id=item["message_id"],
            event_type=item["event_type"],
            body=item["body"],
            status=item.get("status", PENDING),
            attempts=int(item.get("attempts", 0)),  # taken so far, the one in flight included
            created_at=item.get("created_at", ""),
            last_attempt_at=item.get("last_attempt_at"),
            last_status=item.get("last_status"),
            last_error=item.get("last_error"),
            # by attempt: a late answer (see WebhookStore.record_attempt) is appended after a later one
            history=sorted(item.get("history", []), key=lambda entry: int(entry.get("attempt", 0))),
        )

    def public(self) -> dict[str, Any]:
        return {
            "message_id": self.message_id,
            "event_type": self.event_type,
            "status": self.status,
            "attempts": self.attempts,
            "created_at": self.created_at,
            "last_attempt_at": self.last_attempt_at,
            "last_status": self.last_status,
            "last_error": self.last_error,
            "history": self.history,
        }


@dataclass(frozen=True)
class EndpointSecrets:
    current: str
    previous: str | None = None
    previous_until: str | None = None

    def signing(self, now: str) -> list[str]:
        """The secrets a delivery signs with now: both during a rotation's overlap."""
        if self.previous and self.previous_until and now < self.previous_until:
            return [self.current, self.previous]
        return [self.current]

    def to_json(self) -> str:
        return json.dumps(
            {"current": self.current, "previous": self.previous, "previous_until": self.previous_until}
        )

    @classmethod
    def from_json(cls, text: str) -> EndpointSecrets:
        raw = json.loads(text)
        return cls(
            current=raw["current"], previous=raw.get("previous"), previous_until=raw.get("previous_until")
        )


class WebhookStore(TableAdapter):
    """Endpoints and deliveries (main table) and the endpoints' secrets (Secrets Manager)."""

    def __init__(self, table_name: str, client: Any = None, secrets_client: Any = None) -> None:
        super().__init__(table_name, client)
        self._secrets_client = secrets_client

    @property
    def secrets_client(self) -> Any:
        return self._secrets_client or aws_client("secretsmanager")

    # ----- endpoints -------------------------------------------------------------------
    def endpoints(self, *, consistent: bool = False) -> list[Endpoint]:
        items = query_all(
            self.client,
            TableName=self.table,
            KeyConditionExpression="PK = :pk AND begins_with(SK, :prefix)",
            ExpressionAttributeValues=values(pk=keys.WEBHOOK, prefix=keys.WEBHOOK_ENDPOINT_PREFIX),
            ConsistentRead=consistent,
        )
        return [Endpoint.from_item(deserialize(i)) for i in items]

    def get_endpoint(self, endpoint_id: str) -> Endpoint:
        found = self.client.get_item(
            TableName=self.table,
            Key=key(keys.WEBHOOK, keys.webhook_endpoint_sk(check_endpoint_id(endpoint_id))),
            ConsistentRead=True,
        )
        if "Item" not in found:
            raise NotFound(f"no webhook endpoint {endpoint_id}")
        return Endpoint.from_item(deserialize(found["Item"]))

    def put_endpoint(self, endpoint: Endpoint) -> None:
        self.client.put_item(
            TableName=self.table,
            Item=serialize(endpoint.to_item()),
            ConditionExpression="attribute_not_exists(PK)",
        )

    def delete_endpoint(self, endpoint_id: str) -> None:
        self.client.delete_item(
            TableName=self.table,
            Key=key(keys.WEBHOOK, keys.webhook_endpoint_sk(check_endpoint_id(endpoint_id))),
        )

    def update_endpoint(self, endpoint_id: str, **changes: Any) -> None:
        """SET the given attributes (None values are REMOVEd) of an existing endpoint."""
        names = {f"#{k}": k for k in changes}
        sets = [f"#{k} = :{k}" for k, v in changes.items() if v is not None]
        removes = [f"#{k}" for k, v in changes.items() if v is None]
        expression = " ".join(
            part
            for part in (
                ("SET " + ", ".join(sets)) if sets else "",
                ("REMOVE " + ", ".join(removes)) if removes else "",
            )
            if part
        )
        request: dict[str, Any] = {
            "TableName": self.table,
            "Key": key(keys.WEBHOOK, keys.webhook_endpoint_sk(check_endpoint_id(endpoint_id))),
            "UpdateExpression": expression,
            "ConditionExpression": "attribute_exists(PK)",
            "ExpressionAttributeNames": names,
        }
        if sets:
            request["ExpressionAttributeValues"] = values(
                **{k: v for k, v in changes.items() if v is not None}
            )
        try:
            self.client.update_item(**request)
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                raise NotFound(f"no webhook endpoint {endpoint_id}") from exc
            raise

    def mark_failing(self, endpoint_id: str, now: str) -> str:
        """Set ``failing_since`` when it is not set; returns its value."""
        return self.count_failure(endpoint_id, now, count=0)[0]

    def count_failure(self, endpoint_id: str, now: str, *, count: int = 1) -> tuple[str, int]:
        """A failed attempt: ``failing_since`` set if it was not, ``circuit_failures`` + ``count``;
        returns both. The caller counts each attempt once (``claim_attempt`` takes it once)."""
        result = self.client.update_item(
            TableName=self.table,
            Key=key(keys.WEBHOOK, keys.webhook_endpoint_sk(endpoint_id)),
            UpdateExpression="SET failing_since = if_not_exists(failing_since, :now), "
            "circuit_failures = if_not_exists(circuit_failures, :zero) + :count",
            ConditionExpression="attribute_exists(PK)",
            ExpressionAttributeValues=values(now=now, zero=0, count=count),
            ReturnValues="ALL_NEW",
        )
        item = from_dynamo(deserialize(result["Attributes"]))
        return str(item.get("failing_since", now)), int(item.get("circuit_failures", 0))

    def _circuit_update(self, endpoint_id: str, expression: str, condition: str, **vals: Any) -> Any:
        """One conditional update of the endpoint's circuit; None when the condition failed."""
        try:
            return self.client.update_item(
                TableName=self.table,
                Key=key(keys.WEBHOOK, keys.webhook_endpoint_sk(endpoint_id)),
                UpdateExpression=expression,
                ConditionExpression=f"attribute_exists(PK) AND ({condition})",
                ExpressionAttributeNames={"#circuit": "circuit"},
                ExpressionAttributeValues=values(**vals),
                ReturnValues="ALL_NEW",
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return None
            raise

    def open_circuit(self, endpoint_id: str, threshold: int, *, reopen: bool) -> int | None:
        """Open the circuit (``circuit_failures`` >= ``threshold``, not open yet) or, for a failed
        probe (``reopen``), keep it open; returns the openings so far, None when another attempt
        did it (the one that gets a number carries the next probe)."""
        closed = "circuit_failures >= :n AND (attribute_not_exists(#circuit) OR #circuit <> :open)"
        condition = "#circuit = :open AND circuit_failures >= :n" if reopen else closed
        result = self._circuit_update(
            endpoint_id,
            "SET #circuit = :open, circuit_opens = if_not_exists(circuit_opens, :zero) + :one",
            condition,
            open=OPEN,
            n=threshold,
            zero=0,
            one=1,
        )
        if result is None:
            return None
        return int(from_dynamo(deserialize(result["Attributes"]))["circuit_opens"])

    def close_circuit(self, endpoint_id: str, *, drain: bool) -> None:
        """A success: not failing, no failures counted; ``drain``: the parked deliveries go again."""
        request: dict[str, Any] = {
            "TableName": self.table,
            "Key": key(keys.WEBHOOK, keys.webhook_endpoint_sk(endpoint_id)),
            "UpdateExpression": "REMOVE failing_since, circuit_failures, circuit_opens",
            "ConditionExpression": "attribute_exists(PK)",
        }
        if drain:
            request["UpdateExpression"] = "SET #circuit = :draining " + request["UpdateExpression"]
            request["ExpressionAttributeNames"] = {"#circuit": "circuit"}
            request["ExpressionAttributeValues"] = values(draining=DRAINING)
        self.client.update_item(**request)

    def end_circuit(self, endpoint_id: str, states: tuple[str, ...]) -> None:
        """Nothing is parked any more: the circuit is closed if it is in one of ``states``."""
        names = {f"s{i}": state for i, state in enumerate(states)}
        self._circuit_update(
            endpoint_id, "REMOVE #circuit", "#circuit IN (" + ", ".join(f":{n}" for n in names) + ")", **names
        )

    # ----- parked deliveries (an open circuit) -------------------------------------------
    def park(self, endpoint_id: str, sk: str, attempt: int, ttl: int) -> None:
        """Park attempt ``attempt`` of a delivery (a repeated Put of the same one changes nothing)."""
        self.client.put_item(
            TableName=self.table,
            Item=serialize(
                {"PK": keys.webhook_parked_pk(endpoint_id), "SK": sk, "attempt": attempt, "ttl": ttl}
            ),
        )

    def unpark(self, endpoint_id: str, sk: str) -> int | None:
        """Take a parked delivery off the list: its attempt, or None when someone else took it."""
        result = self.client.delete_item(
            TableName=self.table,
            Key=key(keys.webhook_parked_pk(endpoint_id), sk),
            ReturnValues="ALL_OLD",
        )
        old = result.get("Attributes")
        return None if not old else int(from_dynamo(deserialize(old))["attempt"])

    def parked(self, endpoint_id: str, limit: int) -> list[str]:
        """The SKs of up to ``limit`` parked deliveries, oldest event first."""
        found = self.client.query(
            TableName=self.table,
            KeyConditionExpression="PK = :pk",
            ExpressionAttributeValues=values(pk=keys.webhook_parked_pk(endpoint_id)),
            Limit=limit,
            ConsistentRead=True,
        )
        return [str(deserialize(item)["SK"]) for item in found.get("Items", [])]

    def disable(self, endpoint_id: str, reason: str, now: str) -> None:
        self.update_endpoint(endpoint_id, status=DISABLED, disabled_reason=reason, disabled_at=now)

    # ----- secrets ---------------------------------------------------------------------
    def create_secret(self, name: str, value: EndpointSecrets) -> None:
        self.secrets_client.create_secret(
            Name=name, SecretString=value.to_json(), Description="mailstep webhook endpoint signing secret"
        )

    def put_secret(self, name: str, value: EndpointSecrets) -> None:
        self.secrets_client.put_secret_value(SecretId=name, SecretString=value.to_json())

    def delete_secret(self, name: str) -> None:
        """Schedule the secret's deletion (7 days' recovery); one gone or already scheduled is fine."""
        try:
            self.secrets_client.delete_secret(SecretId=name, RecoveryWindowInDays=7)
        except ClientError as exc:
            error = exc.response["Error"]
            # AWS: "... because it was marked for deletion"; moto: "... currently marked deleted"
            message = error.get("Message", "").lower()
            scheduled = (
                error["Code"] == "InvalidRequestException" and "marked" in message and "delet" in message
            )
            if error["Code"] != "ResourceNotFoundException" and not scheduled:
                raise

    def read_secret(self, name: str, *, fresh: bool = False) -> EndpointSecrets:
        if self._secrets_client is not None or fresh:
            text = self.secrets_client.get_secret_value(SecretId=name)["SecretString"]
            return EndpointSecrets.from_json(text)
        return EndpointSecrets.from_json(get_secret(name))

    # ----- deliveries --------------------------------------------------------------------
    def create_delivery(self, endpoint_id: str, sk: str, item: dict[str, Any]) -> bool:
        """Put a delivery once per (endpoint, message id); False when it was there already."""
        try:
            self.client.put_item(
                TableName=self.table,
                Item=serialize({"PK": keys.webhook_delivery_pk(endpoint_id), "SK": sk, **item}),
                ConditionExpression="attribute_not_exists(PK)",
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def get_delivery(self, endpoint_id: str, sk: str) -> Delivery | None:
        found = self.client.get_item(
            TableName=self.table, Key=key(keys.webhook_delivery_pk(endpoint_id), sk), ConsistentRead=True
        )
        return Delivery.from_item(deserialize(found["Item"])) if "Item" in found else None

    def claim_attempt(self, endpoint_id: str, sk: str, attempt: int, now: str, *, stale_before: str) -> bool:
        """Take attempt ``attempt`` (1-based) of a pending delivery: once, whoever asks; again
        only when it was taken before ``stale_before`` and its outcome never written."""
        try:
            self.client.update_item(
                TableName=self.table,
                Key=key(keys.webhook_delivery_pk(endpoint_id), sk),
                UpdateExpression="SET attempts = :attempt, last_attempt_at = :now",
                ConditionExpression="#status = :pending AND (attempts = :before OR (attempts = :attempt "
                "AND last_attempt_at < :stale AND size(history) < :attempt))",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues=values(
                    attempt=attempt, before=attempt - 1, pending=PENDING, now=now, stale=stale_before
                ),
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def record_attempt(self, endpoint_id: str, sk: str, *, status: str, outcome: dict[str, Any]) -> None:
        """The attempt's answer (``outcome["attempt"]``), appended to the history; ``status`` the
        delivery's new status. A failed attempt queues the next one before its answer is written,
        so the next one may be taken (even delivered) first: an answer that comes after a later
        attempt was taken joins the history and changes nothing else."""
        vals = {"attempt": outcome["attempt"], "entry": [outcome], "empty": []}
        history = "history = list_append(if_not_exists(history, :empty), :entry)"
        answer = "SET #status = :status, last_status = :code, last_error = :error, " + history
        try:
            self.client.update_item(
                TableName=self.table,
                Key=key(keys.webhook_delivery_pk(endpoint_id), sk),
                UpdateExpression=answer,
                ConditionExpression="attempts <= :attempt",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues=values(
                    **vals, status=status, code=outcome.get("status_code"), error=outcome.get("error")
                ),
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
        else:
            return
        try:  # a later attempt was taken (attempts only grows), or the delivery expired meanwhile
            self.client.update_item(
                TableName=self.table,
                Key=key(keys.webhook_delivery_pk(endpoint_id), sk),
                UpdateExpression=f"SET {history}",
                ConditionExpression="attempts > :attempt",
                ExpressionAttributeValues=values(**vals),
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise

    def reopen(self, endpoint_id: str, sk: str) -> int:
        """A replay: the delivery is pending again; returns the attempt number it goes on from."""
        result = self.client.update_item(
            TableName=self.table,
            Key=key(keys.webhook_delivery_pk(endpoint_id), sk),
            UpdateExpression="SET #status = :pending",
            ConditionExpression="attribute_exists(PK)",
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues=values(pending=PENDING),
            ReturnValues="ALL_NEW",
        )
        return int(from_dynamo(deserialize(result["Attributes"])).get("attempts", 0))

    def deliveries(
        self, endpoint_id: str, *, since: str | None = None, status: str | None = None, limit: int = 50
    ) -> Iterator[Delivery]:
        """The endpoint's deliveries, newest first (``since``: at or after that time)."""
        condition = "PK = :pk" + (" AND SK >= :since" if since else "")
        params: dict[str, Any] = {"pk": keys.webhook_delivery_pk(check_endpoint_id(endpoint_id))}
        if since:
            params["since"] = since
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": condition,
            "ScanIndexForward": False,
        }
        if status:
            kwargs["FilterExpression"] = "#status = :status"
            kwargs["ExpressionAttributeNames"] = {"#status": "status"}
            params["status"] = status
        kwargs["ExpressionAttributeValues"] = values(**params)
        for count, item in enumerate(query_all(self.client, **kwargs), start=1):
            yield Delivery.from_item(deserialize(item))
            if count >= limit:
                return
