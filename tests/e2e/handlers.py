"""Lambda handlers the e2e tests register on the local runtime (run in-process by it)."""

from __future__ import annotations

from typing import Any

from shared.aws import client


def record(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """SQS consumer: stores each body under PK ``E2E#<body>``; a body ``fail`` is reported failed."""
    failures = []
    for item in event["Records"]:
        if item["body"] == "fail":
            failures.append({"itemIdentifier": item["messageId"]})
            continue
        client("dynamodb").put_item(
            TableName="mailstep-main",
            Item={
                "PK": {"S": f"E2E#{item['body']}"},
                "SK": {"S": "SQS"},
                "function": {"S": context.function_name},
                "source": {"S": item["eventSourceARN"]},
                "receive_count": {"S": item["attributes"]["ApproximateReceiveCount"]},
            },
        )
    return {"batchItemFailures": failures}


def echo(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return {
        "echo": event,
        "function": context.function_name,
        "request_id": context.aws_request_id,
        "has_time_left": context.get_remaining_time_in_millis() > 0,
        "memory": context.memory_limit_in_mb,
    }


class PaymentDeclined(Exception):
    pass


def fail(event: dict[str, Any], context: Any) -> dict[str, Any]:
    raise PaymentDeclined("card declined")
