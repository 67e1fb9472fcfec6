"""Lambda handlers the e2e tests deploy on the local runtime (uploaded as this one file in a
code zip, like any function created through the Lambda API) and the execution environment
tests run. Standard library and boto3 only: what the Lambda Python runtime provides."""

from __future__ import annotations

import importlib.util
import os
import platform
import sys
import time
from typing import Any

import boto3

IMPORTABLE = ("boto3", "moto", "shared", "pydantic")
FLAVOUR_AT_IMPORT = os.environ.get("E2E_FLAVOUR")  # the function's variables are set before its import


def record(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """SQS consumer: stores each body under PK ``E2E#<body>``; a body ``fail`` is reported
    failed, a body ``once-...`` is reported failed at its first receive only."""
    failures = []
    for item in event["Records"]:
        first = item["attributes"]["ApproximateReceiveCount"] == "1"
        if item["body"] == "fail" or (item["body"].startswith("once-") and first):
            failures.append({"itemIdentifier": item["messageId"]})
            continue
        boto3.client("dynamodb").put_item(
            TableName="mailstep-main",
            Item={
                "PK": {"S": f"E2E#{item['body']}"},
                "SK": {"S": "SQS"},
                "function": {"S": context.function_name},
                "source": {"S": item["eventSourceARN"]},
                "receive_count": {"S": item["attributes"]["ApproximateReceiveCount"]},
                "pid": {"N": str(os.getpid())},
                "stored_at": {"N": str(time.time())},
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
    """The process, interpreter, import path and environment variables the invocation ran with."""
    return {
        "pid": os.getpid(),
        "python": platform.python_version(),
        "path": sys.path,
        "importable": {name: importlib.util.find_spec(name) is not None for name in IMPORTABLE},
        "env": os.environ.get("E2E_FLAVOUR"),
        "env_at_import": FLAVOUR_AT_IMPORT,
        "execution_env": os.environ.get("AWS_EXECUTION_ENV"),
        "boto3": boto3.__file__,
        "echo": event,
    }


def crash(event: dict[str, Any], context: Any) -> dict[str, Any]:
    print("about to crash")
    os._exit(3)  # the execution environment dies mid-invocation


def get_item(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return dict(
        boto3.client("dynamodb").get_item(TableName=event["table"], Key={"PK": {"S": "x"}, "SK": {"S": "y"}})
    )


def linger(event: dict[str, Any], context: Any) -> dict[str, Any]:
    time.sleep(float(event["seconds"]))
    return {"slept": event["seconds"]}
