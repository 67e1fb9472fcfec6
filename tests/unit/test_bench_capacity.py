"""The capacity model's derivations (bench.capacity), on hand-written requests: the key
patterns, the write units each partition key takes (base table and index), transactions per
item, and the ceiling with the limit that sets it. Pure (no runtime, no network, no timing), so
it runs in the unit tier; the scenarios themselves run with ``python -m bench capacity``."""

from __future__ import annotations

import math

import pytest

from bench.capacity import (
    FunctionShape,
    HotKey,
    Inputs,
    ceiling,
    ceilings,
    compact,
    cpu_ceiling,
    function_shape,
    hottest,
    hottest_keys,
    key_pattern,
    max_tx_per_item,
    reads,
    writes,
)
from bench.meter import Meter, Request
from shared.core import specs

MAIN = specs.MAIN_TABLE.local_name
EVENTS = specs.EVENTS_TABLE.local_name


def S(value: str) -> dict[str, str]:
    return {"S": value}


def request(operation: str, params: dict, parsed: dict | None = None) -> Request:
    return Request("function", "dynamodb", operation, params, parsed or {})


def stats_update(source: str) -> dict:
    return {"Update": {"TableName": MAIN, "Key": {"PK": S(f"STATS#{source}"), "SK": S("COUNTERS")}}}


def event_put(email: str, template: str, source: str, blob: int = 0) -> dict:
    item = {"PK": S(f"SUB#{email}"), "SK": S("EVT#2026-11-25T10:00:00.000Z#delivery#ab12"),
            "template_key": S(template), "source_key": S(source), "blob": S("x" * blob)}  # fmt: skip
    return {"Put": {"TableName": EVENTS, "Item": item}}


@pytest.mark.parametrize(
    ("value", "names", "expected"),
    [
        ("STATS#2026-11-25", {}, "STATS#<date>"),
        ("SUB#ann@example.com", {}, "SUB#<email>"),
        ("EVT#2026-11-25T10:00:00.123Z#open#9f", {}, "EVT#<ts>#open#9f"),
        ("STATS#news-7", {"news-7": "<broadcast>"}, "STATS#<broadcast>"),
        ("newsletter/monthly", {"newsletter/monthly": "<template>"}, "<template>"),
        ("RATE#broadcast", {}, "RATE#broadcast"),
        ("BATCH#0001#000002#0003", {}, "BATCH#<n>#<n>#<n>"),
        ("ERASED#" + "a1" * 32, {}, "ERASED#<hash>"),
        ("EXEC#x", {"x": "<sequence>", "xy": "<other>"}, "EXEC#<sequence>"),
    ],
)
def test_key_pattern_replaces_what_varies(value: str, names: dict, expected: str) -> None:
    assert key_pattern(value, names) == expected


def test_a_transaction_counts_twice_on_each_key_and_once_on_each_index_of_a_put() -> None:
    tx = request(
        "TransactWriteItems", {"TransactItems": [stats_update("b1"), event_put("a@x.io", "t/one", "b1")]}
    )

    uses = writes(tx)

    assert {(u.where, u.key, u.wcu) for u in uses} == {
        ("MainTable", "STATS#b1", 2.0),
        ("EventsTable", "SUB#a@x.io", 2.0),
        ("EventsTable/TemplateIndex", "t/one", 1.0),
        ("EventsTable/SequenceIndex", "b1", 1.0),
    }


def test_a_refused_transaction_writes_no_index_and_a_large_item_counts_per_started_kb() -> None:
    big = event_put("a@x.io", "t/one", "b1", blob=2500)  # about 2.6 KB: 3 WCU, x2 in a transaction
    refused = request(
        "TransactWriteItems", {"TransactItems": [big]}, {"Error": {"Code": "TransactionCanceled"}}
    )
    accepted = request("PutItem", big["Put"])

    assert [(u.where, u.wcu) for u in writes(refused)] == [("EventsTable", 6.0)]
    assert {(u.where, u.wcu) for u in writes(accepted)} == {
        ("EventsTable", 3.0),
        ("EventsTable/TemplateIndex", 3.0),
        ("EventsTable/SequenceIndex", 3.0),
    }


