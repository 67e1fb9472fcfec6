"""The bench's read units for BatchGetItem follow DynamoDB's rule: each key is read as a
GetItem would be (a found item per started 4 KB, a missing one at the minimum), strongly
consistent reads at 1, eventually consistent at 0.5, unprocessed keys not read."""

from __future__ import annotations

from bench.meter import dynamodb_capacity


def test_batch_get_item_reads_each_key_as_a_get_item() -> None:
    big = {"PK": {"S": "SUB#a"}, "SK": {"S": "PROFILE"}, "blob": {"S": "x" * 5000}}  # 2 x 4 KB
    small = {"PK": {"S": "SUB#b"}, "SK": {"S": "PROFILE"}}
    keys = [{"PK": {"S": f"SUB#{c}"}, "SK": {"S": "PROFILE"}} for c in "abcd"]
    params = {
        "RequestItems": {
            "main": {"Keys": keys, "ConsistentRead": True},
            "events": {"Keys": keys[:2]},
        }
    }
    parsed = {
        "Responses": {"main": [big, small], "events": []},
        "UnprocessedKeys": {"main": {"Keys": keys[3:]}},
    }

    # main: 2 + 1 found, 1 missing, 1 unprocessed (not read); events: 2 missing, eventually consistent
    assert dynamodb_capacity("BatchGetItem", params, parsed) == (0.0, 4.0 + 1.0)
