"""The local CloudWatch of the reputation guardrail (docs/reputation.md, docs/local-runtime.md).

SES computes each configuration set's ``Reputation.BounceRate`` and ``Reputation.ComplaintRate``
(published to CloudWatch, namespace ``AWS/SES``, dimension ``ses:configuration-set``, when the
set has ``ReputationOptions.ReputationMetricsEnabled``: SES Developer Guide, "Reputation metrics"
and "Automatically pausing email sending"), and the stack's CloudWatch alarms watch them. moto
has neither, so the local runtime:

- counts, per configuration set, the recipients of every Send, the permanent bounces and the
  complaints the local SES publishes (:meth:`ReputationMonitor.observe`; the events
  ``mailstep local bounce|complain`` make are published by the local SES too, through
  ``POST /_local/ses/events``), over the last
  :data:`WINDOW_S` seconds since the set's last fresh start (re-enabling sending, as SES's
  ``LastFreshStart``);
- publishes no rate below ``min_sends`` sends in the window (SES reports reputation over a
  representative volume; this number is the local runtime's, not AWS's), else the rate as a
  datapoint into moto's CloudWatch (``GetMetricStatistics`` reads it, as ``mailstep reputation
  status`` does);
- evaluates the template's alarms on those metrics on every change: a transition to ALARM sets
  the alarm's state in moto's CloudWatch and publishes CloudWatch's alarm message (JSON, as
  CloudWatch sends it to SNS) to each of the alarm's actions the runtime has, so the stack's own
  topic -> queue -> reputation-guard function runs from its asset with its IAM. No data is
  ``notBreaching`` (the stack's setting): OK.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from local_aws.template import UnresolvedReference

WINDOW_S = 24 * 3600
DEFAULT_MIN_SENDS = 200
PUT_EVERY_S = 1.0
NAMESPACE = "AWS/SES"
SET_DIMENSION = "ses:configuration-set"
BOUNCE, COMPLAINT = "Reputation.BounceRate", "Reputation.ComplaintRate"
OK, ALARM = "OK", "ALARM"

Publisher = Callable[[str, str], None]  # (topic ARN, message)
MetricSink = Callable[[str, str, float], None]  # (configuration set, metric, value)
StateSink = Callable[[str, str, str], None]  # (alarm name, state, reason)


@dataclass
class LocalAlarm:
    name: str
    metric: str
    configuration_set: str
    threshold: float
    actions: list[str]
    description: str = ""
    period: int = 900
    state: str = "INSUFFICIENT_DATA"


@dataclass
class Window:
    """Counts with their times, oldest first, and their running sum: a rate (and the SES quota's
    ``SentLast24Hours``, ``local_aws.ses``) is read on every send, and summing the window each
    time made each send cost the sends of the last 24 hours (a quarter of the emulator's time
    after 80,000 mails of one broadcast)."""

    entries: deque[tuple[float, int]] = field(default_factory=deque)
    total: int = 0

    def add(self, at: float, n: int) -> None:
        self.entries.append((at, n))
        self.total += n

    def since(self, start: float) -> int:
        """The sum of the counts at or after ``start`` (older ones are dropped)."""
        while self.entries and self.entries[0][0] < start:
            self.total -= self.entries.popleft()[1]
        return self.total


@dataclass
class _Counts:
    sends: Window = field(default_factory=Window)
    bounces: Window = field(default_factory=Window)
    complaints: Window = field(default_factory=Window)


class ReputationMonitor:
    def __init__(
        self,
        publish: Publisher,
        *,
        account: str,
        region: str,
        min_sends: int = DEFAULT_MIN_SENDS,  # no rate is published below this many sends in the window
        alarms_on: bool = True,
    ) -> None:
        self.publish = publish
        self.account = account
        self.region = region
        self.min_sends = min_sends
        self.alarms_on = alarms_on
        self.alarms: list[LocalAlarm] = []
        self.put_metric: MetricSink | None = None
        self.set_state: StateSink | None = None
        self._counts: dict[str, _Counts] = {}
        self._fresh: dict[str, float] = {}
        self._put: dict[str, float] = {}
        self._lock = threading.Lock()

    def watch(self, alarm: LocalAlarm) -> None:
        with self._lock:
            self.alarms.append(alarm)

    def fresh_start(self, configuration_set: str) -> None:
        """Sending re-enabled: the set's rates start over (SES's ``LastFreshStart``)."""
        with self._lock:
            self._fresh[configuration_set] = time.time()
            self._counts.pop(configuration_set, None)

    def observe(self, record: dict[str, Any]) -> None:
        """Count one published SES event record, then evaluate its set's alarms."""
        mail = record.get("mail") or {}
        configuration_set = ((mail.get("tags") or {}).get("ses:configuration-set") or [None])[0]
        if not configuration_set:
            return
        kind = record.get("eventType")
        if kind == "Send":
            n, which = len(mail.get("destination") or []), "sends"
        elif kind == "Bounce" and (record.get("bounce") or {}).get("bounceType") == "Permanent":
            n, which = len(record["bounce"].get("bouncedRecipients") or []), "bounces"
        elif kind == "Complaint":
            n, which = len((record.get("complaint") or {}).get("complainedRecipients") or []), "complaints"
        else:
            return
        now = time.time()
        with self._lock:
            counts = self._counts.setdefault(configuration_set, _Counts())
            getattr(counts, which).add(now, n)
        self.evaluate(configuration_set)

    def rates(self, configuration_set: str) -> tuple[int, float | None, float | None]:
        """(sends in the window, bounce rate, complaint rate); rates None below ``min_sends``."""
        now = time.time()
        start = max(now - WINDOW_S, self._fresh.get(configuration_set, 0.0))
        with self._lock:
            counts = self._counts.get(configuration_set) or _Counts()
            windows = (counts.sends, counts.bounces, counts.complaints)
            sends, bounces, complaints = (window.since(start) for window in windows)
        if sends < max(1, self.min_sends):
            return sends, None, None
        return sends, bounces / sends, complaints / sends

    def counts(self) -> dict[str, dict[str, int]]:
        """Per configuration set, the sends, permanent bounces and complaints in its window (what
        its rates are computed from; ``GET /_local/status``)."""
        now = time.time()
        with self._lock:
            sets = list(self._counts)
        found = {}
        for configuration_set in sets:
            start = max(now - WINDOW_S, self._fresh.get(configuration_set, 0.0))
            with self._lock:
                counts = self._counts.get(configuration_set) or _Counts()
                found[configuration_set] = {
                    "sends": counts.sends.since(start),
                    "bounces": counts.bounces.since(start),
                    "complaints": counts.complaints.since(start),
                }
        return found

    def evaluate(self, configuration_set: str) -> None:
        _, bounce, complaint = self.rates(configuration_set)
        values = {BOUNCE: bounce, COMPLAINT: complaint}
        fired: list[tuple[LocalAlarm, str, float]] = []
        with self._lock:
            for alarm in self.alarms if self.alarms_on else []:
                if alarm.configuration_set != configuration_set:
                    continue
                value = values.get(alarm.metric)
                state = ALARM if value is not None and value > alarm.threshold else OK
                if state != alarm.state:
                    old, alarm.state = alarm.state, state
                    fired.append((alarm, old, value if value is not None else 0.0))
        # a datapoint per set at most every PUT_EVERY_S seconds (and at every transition): the
        # metric's store stays small whatever the sending volume
        now = time.monotonic()
        if self.put_metric is not None and (
            fired or now - self._put.get(configuration_set, -1e9) >= PUT_EVERY_S
        ):
            self._put[configuration_set] = now
            for metric, value in values.items():
                if value is not None:
                    self.put_metric(configuration_set, metric, value)
        for alarm, old, value in fired:
            reason = _reason(alarm, value)
            if self.set_state is not None:
                self.set_state(alarm.name, alarm.state, reason)
            if alarm.state == ALARM:
                message = self.alarm_message(alarm, old, reason)
                for topic in alarm.actions:
                    self.publish(topic, message)

    def alarm_message(self, alarm: LocalAlarm, old: str, reason: str) -> str:
        """The JSON CloudWatch publishes to an alarm action's SNS topic."""
        now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "+0000")
        return json.dumps(
            {
                "AlarmName": alarm.name,
                "AlarmDescription": alarm.description,
                "AWSAccountId": self.account,
                "NewStateValue": alarm.state,
                "NewStateReason": reason,
                "StateChangeTime": now,
                "Region": self.region,
                "AlarmArn": f"arn:aws:cloudwatch:{self.region}:{self.account}:alarm:{alarm.name}",
                "OldStateValue": old,
                "OKActions": [],
                "AlarmActions": alarm.actions,
                "InsufficientDataActions": [],
                "Trigger": {
                    "MetricName": alarm.metric,
                    "Namespace": NAMESPACE,
                    "StatisticType": "Statistic",
                    "Statistic": "MAXIMUM",
                    "Unit": None,
                    "Dimensions": [{"value": alarm.configuration_set, "name": SET_DIMENSION}],
                    "Period": alarm.period,
                    "EvaluationPeriods": 1,
                    "DatapointsToAlarm": 1,
                    "ComparisonOperator": "GreaterThanThreshold",
                    "Threshold": alarm.threshold,
                    "TreatMissingData": "notBreaching",
                    "EvaluateLowSampleCountPercentile": "",
                },
            }
        )


