"""Small DynamoDB adapter helpers: (de)serialisation, transactions, batch reads and deletes."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

_SER = TypeSerializer()
_DESER = TypeDeserializer()
TRANSACTION_LIMIT = 100
BATCH_GET_LIMIT = 100  # keys per BatchGetItem
BATCH_ATTEMPTS = 8  # requests per chunk while DynamoDB leaves keys or items unprocessed


class Unprocessed(RuntimeError):
    """DynamoDB kept keys or items unprocessed after :data:`BATCH_ATTEMPTS` requests."""


def to_dynamo(value: Any) -> Any:
    """JSON-ish value -> something TypeSerializer accepts (floats become Decimal)."""
    return json.loads(json.dumps(value), parse_float=Decimal)


def from_dynamo(value: Any) -> Any:
    """Deserialised value -> plain JSON types (Decimal -> int/float, sets -> sorted lists)."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: from_dynamo(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_dynamo(v) for v in value]
    if isinstance(value, set):
        return sorted(from_dynamo(v) for v in value)
    return value


def serialize(item: dict[str, Any]) -> dict[str, Any]:
    return {k: _SER.serialize(to_dynamo(v) if not isinstance(v, set) else v) for k, v in item.items()}


def deserialize(item: dict[str, Any]) -> dict[str, Any]:
    return {k: _DESER.deserialize(v) for k, v in item.items()}


def key(pk: str, sk: str) -> dict[str, Any]:
    return {"PK": {"S": pk}, "SK": {"S": sk}}


def values(**kwargs: Any) -> dict[str, Any]:
    """ExpressionAttributeValues from keyword arguments (``v=1`` -> ``{":v": {"N": "1"}}``)."""
    return {f":{k}": _SER.serialize(to_dynamo(v)) for k, v in kwargs.items()}


class TransactionConflict(Exception):
    """A condition in a transaction failed; ``reasons`` lists the cancellation codes in order."""

    def __init__(self, reasons: list[str]) -> None:
        super().__init__(",".join(reasons))
        self.reasons = reasons


def transact(client: Any, actions: list[dict[str, Any]]) -> None:
    if not actions:
        return
    if len(actions) > TRANSACTION_LIMIT:
        raise ValueError(f"a transaction holds at most {TRANSACTION_LIMIT} actions (got {len(actions)})")
    try:
        client.transact_write_items(TransactItems=actions, ReturnConsumedCapacity="TOTAL")
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "TransactionCanceledException":
            raise
        reasons = [r.get("Code", "None") for r in exc.response.get("CancellationReasons", [])]
        if not reasons:  # moto/AWS put the reasons in the message when the list is absent
            message = exc.response["Error"].get("Message", "")
            reasons = [p.strip() for p in message.rsplit("[", 1)[-1].rstrip("]").split(",")]
        if any(r == "ConditionalCheckFailed" for r in reasons):
            raise TransactionConflict(reasons) from exc
        raise


def query_all(client: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
    start: dict[str, Any] | None = None
    while True:
        page = client.query(**kwargs, **({"ExclusiveStartKey": start} if start else {}))
        yield from page.get("Items", [])
        start = page.get("LastEvaluatedKey")
        if not start:
            return


def batch_get(
    client: Any, table: str, keys: Iterable[dict[str, Any]], **options: Any
) -> Iterator[dict[str, Any]]:
    """The raw items of ``keys`` that exist (any order): BatchGetItem, 100 keys a request,
    unprocessed keys retried with a short backoff. ``options``: ``ConsistentRead``,
    ``ProjectionExpression``, ``ExpressionAttributeNames``."""
    pending = list(keys)
    while pending:
        chunk, pending = pending[:BATCH_GET_LIMIT], pending[BATCH_GET_LIMIT:]
        request: dict[str, Any] = {table: {"Keys": chunk, **options}}
        for attempt in range(BATCH_ATTEMPTS):
            if attempt:
                time.sleep(0.05 * attempt)
            response = client.batch_get_item(RequestItems=request)
            yield from response.get("Responses", {}).get(table, [])
            request = response.get("UnprocessedKeys") or {}
            if not request:
                break
        if request:
            raise Unprocessed("DynamoDB kept keys unprocessed after retries")


def batch_delete(client: Any, table: str, keys: Iterable[dict[str, Any]]) -> int:
    pending = list(keys)
    count = len(pending)
    while pending:
        chunk, pending = pending[:25], pending[25:]
        request: dict[str, Any] = {table: [{"DeleteRequest": {"Key": k}} for k in chunk]}
        for _ in range(BATCH_ATTEMPTS):
            response = client.batch_write_item(RequestItems=request)
            request = response.get("UnprocessedItems") or {}
            if not request:
                break
        if request:
            raise Unprocessed("DynamoDB kept items unprocessed after retries")
    return count
