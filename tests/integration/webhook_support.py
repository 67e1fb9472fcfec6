"""Test support for webhooks on moto: a receiver on loopback, the tables' change streams read
as Lambda hands them to a function, and the webhook queue read as the Lambda service would."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from moto.core import DEFAULT_ACCOUNT_ID
from moto.dynamodb.models import dynamodb_backends
from moto.sqs.models import sqs_backends

from cli.local.streams import lambda_record, record_passes
from shared.core.specs import WEBHOOK_DISPATCH_FUNCTION


@dataclass
class Received:
    headers: dict[str, str]
    body: str

    @property
    def payload(self) -> dict[str, Any]:
        return dict(json.loads(self.body))


@dataclass
class Receiver:
    """An HTTP receiver on 127.0.0.1 that answers with the statuses queued in ``answers``
    (then ``default``) and records every request."""

    received: list[Received] = field(default_factory=list)
    answers: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    default: int = 200
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("content-length", "0"))).decode()
                receiver.received.append(Received({k.lower(): v for k, v in self.headers.items()}, body))
                status, headers = receiver.answers.pop(0) if receiver.answers else (receiver.default, {})
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


class Streams:
    """The new records of every table's change stream (moto keeps them in the table's shard), as
    Lambda hands them to the dispatcher: in the event format, through the mapping's filters."""

    def __init__(self) -> None:
        self.position: dict[str, int] = {}

    def take(self) -> list[dict[str, Any]]:
        backend = dynamodb_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]
        found: list[dict[str, Any]] = []
        for source in WEBHOOK_DISPATCH_FUNCTION.stream_sources:
            table = backend.get_table(source.table.local_name)
            items = table.stream_shard.items
            start = self.position.get(table.name, 0)
            self.position[table.name] = len(items)
            arn = f"{table.table_arn}/stream/{table.stream_shard.created_on.isoformat()}"
            records = [lambda_record(i.to_json(), arn) for i in items[start:]]
            found += [r for r in records if record_passes(r, source.filters)]
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
