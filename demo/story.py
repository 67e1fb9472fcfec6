"""The demo's reader: a :class:`Demo` tells the story through a running local runtime's HTTP API
and checks each outcome; the chapters (``demo.chapters``, ``demo.consent``) take one."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from rich.console import Console

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

    from ops.broadcasts import Broadcasts
    from shared.store.subscribers import SubscriberStore

T = TypeVar("T")

# The longest the demo waits for one outcome (a mail, an execution's end): generous, as the functions
# share the machine with everything else on it; a quiet laptop sees each in a few seconds.
WAIT_S = 90.0


def until(check: Callable[[], T], timeout_s: float = WAIT_S) -> T:
    deadline = time.monotonic() + timeout_s
    while not (found := check()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


@dataclass
class Demo:
    runtime: Any  # local_aws.LocalRuntime
    console: Console
    failures: list[str] = field(default_factory=list)

    def post(self, path: str, body: Any, *, key: str | None = None) -> tuple[int, Any]:
        """POST JSON to the local HTTP API with the runtime's key (or ``key``)."""
        request = urllib.request.Request(  # noqa: S310 - the local API
            self.runtime.api_url + path,
            data=json.dumps(body).encode(),
            headers={
                "content-type": "application/json",
                "authorization": f"Bearer {key if key is not None else self.runtime.api_key}",
            },
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def events(self, *events: dict[str, Any]) -> list[dict[str, Any]]:
        status, answer = self.post("/v1/events", {"events": list(events)})
        self.expect(status == 200, f"POST /v1/events answered {status}: {answer}")
        results = list(answer["results"])
        for event, result in zip(events, results, strict=True):
            tags = " ".join(
                [*(f"+{t}" for t in result["tags_added"]), *(f"-{t}" for t in result["tags_removed"])]
            )
            self.console.print(
                f"  [green]{status}[/green] {result['type']:<23} {event['email']:<20} "
                f"{result['subscriber']:<9} {tags}".rstrip(),
                highlight=False,
            )
            for verb, key in (("started", "sequences_started"), ("stopped", "sequences_stopped")):
                for sequence in result.get(key, []):
                    self.console.print(f"      sequence [bold]{sequence}[/bold] {verb}", highlight=False)
        return results

    def refused(self, status: int, answer: Any) -> None:
        """One line for an error answer: status, code and message."""
        error = answer.get("error", {}) if isinstance(answer, dict) else {}
        self.console.print(
            f"  [yellow]{status}[/yellow] {error.get('code', answer)}: {error.get('message', '')}",
            highlight=False,
        )

    def held(self, count: int, timeout_s: float = WAIT_S) -> int:
        """Wait until ``count`` executions stand at a Wait of the paused clock; returns how many do."""
        deadline = time.monotonic() + timeout_s
        while self.runtime.clock.held != count and time.monotonic() < deadline:
            time.sleep(0.05)
        held = int(self.runtime.clock.held)
        self.expect(held == count, f"{held} sequence executions wait, expected {count}")
        return held

    def clock(self, *, paused: bool) -> None:
        """Pause or resume the runtime's virtual clock (``POST /_local/clock``): while it is
        paused, Wait states do not end, so sequences stop at their next wait."""
        status, answer = self.post("/_local/clock", {"paused": paused})
        self.expect(status == 200 and answer.get("paused") is paused, f"the clock did not change: {answer}")

    def store(self) -> SubscriberStore:
        """The subscriber store on the runtime's tables, through the runtime's clients."""
        from shared.store.subscribers import SubscriberStore

        tables = self.runtime.resources.tables
        return SubscriberStore(tables["table_name"], tables["events_table_name"], self.ddb())

    def ddb(self) -> DynamoDBClient:
        """The runtime's DynamoDB client (``LocalRuntime.aws``; this process's environment
        does not point at the runtime)."""
        return self.runtime.aws.client("dynamodb")

    def broadcasts(self) -> Broadcasts:
        """The operator's broadcast service (``ops.broadcasts.Broadcasts``) on the runtime's
        tables and broadcast queues, as ``mailstep broadcast send`` uses it."""
        from ops.broadcasts import Broadcasts
        from shared.core import specs
        from shared.core.settings import Settings

        resources = self.runtime.resources
        return Broadcasts.from_settings(
            Settings(
                table_name=resources.tables["table_name"],
                events_table_name=resources.tables["events_table_name"],
                broadcast_queue_url=resources.queues[specs.BROADCAST_QUEUE.id].url,
                broadcast_control_queue_url=resources.queues[specs.BROADCAST_CONTROL_QUEUE.id].url,
            ),
            aws=self.runtime.aws,
        )

    def expect(self, ok: bool, message: str) -> None:
        if not ok:
            self.failures.append(message)
            self.console.print(f"  [red]unexpected:[/red] {message}")

    def chapter(self, title: str) -> None:
        self.console.rule(f"[bold]{title}")
