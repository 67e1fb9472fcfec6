"""Small DynamoDB adapter helpers: (de)serialisation, transactions read back by action,
batch reads and deletes with bounded retries of unprocessed keys."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TypedDict

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from shared.core.aws import client as aws_client
from shared.core.retry import Backoff

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef


_SER = TypeSerializer()
_DESER = TypeDeserializer()
TRANSACTION_LIMIT = 100
BATCH_GET_LIMIT = 100  # keys per BatchGetItem
# Requests per chunk while DynamoDB leaves keys or items unprocessed (AWS: retry them with
# exponential backoff): 8 tries, pauses up to 50 ms, 100 ms, ... 1 s.
UNPROCESSED_RETRY = Backoff(attempts=8, base=0.05, cap=1.0)


class TableAdapter:
    """An adapter of one DynamoDB table: its name, and the client given (tests: a moto-backed
    one) or else the cached factory's, made when first used."""

    def __init__(self, table_name: str, client: DynamoDBClient | None = None) -> None:
        self.table = table_name
        self._client = client

    @property
    def client(self) -> DynamoDBClient:
        return self._client or aws_client("dynamodb")


class Unprocessed(RuntimeError):
    """DynamoDB kept keys or items unprocessed after :data:`UNPROCESSED_RETRY` requests."""


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


CONDITION_FAILED = "ConditionalCheckFailed"
NO_REASON = "None"  # the code DynamoDB gives an action that did not cause the cancellation


@dataclass(frozen=True, eq=False)  # an action is itself: compared and hashed by identity
class Action:
    """One ``TransactItems`` entry and its role (``"profile"``, ``"tag"``, ``"marker"``...).

    A cancelled transaction is read back through the actions the caller built (see
    :class:`Cancellation`), never through the position a reason has in DynamoDB's list."""

    role: str
    request: TransactWriteItemTypeDef  # {"Put": {...}} | {"Update": {...}} | {"Delete": {...}} | ...


@dataclass(frozen=True)
class Cancellation:
    """Why DynamoDB cancelled a transaction: each action the caller built with its code
    (``NO_REASON`` for the actions that did not cause it). ``outcomes`` is empty when the
    response did not say (no reasons, or not one per action)."""

    outcomes: tuple[tuple[Action, str], ...] = ()
    # the items as they were, of the actions that asked (ReturnValuesOnConditionCheckFailure ALL_OLD)
    items: tuple[tuple[Action, dict[str, Any]], ...] = ()

    @classmethod
    def of(cls, actions: Sequence[Action], response: Mapping[str, Any]) -> Cancellation:
        reasons = response.get("CancellationReasons") or []
        if len(reasons) != len(actions):
            return cls()
        codes = [r.get("Code", NO_REASON) for r in reasons]
        items = tuple((a, r["Item"]) for a, r in zip(actions, reasons, strict=True) if r.get("Item"))
        return cls(tuple(zip(actions, codes, strict=True)), items)

    def item_of(self, action: Action) -> dict[str, Any] | None:
        """The item ``action`` found (raw), when its condition failed and it asked for it."""
        return next((i for a, i in self.items if a is action), None)

    @property
    def known(self) -> bool:
        return bool(self.outcomes)

    @property
    def codes(self) -> list[str]:
        return [code for _, code in self.outcomes]

    def failed(self, *roles: str, code: str = CONDITION_FAILED) -> list[Action]:
        """The actions cancelled with ``code`` (of these ``roles``; none given: any role)."""
        return [a for a, c in self.outcomes if c == code and (not roles or a.role in roles)]

    def code_of(self, action: Action) -> str | None:
        return next((c for a, c in self.outcomes if a is action), None)


class TransactionConflict(Exception):
    """A condition of a transaction failed; ``cancellation`` says which action's."""

    def __init__(
        self, message: str = "a transaction condition failed", cancellation: Cancellation | None = None
    ):
        super().__init__(message)
        self.cancellation = cancellation or Cancellation()

    def failed(self, *roles: str) -> list[Action]:
        """The actions (of these ``roles``; none given: any) whose condition failed."""
        return self.cancellation.failed(*roles)

    @property
    def reasons(self) -> list[str]:
        """The cancellation codes, one per action (empty when DynamoDB did not say)."""
        return self.cancellation.codes


