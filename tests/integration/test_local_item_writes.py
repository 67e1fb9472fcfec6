"""DynamoDB's single-item writes are atomic: "Individual write operations such as UpdateItem are
atomic and always operate on the most recent version of the item, regardless of concurrency"
(DynamoDB Developer Guide, "Best practices for handling concurrent updates in DynamoDB"). moto
reads an item, checks the condition and writes it in separate Python steps, so two threads'
writes of one item could interleave; the local runtime (and this tier's ``aws`` fixture) runs
them one at a time (``local_aws.hooks.atomic_item_writes``; docs/local-runtime.md).

Given one item and eight threads, when each adds 1 to its counter 200 times, or each tries to
create it under ``attribute_not_exists``, then no addition is lost and exactly one create wins.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from botocore.exceptions import ClientError

from shared.core.aws import client

THREADS, ADDS = 8, 200


def table(name: str) -> str:
    client("dynamodb").create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return name


def in_threads(work: Callable[[], None]) -> None:
    start = threading.Barrier(THREADS)

    def run() -> None:
        start.wait()
        work()

    threads = [threading.Thread(target=run) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def test_concurrent_adds_to_one_item_lose_nothing(aws: None) -> None:
    name = table("atomic-adds")
    ddb = client("dynamodb")

    def add() -> None:
        for _ in range(ADDS):
            ddb.update_item(
                TableName=name,
                Key={"pk": {"S": "counter"}},
                UpdateExpression="ADD n :one",
                ExpressionAttributeValues={":one": {"N": "1"}},
            )

    in_threads(add)
    item = ddb.get_item(TableName=name, Key={"pk": {"S": "counter"}})["Item"]
    assert int(item["n"]["N"]) == THREADS * ADDS


def test_concurrent_conditional_creates_of_one_item_let_exactly_one_win(aws: None) -> None:
    name = table("atomic-creates")
    ddb = client("dynamodb")
    won: list[int] = []
    lock = threading.Lock()

    def create() -> None:
        for attempt in range(ADDS):
            try:
                ddb.put_item(
                    TableName=name,
                    Item={"pk": {"S": f"claim-{attempt}"}},
                    ConditionExpression="attribute_not_exists(pk)",
                )
            except ClientError as error:
                assert error.response["Error"]["Code"] == "ConditionalCheckFailedException"
            else:
                with lock:
                    won.append(attempt)

    in_threads(create)
    assert sorted(won) == list(range(ADDS))  # each claim created once, by one thread