def _reason(alarm: LocalAlarm, value: float) -> str:
    stamp = datetime.now(UTC).strftime("%d/%m/%y %H:%M:%S")
    relation = "greater than" if value > alarm.threshold else "not greater than"
    return (
        f"Threshold Crossed: 1 datapoint [{value} ({stamp})] was {relation} "
        f"the threshold ({alarm.threshold})."
    )


def alarms_of(template: Any) -> list[LocalAlarm]:
    """The template's alarms on SES's per-configuration-set reputation metrics, resolved to the
    local resources; an action the runtime did not create (the operator's alarm topic) is left
    out (docs/local-runtime.md)."""
    found = []
    for logical_id, resource in template.of_type("AWS::CloudWatch::Alarm").items():
        props = resource["Properties"]
        if props.get("Namespace") != NAMESPACE or props.get("MetricName") not in (BOUNCE, COMPLAINT):
            continue
        dimensions = {d["Name"]: d["Value"] for d in props.get("Dimensions", [])}
        if SET_DIMENSION not in dimensions:
            continue
        actions = []
        for action in props.get("AlarmActions", []):
            try:
                actions.append(str(template.resolve(action)))
            except UnresolvedReference:  # a resource the local runtime does not create
                continue
        found.append(
            LocalAlarm(
                name=str(props.get("AlarmName") or f"Mailstep-{logical_id}"),
                metric=str(props["MetricName"]),
                configuration_set=str(template.resolve(dimensions[SET_DIMENSION])),
                threshold=float(props["Threshold"]),
                actions=actions,
                description=str(props.get("AlarmDescription", "")),
                period=int(props.get("Period", 900)),
            )
        )
    return found