def _write(client: DynamoDBClient, actions: Sequence[Action]) -> None:
    if len(actions) > TRANSACTION_LIMIT:
        raise ValueError(f"a transaction holds at most {TRANSACTION_LIMIT} actions (got {len(actions)})")
    client.transact_write_items(TransactItems=[a.request for a in actions], ReturnConsumedCapacity="TOTAL")


def _cancelled(exc: ClientError) -> bool:
    return bool(exc.response.get("Error", {}).get("Code") == "TransactionCanceledException")


def try_transact(client: DynamoDBClient, actions: Sequence[Action]) -> Cancellation | None:
    """One TransactWriteItems of ``actions``: None when it committed (or there was nothing to
    write), its :class:`Cancellation` when DynamoDB cancelled it; other errors raise."""
    if not actions:
        return None
    try:
        _write(client, actions)
    except ClientError as exc:
        if not _cancelled(exc):
            raise
        return Cancellation.of(actions, exc.response)
    return None


def transact(client: DynamoDBClient, actions: Sequence[Action]) -> None:
    """One TransactWriteItems of ``actions``; :class:`TransactionConflict` when a condition
    failed (it names the actions whose condition it was), the ``ClientError`` itself for any
    other cancellation or error."""
    if not actions:
        return
    try:
        _write(client, actions)
    except ClientError as exc:
        if not _cancelled(exc):
            raise
        cancellation = Cancellation.of(actions, exc.response)
        if not cancellation.failed():
            raise
        raise TransactionConflict(",".join(cancellation.codes), cancellation) from exc


class PageStart(TypedDict, total=False):
    ExclusiveStartKey: Mapping[str, Any]


def page_start(start: Mapping[str, Any] | None) -> PageStart:
    """The ``ExclusiveStartKey`` argument of a Query or Scan: none for the first page."""
    return {"ExclusiveStartKey": start} if start else {}


def query_all(client: DynamoDBClient, **kwargs: Any) -> Iterator[dict[str, Any]]:
    start: dict[str, Any] | None = None
    while True:
        page = client.query(**kwargs, **page_start(start))
        yield from page.get("Items", [])
        start = page.get("LastEvaluatedKey")
        if not start:
            return


def batch_get(
    client: DynamoDBClient,
    table: str,
    keys: Iterable[dict[str, Any]],
    *,
    sleep: Callable[[float], None] = time.sleep,
    **options: Any,
) -> Iterator[dict[str, Any]]:
    """The raw items of ``keys`` that exist (any order): BatchGetItem, 100 keys a request,
    unprocessed keys retried with :data:`UNPROCESSED_RETRY`. ``options``: ``ConsistentRead``,
    ``ProjectionExpression``, ``ExpressionAttributeNames``."""
    pending = list(keys)
    while pending:
        chunk, pending = pending[:BATCH_GET_LIMIT], pending[BATCH_GET_LIMIT:]
        request: dict[str, Any] = {table: {"Keys": chunk, **options}}
        for _ in UNPROCESSED_RETRY.tries(sleep=sleep):
            response = client.batch_get_item(RequestItems=request)
            yield from response.get("Responses", {}).get(table, [])
            request = response.get("UnprocessedKeys") or {}
            if not request:
                break
        if request:
            raise Unprocessed("DynamoDB kept keys unprocessed after retries")


def batch_delete(
    client: DynamoDBClient,
    table: str,
    keys: Iterable[dict[str, Any]],
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Delete ``keys`` (BatchWriteItem, 25 a request; unprocessed items retried with
    :data:`UNPROCESSED_RETRY`); returns how many keys were given."""
    pending = list(keys)
    count = len(pending)
    while pending:
        chunk, pending = pending[:25], pending[25:]
        request: dict[str, Any] = {table: [{"DeleteRequest": {"Key": k}} for k in chunk]}
        for _ in UNPROCESSED_RETRY.tries(sleep=sleep):
            response = client.batch_write_item(RequestItems=request)
            request = response.get("UnprocessedItems") or {}
            if not request:
                break
        if request:
            raise Unprocessed("DynamoDB kept items unprocessed after retries")
    return count