def test_batch_writes_count_processed_items_and_an_item_is_only_in_the_indexes_whose_keys_it_has() -> None:
    put = {"PutRequest": {"Item": {"PK": S("TAG#news"), "SK": S("SUB#a@x.io")}}}
    left = {"PutRequest": {"Item": {"PK": S("TAG#news"), "SK": S("SUB#b@x.io")}}}
    gone = {"DeleteRequest": {"Key": {"PK": S("SUB#c@x.io"), "SK": S("PROFILE")}}}
    no_template = {"PutRequest": {"Item": {"PK": S("SUB#a@x.io"), "SK": S("EVT#1"), "source_key": S("b1")}}}
    batch = request(
        "BatchWriteItem",
        {"RequestItems": {MAIN: [put, left, gone], EVENTS: [no_template]}},
        {"UnprocessedItems": {MAIN: [left]}},
    )

    assert sorted((u.where, u.key, u.wcu) for u in writes(batch)) == [
        ("EventsTable", "SUB#a@x.io", 1.0),
        ("EventsTable/SequenceIndex", "b1", 1.0),  # no template: not in TemplateIndex
        ("MainTable", "SUB#c@x.io", 1.0),
        ("MainTable", "TAG#news", 1.0),
    ]


def test_the_hottest_key_is_the_largest_sum_on_one_key_value_per_mail() -> None:
    log = [
        request(
            "TransactWriteItems",
            {"TransactItems": [stats_update("b1"), event_put(f"r{i}@x.io", "t/one", "b1")]},
        )
        for i in range(10)
    ]
    log.append(request("UpdateItem", {"TableName": MAIN, "Key": {"PK": S("RATE#broadcast"), "SK": S("0")}}))
    uses = [u for r in log for u in writes(r)]

    found = hottest_keys(uses, mails=20, names={"b1": "<broadcast>", "t/one": "<template>"})

    assert found["MainTable"] == HotKey("MainTable", "STATS#<broadcast>", 1.0)  # 10 x 2 WCU / 20 mails
    assert found["EventsTable"].per_mail == pytest.approx(0.1)  # one subscriber's key: 2 WCU / 20
    assert found["EventsTable/TemplateIndex"] == HotKey("EventsTable/TemplateIndex", "<template>", 0.5)
    assert hottest(found) == found["MainTable"]


def test_reads_land_on_the_queried_key_at_half_a_unit_eventually_consistent() -> None:
    query = request(
        "Query",
        {"TableName": EVENTS, "IndexName": "TemplateIndex",
         "KeyConditionExpression": "#t = :t AND SK > :s",
         "ExpressionAttributeNames": {"#t": "template_key"},
         "ExpressionAttributeValues": {":t": S("t/one"), ":s": S("EVT#")}},
        {"Items": [{"PK": S("SUB#a@x.io"), "blob": S("x" * 5000)}]},
    )  # fmt: skip
    batch = request(
        "BatchGetItem",
        {"RequestItems": {MAIN: {"ConsistentRead": True, "Keys": [
            {"PK": S("SUB#a@x.io"), "SK": S("PROFILE")}, {"PK": S("SUB#a@x.io"), "SK": S("SUPPRESSION")}]}}},
        {"Responses": {MAIN: [{"PK": S("SUB#a@x.io"), "SK": S("PROFILE"), "blob": S("x" * 5000)}]}},
    )  # fmt: skip

    assert [(u.where, u.key, u.rcu) for u in reads(query)] == [("EventsTable/TemplateIndex", "t/one", 1.0)]
    assert [(u.key, u.rcu) for u in reads(batch)] == [("SUB#a@x.io", 2.0), ("SUB#a@x.io", 1.0)]
    assert reads(request("Scan", {"TableName": MAIN}, {"Items": []})) == []


def test_transactions_per_item_counts_each_transaction_once_per_item() -> None:
    log = [request("TransactWriteItems", {"TransactItems": [stats_update("b1"), stats_update("b1")]})]
    log += [
        request("TransactWriteItems", {"TransactItems": [stats_update("b1"), event_put("a@x.io", "t", "b1")]})
    ]
    log += [request("UpdateItem", {"TableName": MAIN, "Key": {"PK": S("STATS#b1"), "SK": S("COUNTERS")}})]

    per_mail, item = max_tx_per_item([compact(r) for r in log], mails=100, names={"b1": "<broadcast>"})

    assert per_mail == pytest.approx(0.02)
    assert item == "MainTable: STATS#<broadcast> / COUNTERS"
    assert max_tx_per_item([], mails=10) == (0.0, "")


def test_function_shapes_come_from_the_specs() -> None:
    def spec(**values: object) -> specs.FunctionSpec:
        return specs.FunctionSpec(name="f", handler="functions.f.handler.handler", description="", **values)  # type: ignore[arg-type]

    source = specs.EventSourceSpec(queue=specs.BROADCAST_QUEUE, batch_size=1, max_concurrency=3)
    worker = function_shape(spec(memory_mb=256, event_sources=(source,)))
    assert (worker.memory_mb, worker.concurrency, worker.concurrency_from) == (256, 3, "event source maximum")
    assert worker.vcpu == pytest.approx(256 / 1769)
    reserved = function_shape(spec(reserved_concurrency=20, event_sources=(source,)))
    assert (reserved.concurrency, reserved.concurrency_from) == (20, "reserved")
    api = function_shape(spec())
    assert (api.concurrency, api.concurrency_from) == (1000, "account default")
    big = FunctionShape("big", memory_mb=3538, concurrency=1, concurrency_from="reserved")
    assert big.vcpu == 1.0  # one Python process uses one vCPU at most


