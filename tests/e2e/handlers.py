"""Lambda handlers the e2e tests register on the local runtime (and the execution
environment tests run in a child process)."""

from __future__ import annotations

import os
import time
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
                "pid": {"N": str(os.getpid())},
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


def whoami(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """The process and the environment variables the invocation ran with."""
    return {"pid": os.getpid(), "env": os.environ.get("E2E_FLAVOUR"), "echo": event}


def crash(event: dict[str, Any], context: Any) -> dict[str, Any]:
    os._exit(3)  # the execution environment dies mid-invocation


def linger(event: dict[str, Any], context: Any) -> dict[str, Any]:
    time.sleep(float(event["seconds"]))
    return {"slept": event["seconds"]}
