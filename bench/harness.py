"""Runs scenarios on a local runtime and measures each step with :class:`bench.meter.Meter`."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.meter import Measurement, Meter
from cli.local.lambdas import STATS
from shared.core.aws import ClientFactory


def state_transitions(aws: ClientFactory) -> int:
    """Step Functions state transitions so far (StateEntered events of every execution)."""
    sfn = aws.client("stepfunctions")
    total = 0
    for machine in sfn.list_state_machines().get("stateMachines", []):
        for execution in sfn.list_executions(stateMachineArn=machine["stateMachineArn"]).get(
            "executions", []
        ):
            history = sfn.get_execution_history(executionArn=execution["executionArn"], maxResults=1000)
            total += sum(1 for e in history["events"] if e["type"].endswith("StateEntered"))
    return total


@dataclass
class Bench:
    runtime: Any  # cli.local.LocalRuntime
    meter: Meter

    @property
    def aws(self) -> ClientFactory:
        """The clients of the runtime's endpoint (its factory: the meter counts their requests)."""
        return self.runtime.aws

    def post(self, path: str, body: Any) -> tuple[int, Any]:
        request = urllib.request.Request(  # noqa: S310 - the local API
            self.runtime.api_url + path,
            data=json.dumps(body).encode(),
            headers={"content-type": "application/json", "authorization": f"Bearer {self.runtime.api_key}"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def _totals(self) -> dict[str, Any]:
        usage = self.meter.snapshot()
        return {
            "usage": usage,
            "invocations": sum(STATS.invocations.values()),
            "gb_s": STATS.gb_seconds,
            "sends": self.runtime.ses.sends,
            "http": self.runtime.front.stats.requests,
            "polls": self.runtime.poller_counts.receives + self.runtime.poller_counts.deletes,
        }

    def measure(self, label: str, units: int, unit_name: str, step: Callable[[], None]) -> Measurement:
        before = self._totals()
        transitions_before = state_transitions(self.aws)
        step()
        transitions = state_transitions(self.aws) - transitions_before  # the history reads are not counted
        after = self._totals()
        requests = Counter(after["usage"].requests)
        requests.subtract(before["usage"].requests)
        for name in ("ListStateMachines", "ListExecutions", "GetExecutionHistory"):
            requests.pop(("stepfunctions", name), None)
        return Measurement(
            label=label,
            units=units,
            unit_name=unit_name,
            requests=+requests,
            wru=after["usage"].wru - before["usage"].wru,
            rru=after["usage"].rru - before["usage"].rru,
            lambda_invocations=after["invocations"] - before["invocations"],
            lambda_gb_s=after["gb_s"] - before["gb_s"],
            sfn_transitions=transitions,
            ses_sends=after["sends"] - before["sends"],
            http_requests=after["http"] - before["http"],
            sqs_platform_requests=after["polls"] - before["polls"],
        )
