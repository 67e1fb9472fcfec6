"""Runs scenarios on a local runtime and measures each step with :class:`bench.meter.Meter`."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.capacity import LAMBDA_MB_PER_VCPU
from bench.meter import Measurement, Meter
from local_aws.lambdas import STATS
from local_aws.streams import StreamPoller
from shared.core.aws import ClientFactory

SETTLE_S = 1.0  # the stream pollers' idle time that ends a step (Bench.settle)


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
    runtime: Any  # local_aws.LocalRuntime
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

    def settle(self, done: Callable[[], bool] = lambda: True, timeout_s: float = 120) -> None:
        """Until the table streams' pollers have nothing left (every batch handed on: the fold's
        and the dispatcher's requests are the step's), ``done()`` holds, and SETTLE_S passed so."""
        deadline = time.monotonic() + timeout_s
        quiet_since: float | None = None
        while time.monotonic() < deadline:
            pollers = [p for p in self.runtime.pollers if isinstance(p, StreamPoller)]
            if all(p.pending() == 0 for p in pollers) and done():
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since >= SETTLE_S:
                    return
            else:
                quiet_since = None
            time.sleep(0.05)
        raise RuntimeError("the table streams did not settle in time")

    def _cpu_gb_seconds(self) -> float:
        """GB-s as Lambda would bill the CPU work done so far: each function's CPU seconds
        (its execution environments' process time) divided by the vCPU share its memory buys
        (memory / 1,769 MB, at most 1), times its memory. A CPU-bound function is billed this;
        one that waits on requests is billed its waits too (local wall time, the upper bound,
        includes the emulator's own latency)."""
        environments = self.runtime.environments
        deployment = self.runtime.deployment
        if environments is None or deployment is None:
            return 0.0
        configs = deployment.template.functions()
        with environments._lock:
            cpu = dict(environments.cpu_seconds)
        total = 0.0
        for function in self.runtime.resources.functions.values():
            memory_mb = configs[function.spec.handler].memory_mb
            vcpu = min(1.0, memory_mb / LAMBDA_MB_PER_VCPU)
            total += cpu.get(function.name, 0.0) / vcpu * memory_mb / 1024
        return total

    def _totals(self) -> dict[str, Any]:
        usage = self.meter.snapshot()
        return {
            "usage": usage,
            "invocations": sum(STATS.invocations.values()),
            "gb_s": self._cpu_gb_seconds(),
            "gb_s_wall": STATS.gb_seconds,
            "sends": self.runtime.ses.sends,
            "http": self.runtime.front.stats.requests,
            "polls": self.runtime.poller_counts.receives + self.runtime.poller_counts.deletes,
            "scheduled": len(self.runtime.one_time_schedules.fired) if self.runtime.one_time_schedules else 0,
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
            lambda_gb_s_wall=after["gb_s_wall"] - before["gb_s_wall"],
            sfn_transitions=transitions,
            ses_sends=after["sends"] - before["sends"],
            http_requests=after["http"] - before["http"],
            sqs_platform_requests=after["polls"] - before["polls"],
            scheduler_invocations=after["scheduled"] - before["scheduled"],
        )