def test_the_ceiling_is_the_lowest_limit_and_names_it() -> None:
    worker = FunctionShape("broadcast-worker", memory_mb=1769, concurrency=4, concurrency_from="reserved")
    assert cpu_ceiling(worker, cpu_ms_per_mail=10.0) == pytest.approx(400.0)  # 4 vCPU x 100 mails/s
    assert cpu_ceiling(worker, cpu_ms_per_mail=0.0) == math.inf
    inputs = Inputs(
        hot_write=HotKey("MainTable", "STATS#<broadcast>", 0.5),  # 2,000/s
        hot_read=None,
        cpu_ms_per_mail={"broadcast-worker": 10.0},  # 400/s
        ses_sends_per_mail=1.0,
        starts_per_mail=0.0,
        transitions_per_mail=0.0,
        http_per_mail=0.0,
        ses_rate=1000.0,
        ses_share=0.95,  # 950/s
    )

    found = ceilings(inputs, {"broadcast-worker": worker})

    assert found == {
        "DynamoDB MainTable key STATS#<broadcast> (1,000 WCU/s)": pytest.approx(2000.0),
        "Lambda CPU of broadcast-worker (4 x 1.00 vCPU, reserved)": pytest.approx(400.0),
        "SES rate (1000/s x 0.95 share)": pytest.approx(950.0),
        # 10 ms of the worker's vCPU per mail: 1,000 environments do 100,000 mails/s
        "Lambda account concurrency (1,000 shared by every function)": pytest.approx(100_000.0),
    }
    assert ceiling(found) == (
        pytest.approx(400.0),
        "Lambda CPU of broadcast-worker (4 x 1.00 vCPU, reserved)",
    )
    assert ceiling({}) == (math.inf, "nothing measured")


def test_step_functions_and_http_limits_apply_per_mail() -> None:
    inputs = Inputs(None, None, {}, ses_sends_per_mail=1.0, starts_per_mail=0.2, transitions_per_mail=2.0,
                    http_per_mail=0.01, ses_rate=14.0)  # fmt: skip

    found = ceilings(inputs, {})

    assert found["Step Functions StartExecution (300/s, us-east-1)"] == pytest.approx(1500.0)
    # 2 transitions entered per mail and 5% of them retried
    assert found["Step Functions state transitions (5,000/s, us-east-1, retries included)"] == pytest.approx(
        5000 / 2.1
    )
    assert found["HTTP API throttle (10,000 requests/s)"] == pytest.approx(1_000_000.0)
    assert ceiling(found)[1] == "SES rate (14/s)"


def test_the_log_keeps_only_what_the_model_reads_of_each_request() -> None:
    """A logged request is reduced when it is made: its keys written and read and the items its
    transaction named, not its parameters and answer (a resolver page is a thousand items)."""
    tx = {"TransactItems": [stats_update("b1"), event_put("a@x.io", "t", "b1")]}
    condition = {"KeyConditionExpression": "PK = :pk", "ExpressionAttributeValues": {":pk": S("TAG#t")}}
    query = (
        {"TableName": MAIN, **condition},
        {"Items": [{"PK": S("TAG#t"), "SK": S(f"SUB#{i}@x.io"), "pad": S("x" * 90)} for i in range(1000)]},
    )
    meter = Meter()
    meter.start_log(compact)
    meter.record("dynamodb", "TransactWriteItems", tx, {})
    meter.record("dynamodb", "Query", *query)
    meter.record("sqs", "SendMessage", {"QueueUrl": "q"}, {})  # not a request the model reads
    log = meter.take_log()

    assert log == [compact(request("TransactWriteItems", tx)), compact(request("Query", *query))]
    assert [len(entry.writes) for entry in log] == [len(writes(request("TransactWriteItems", tx))), 0]
    assert [u.key for u in log[1].reads] == ["TAG#t"] and log[1].reads == tuple(
        reads(request("Query", *query))
    )
    assert max_tx_per_item(log, mails=1)[0] == 1.0
    assert not hasattr(log[1], "params") and not hasattr(log[1], "parsed")
    assert meter.take_log() == []  # the log ends with take_log
