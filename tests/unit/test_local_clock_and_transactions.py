"""Two pieces of the local runtime, without starting it: the virtual clock's pause and the
item-level rollback of DynamoDB transactions (``local_aws.hooks.transact_write_items``,
called directly on a moto backend: nothing is patched globally)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from moto.dynamodb.exceptions import TransactionCanceledException
from moto.dynamodb.models import DynamoDBBackend

from local_aws.clock import VirtualClock
from local_aws.hooks import transact_write_items
from tests.eventually import eventually

TABLE = "t"


# ----- the clock ------------------------------------------------------------------------------
def _waiter(clock: VirtualClock, seconds: float, running: Any = None) -> threading.Thread:
    thread = threading.Thread(target=clock.wait, args=(seconds, None, running), daemon=True)
    thread.start()
    return thread


def test_an_instant_clock_records_the_virtual_time_without_waiting() -> None:
    clock = VirtualClock()
    started = time.perf_counter()
    clock.wait(30 * 86400)
    assert time.perf_counter() - started < 0.5
    assert (clock.advanced_s, clock.waits, clock.paused) == (30 * 86400, [30 * 86400], False)


def test_a_paused_clock_holds_waits_and_retries_until_it_resumes() -> None:
    clock = VirtualClock()
    clock.pause()
    wait, retry = (
        _waiter(clock, 86400, running=lambda: True),
        threading.Thread(target=clock.sleep, args=(60,)),
    )
    retry.start()
    eventually(lambda: clock.held == 2, 5, "two waits held by the paused clock", interval_s=0.01)
    time.sleep(0.2)
    assert wait.is_alive() and retry.is_alive() and clock.advanced_s == 0

    clock.resume()

    wait.join(5)
    retry.join(5)
    assert not wait.is_alive() and not retry.is_alive()
    assert (clock.held, sorted(clock.waits), clock.advanced_s) == (0, [60, 86400], 86460)


def test_a_held_wait_ends_unserved_when_its_execution_stops() -> None:
    clock, running = VirtualClock(), threading.Event()
    running.set()
    clock.pause()
    wait = _waiter(clock, 86400, running=running.is_set)
    eventually(lambda: clock.held == 1, 5, "one wait held by the paused clock", interval_s=0.01)

    running.clear()  # StopExecution

    wait.join(5)
    assert not wait.is_alive() and clock.paused
    assert (clock.held, clock.waits, clock.advanced_s) == (0, [], 0)


# ----- transactions ---------------------------------------------------------------------------
@pytest.fixture
def backend() -> DynamoDBBackend:
    backend = DynamoDBBackend("us-east-1", "123456789012")
    backend.create_table(
        TABLE,
        schema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
        throughput=None,
        attr=[{"AttributeName": "PK", "AttributeType": "S"}, {"AttributeName": "SK", "AttributeType": "S"}],
        global_indexes=None,
        indexes=None,
        streams=None,
        billing_mode="PAY_PER_REQUEST",
        sse_specification=None,
        tags=[],
        deletion_protection_enabled=False,
        warm_throughput=None,
    )
    return backend


def _key(pk: str) -> dict[str, Any]:
    return {"PK": {"S": pk}, "SK": {"S": "X"}}


def _get(backend: DynamoDBBackend, pk: str) -> dict[str, Any] | None:
    item = backend.get_item(TABLE, _key(pk))
    return None if item is None else dict(item.to_json()["Attributes"])


def _put(pk: str, value: str, condition: str | None = None) -> dict[str, Any]:
    put: dict[str, Any] = {"TableName": TABLE, "Item": {**_key(pk), "v": {"S": value}}}
    if condition:
        put["ConditionExpression"] = condition
    return {"Put": put}


def test_a_transaction_applies_every_write(backend: DynamoDBBackend) -> None:
    backend.put_item(TABLE, {**_key("old"), "v": {"S": "1"}})
    transact_write_items(
        backend,
        [
            _put("new", "a", "attribute_not_exists(PK)"),
            {"Delete": {"TableName": TABLE, "Key": _key("old")}},
            {
                "Update": {
                    "TableName": TABLE,
                    "Key": _key("counter"),
                    "UpdateExpression": "ADD n :one",
                    "ExpressionAttributeValues": {":one": {"N": "1"}},
                }
            },
        ],
    )
    assert _get(backend, "new") == {**_key("new"), "v": {"S": "a"}}
    assert _get(backend, "old") is None
    assert _get(backend, "counter") == {**_key("counter"), "n": {"N": "1"}}


def test_a_cancelled_transaction_restores_its_items_and_keeps_other_writes(backend: DynamoDBBackend) -> None:
    backend.put_item(TABLE, {**_key("kept"), "v": {"S": "before"}})
    backend.put_item(TABLE, {**_key("taken"), "v": {"S": "x"}})
    real_get = backend.get_item
    calls = []

    def get_item(table_name: str, keys: dict[str, Any], *args: Any) -> Any:
        calls.append(keys)
        if len(calls) == 2:  # another request writes while the transaction runs
            backend.put_item(TABLE, {**_key("concurrent"), "v": {"S": "mine"}})
        return real_get(table_name, keys, *args)

    backend.get_item = get_item  # type: ignore[method-assign,assignment]

    with pytest.raises(TransactionCanceledException) as cancelled:
        transact_write_items(
            backend,
            [
                _put("kept", "after"),
                _put("fresh", "new"),
                _put("taken", "y", "attribute_not_exists(PK)"),  # fails: the whole transaction is cancelled
            ],
        )

    backend.get_item = real_get  # type: ignore[method-assign]
    assert "[None, None, ConditionalCheckFailed]" in str(cancelled.value.message)
    assert _get(backend, "kept") == {**_key("kept"), "v": {"S": "before"}}
    assert _get(backend, "fresh") is None
    assert _get(backend, "taken") == {**_key("taken"), "v": {"S": "x"}}
    assert _get(backend, "concurrent") == {
        **_key("concurrent"),
        "v": {"S": "mine"},
    }  # moto's rollback lost it
