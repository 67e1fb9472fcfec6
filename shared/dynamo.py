"""Small DynamoDB adapter helpers: (de)serialisation, transactions, batch deletes."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

_SER = TypeSerializer()
_DESER = TypeDeserializer()
TRANSACTION_LIMIT = 100


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


def batch_delete(client: Any, table: str, keys: Iterable[dict[str, Any]]) -> int:
    pending = list(keys)
    count = len(pending)
    while pending:
        chunk, pending = pending[:25], pending[25:]
        request: dict[str, Any] = {table: [{"DeleteRequest": {"Key": k}} for k in chunk]}
        for _ in range(8):
            response = client.batch_write_item(RequestItems=request)
            request = response.get("UnprocessedItems") or {}
            if not request:
                break
        if request:
            raise RuntimeError("DynamoDB kept items unprocessed after retries")
    return count
