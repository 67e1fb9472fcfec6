"""Test support for webhooks on moto: the tables' change streams read as Lambda hands them to a
function, and the webhook queue read as the Lambda service would."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from moto.core import DEFAULT_ACCOUNT_ID
from moto.dynamodb.models import dynamodb_backends
from moto.sqs.models import sqs_backends

from local_aws.streams import lambda_record, record_passes
from shared.core.specs import WEBHOOK_DISPATCH_FUNCTION, FunctionSpec


class Streams:
    """The new records of every table's change stream (moto keeps them in the table's shard), as
    Lambda hands them to ``function`` (the dispatcher by default): in the event format, through
    the mapping's filters."""

    def __init__(self, function: FunctionSpec = WEBHOOK_DISPATCH_FUNCTION) -> None:
        self.function = function
        self.position: dict[str, int] = {}

    def take(self) -> list[dict[str, Any]]:
        return [record for batch in self.batches() for record in batch]

    def batches(self) -> list[list[dict[str, Any]]]:
        """The new records as Lambda hands them: a batch per stream source (one table's shard)."""
        backend = dynamodb_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]
        found: list[list[dict[str, Any]]] = []
        for source in self.function.stream_sources:
            table = backend.get_table(source.table.local_name)
            items = table.stream_shard.items
            start = self.position.get(table.name, 0)
            self.position[table.name] = len(items)
            arn = f"{table.table_arn}/stream/{table.stream_shard.created_on.isoformat()}"
            records = [lambda_record(i.to_json(), arn) for i in items[start:]]
            found.append([r for r in records if record_passes(r, source.filters)])
        return found

    def skip(self) -> None:
        """Forget what is in the streams now."""
        self.take()


def take_queued(queue_name: str) -> list[tuple[str, int]]:
    """Every message on ``queue_name`` (body, DelaySeconds), taken off the queue whatever its
    delay: the test stands for the time that passes."""
    queue = sqs_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].queues[queue_name]
    messages = list(queue._messages)
    queue._messages.clear()
    return [(m.body, max(0, round((m.delayed_until - m.sent_timestamp) / 1000))) for m in messages]


def sqs_records(bodies: list[str], queue: str) -> Iterator[dict[str, Any]]:
    from tests.integration.conftest import sqs_record

    for body in bodies:
        yield sqs_record(body, queue)
