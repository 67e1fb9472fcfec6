"""The local runtime's DynamoDB read responses (``local_aws.hooks.dynamodb_read_serialized``)
are the ones moto's own serializer makes.

Given a table holding items of every attribute type, when the same GetItem, BatchGetItem,
Query and Scan requests (pages, projections, consumed capacity, a missing item) are answered
once by moto's serializer and once by the runtime's, then the clients read the same answers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.responses import DynamoHandler

from local_aws import hooks

TABLE = "reads"


def _items() -> list[dict[str, Any]]:
    return [
        {
            "PK": f"SUB#{i % 3}",
            "SK": f"ITEM#{i:03d}",
            "group": f"g{i % 2}",
            "text": f'value {i} ü " \\ \n',
            "number": Decimal(i) / 7 if i % 2 else i,
            "flag": bool(i % 2),
            "nothing": None,
            "tags": {"a", f"t{i}"},
            "numbers": {1, i + 2},
            "list": [1, "two", {"three": [3]}],
            "map": {"nested": {"deeper": i}, "empty": {}},
            **({"blob": b"\x00\xff", "blobs": {b"a", b"b"}} if i == 5 else {}),
        }
        for i in range(40)
    ]


def _reads(client: Any) -> Iterator[Any]:
    yield client.get_item(TableName=TABLE, Key={"PK": "SUB#1", "SK": "ITEM#001"}, ConsistentRead=True)
    yield client.get_item(TableName=TABLE, Key={"PK": "SUB#1", "SK": "ITEM#999"})
    yield client.get_item(TableName=TABLE, Key={"PK": "SUB#2", "SK": "ITEM#005"})  # binary values
    yield client.get_item(
        TableName=TABLE,
        Key={"PK": "SUB#0", "SK": "ITEM#000"},
        ProjectionExpression="#m.nested, tags",
        ExpressionAttributeNames={"#m": "map"},
        ReturnConsumedCapacity="TOTAL",
    )
    keys = [{"PK": f"SUB#{i % 3}", "SK": f"ITEM#{i:03d}"} for i in (0, 1, 2, 3, 4, 6, 99)]
    yield client.batch_get_item(RequestItems={TABLE: {"Keys": keys, "ConsistentRead": True}})
    yield client.batch_get_item(
        RequestItems={TABLE: {"Keys": keys, "ProjectionExpression": "PK, SK"}},
        ReturnConsumedCapacity="INDEXES",
    )
    yield client.query(
        TableName=TABLE,
        KeyConditionExpression="PK = :pk AND begins_with(SK, :sk)",
        ExpressionAttributeValues={":pk": "SUB#1", ":sk": "ITEM#0"},
        Limit=4,
    )
    yield client.query(
        TableName=TABLE,
        KeyConditionExpression="PK = :pk",
        ExpressionAttributeValues={":pk": "SUB#0"},
        Select="COUNT",
    )
    yield client.query(
        TableName=TABLE, KeyConditionExpression="PK = :pk", ExpressionAttributeValues={":pk": "SUB#9"}
    )
    yield client.query(  # an index: its key is not the table's (moto passes index_name by position)
        TableName=TABLE,
        IndexName="ByGroup",
        KeyConditionExpression="#g = :g",
        ExpressionAttributeNames={"#g": "group"},
        ExpressionAttributeValues={":g": "g1"},
    )
    yield client.query(  # an index key no item holds
        TableName=TABLE,
        IndexName="ByGroup",
        KeyConditionExpression="#g = :g",
        ExpressionAttributeNames={"#g": "group"},
        ExpressionAttributeValues={":g": "g9"},
    )
    after: dict[str, Any] | None = None
    while True:  # an index with a sort-key condition, backwards, page by page
        page = client.query(
            TableName=TABLE,
            IndexName="ByGroup",
            KeyConditionExpression="#g = :g AND SK > :sk",
            ExpressionAttributeNames={"#g": "group"},
            ExpressionAttributeValues={":g": "g0", ":sk": "ITEM#010"},
            ScanIndexForward=False,
            Limit=4,
            **({"ExclusiveStartKey": after} if after else {}),
        )
        yield page
        after = page.get("LastEvaluatedKey")
        if not after:
            break
    after = None
    while True:  # a partition backwards, page by page
        page = client.query(
            TableName=TABLE,
            KeyConditionExpression="PK = :pk",
            ExpressionAttributeValues={":pk": "SUB#2"},
            ScanIndexForward=False,
            Limit=5,
            **({"ExclusiveStartKey": after} if after else {}),
        )
        yield page
        after = page.get("LastEvaluatedKey")
        if not after:
            break
    # pages of a partition with a sort-key condition, forwards and backwards, a filter after
    # the Limit (the local runtime hands moto only the items such a page can reach)
    shapes: list[dict[str, Any]] = [
        {"KeyConditionExpression": "PK = :pk AND begins_with(SK, :sk)", ":sk": "ITEM#02"},
        {
            "KeyConditionExpression": "PK = :pk AND SK BETWEEN :lo AND :hi",
            ":lo": "ITEM#007",
            ":hi": "ITEM#031",
        },
        {"KeyConditionExpression": "PK = :pk AND SK > :sk", ":sk": "ITEM#013", "ScanIndexForward": False},
        {"KeyConditionExpression": "PK = :pk AND SK <= :sk", ":sk": "ITEM#030"},
        {"KeyConditionExpression": "PK = :pk", "FilterExpression": "flag = :yes", ":yes": True},
    ]
    for shape in shapes:
        for limit in (1, 2, 3):
            request = {k: v for k, v in shape.items() if not k.startswith(":")}
            request["ExpressionAttributeValues"] = {":pk": "SUB#1"} | {
                k: v for k, v in shape.items() if k.startswith(":")
            }
            after = None
            while True:
                page = client.query(
                    TableName=TABLE, Limit=limit, **request, **({"ExclusiveStartKey": after} if after else {})
                )
                yield page
                after = page.get("LastEvaluatedKey")
                if not after:
                    break
    yield from _scan_reads(client)


def _scan_reads(client: Any) -> Iterator[Any]:
    start: dict[str, Any] | None = None
    while True:  # every page, its LastEvaluatedKey included
        page = client.scan(TableName=TABLE, Limit=7, **({"ExclusiveStartKey": start} if start else {}))
        yield page
        start = page.get("LastEvaluatedKey")
        if not start:
            break
    for segment in range(3):  # a parallel Scan's segments, page by page
        start = None
        while True:
            page = client.scan(
                TableName=TABLE,
                Segment=segment,
                TotalSegments=3,
                Limit=4,
                **({"ExclusiveStartKey": start} if start else {}),
            )
            yield page
            start = page.get("LastEvaluatedKey")
            if not start:
                break
    yield client.scan(
        TableName=TABLE,
        FilterExpression="flag = :yes",
        ExpressionAttributeValues={":yes": True},
        ReturnConsumedCapacity="TOTAL",
    )


def _create_table(resource: Any) -> Any:
    """The table the reads run on: ``PK``/``SK``, and the index ``ByGroup`` on ``group``."""
    return resource.create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": n, "AttributeType": "S"} for n in ("PK", "SK", "group")],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "ByGroup",
                "KeySchema": [
                    {"AttributeName": "group", "KeyType": "HASH"},
                    {"AttributeName": "SK", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
    )


def _answers(
    serialized: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    *,
    partition_query: bool = False,
    reads: Callable[[Any], Iterator[Any]] = _reads,
) -> list[Any]:
    monkeypatch.setattr(DynamoHandler, "serialized", serialized)
    from moto.dynamodb.models.table import Table

    monkeypatch.setattr(Table, "query", hooks.partition_query if partition_query else hooks._MOTO_TABLE_QUERY)
    monkeypatch.setattr(Table, "all_items", hooks._all_items if partition_query else hooks._MOTO_ALL_ITEMS)
    monkeypatch.setattr(Table, "scan", hooks.start_key_scan if partition_query else hooks._MOTO_TABLE_SCAN)
    moto_cast = property(hooks._MOTO_CAST_VALUE)
    monkeypatch.setattr(DynamoType, "cast_value", hooks._cast_value if partition_query else moto_cast)
    with mock_aws():
        resource = boto3.resource("dynamodb", region_name="us-east-1")
        table = _create_table(resource)
        with table.batch_writer() as batch:
            for item in _items():
                batch.put_item(Item=item)
        client = resource.meta.client
        try:
            return [{k: v for k, v in answer.items() if k != "ResponseMetadata"} for answer in reads(client)]
        finally:  # an outer moto mock (the integration tests' session) keeps its tables
            table.delete()


def test_reads_answer_as_moto_serializes_them(monkeypatch: pytest.MonkeyPatch) -> None:
    moto_answers = _answers(hooks._MOTO_DYNAMODB_SERIALIZED, monkeypatch)
    runtime_answers = _answers(hooks.dynamodb_read_serialized, monkeypatch)

    assert len(moto_answers) >= 12
    assert runtime_answers == moto_answers
    assert moto_answers[2]["Item"]["blob"].value == b"\x00\xff"  # the binary item went through moto's path
    assert "LastEvaluatedKey" in moto_answers[6] and moto_answers[7]["Count"] == 14


def test_a_query_reads_its_partition_or_its_index_key_s_items_and_answers_as_moto_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    moto_answers = _answers(hooks._MOTO_DYNAMODB_SERIALIZED, monkeypatch)
    index_reads: list[int] = []
    only_index_items = hooks._index_items

    def counted(table: Any, conditions: Any) -> list[Any]:
        found = only_index_items(table, conditions)
        index_reads.append(len(found))
        return found

    monkeypatch.setattr(hooks, "_index_items", counted)
    partition_answers = _answers(hooks._MOTO_DYNAMODB_SERIALIZED, monkeypatch, partition_query=True)

    assert partition_answers == moto_answers
    assert index_reads == [20, 0, 20, 20, 20, 20]  # each index Query was handed only its key's items
    assert moto_answers[8]["Items"] == []  # a missing partition
    assert len(moto_answers[9]["Items"]) == 20 and moto_answers[10]["Items"] == []  # an index; none
    assert [len(a["Items"]) for a in moto_answers[11:15]] == [4, 4, 4, 2]  # index pages: 14 of g0
    assert len(moto_answers[15]["Items"]) == 5  # a page of a partition


def _group_skus(client: Any, group: str) -> list[str]:
    pages = client.get_paginator("query").paginate(
        TableName=TABLE,
        IndexName="ByGroup",
        KeyConditionExpression="#g = :g",
        ExpressionAttributeNames={"#g": "group"},
        ExpressionAttributeValues={":g": group},
    )
    return sorted(item["SK"] for page in pages for item in page["Items"])


def _mapped(client: Any, group: str) -> list[str]:
    """The index's answer for ``group``, asked three times (the map is built by the second and
    read by the third, so the next write must invalidate it): all three the same."""
    answers = [_group_skus(client, group) for _ in range(3)]
    assert answers[0] == answers[1] == answers[2]
    return answers[0]


def test_index_queries_between_writes_read_the_table_once_and_every_write_is_seen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Given a table with a global secondary index, when its index is queried many times with
    no write between, then the table is passed over twice (once to answer, once to map it) and
    the rest are lookups; and after each kind of write (a Put, an UpdateItem that moves an item
    to another index key in place, a Delete, a transaction, a batch write), the next Query
    answers what the table holds."""
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.table import Table

    monkeypatch.setattr(Table, "query", hooks.partition_query)
    monkeypatch.setattr(Table, "all_items", hooks._all_items)
    monkeypatch.setattr(Table, "put_item", hooks._versioned_put_item)
    monkeypatch.setattr(Table, "delete_item", hooks._versioned_delete_item)
    monkeypatch.setattr(DynamoDBBackend, "update_item", hooks._versioned_update_item)
    passes: list[int] = []
    every_item = hooks._every_item

    def counted(table: Any) -> Iterator[Any]:
        passes.append(1)
        return every_item(table)

    monkeypatch.setattr(hooks, "_every_item", counted)
    with mock_aws():
        resource = boto3.resource("dynamodb", region_name="us-east-1")
        table = _create_table(resource)
        client = resource.meta.client
        try:
            with table.batch_writer() as batch:
                for item in _items():
                    batch.put_item(Item=item)
            g0 = [f"ITEM#{i:03d}" for i in range(0, 40, 2)]
            passes.clear()
            for _ in range(16):
                assert _group_skus(client, "g0") == g0
            assert _group_skus(client, "g9") == []
            assert len(passes) == 2  # 17 Queries: one pass to answer, one to map, then lookups

            table.put_item(Item={"PK": "SUB#9", "SK": "ITEM#100", "group": "g0"})
            assert _mapped(client, "g0") == [*g0, "ITEM#100"]
            client.update_item(
                TableName=TABLE,
                Key={"PK": "SUB#0", "SK": "ITEM#000"},
                UpdateExpression="SET #g = :g",
                ExpressionAttributeNames={"#g": "group"},
                ExpressionAttributeValues={":g": "g1"},
            )
            assert _mapped(client, "g0") == [*g0[1:], "ITEM#100"]
            assert "ITEM#000" in _group_skus(client, "g1")
            table.delete_item(Key={"PK": "SUB#9", "SK": "ITEM#100"})
            assert _mapped(client, "g0") == g0[1:]
            client.transact_write_items(
                TransactItems=[
                    {
                        "Put": {
                            "TableName": TABLE,
                            "Item": {"PK": "SUB#8", "SK": "ITEM#200", "group": "g0"},
                        }
                    },
                    {
                        "Update": {
                            "TableName": TABLE,
                            "Key": {"PK": "SUB#0", "SK": "ITEM#000"},
                            "UpdateExpression": "SET #g = :g",
                            "ExpressionAttributeNames": {"#g": "group"},
                            "ExpressionAttributeValues": {":g": "g0"},
                        }
                    },
                ]
            )
            assert _mapped(client, "g0") == [*g0, "ITEM#200"]
            with table.batch_writer() as batch:
                batch.delete_item(Key={"PK": "SUB#8", "SK": "ITEM#200"})
                batch.put_item(Item={"PK": "SUB#7", "SK": "ITEM#300", "group": "g0"})
            assert _mapped(client, "g0") == [*g0, "ITEM#300"]
        finally:
            table.delete()


def test_a_scan_page_walks_only_the_items_after_its_start_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given 40 items, when they are scanned 7 a page (and by segments, 4 a page), then each page
    after the first compares one item with its start key, where moto walked every item before it."""
    from moto.dynamodb.models.table import Table

    compared: list[int] = []
    comes_before = Table._item_comes_before_dct

    def counted(self: Any, *args: Any, **kwargs: Any) -> bool:
        compared.append(1)
        return comes_before(self, *args, **kwargs)

    monkeypatch.setattr(Table, "_item_comes_before_dct", counted)
    moto_answers = _answers(hooks._MOTO_DYNAMODB_SERIALIZED, monkeypatch, reads=_scan_reads)
    moto_compared, compared[:] = len(compared), []
    answers = _answers(hooks._MOTO_DYNAMODB_SERIALIZED, monkeypatch, partition_query=True, reads=_scan_reads)

    assert answers == moto_answers
    segments = answers[6:-1]  # after the whole table's 6 pages of 7: the 3 segments' pages of 4
    assert sorted(i["SK"] for a in segments for i in a["Items"]) == sorted(i["SK"] for i in _items())
    assert len(segments) >= 12  # 40 items in pages of at most 4
    pages_after_the_first = sum(1 for a in answers if "LastEvaluatedKey" in a)
    assert len(compared) == pages_after_the_first  # one comparison a page that has a next one
    assert moto_compared > 5 * len(compared)
