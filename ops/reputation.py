"""The reputation guardrail for operators (docs/reputation.md): ``status`` and ``resume``, one
implementation for the CLI (`mailstep reputation`), the MCP server and `mailstep doctor`.

- rates: SES's per-configuration-set ``Reputation.BounceRate`` / ``Reputation.ComplaintRate``
  (CloudWatch ``AWS/SES``, dimension ``ses:configuration-set``), the latest datapoint of the
  last :data:`RATE_WINDOW`; none while SES publishes none (too little volume);
- thresholds: those of the stack's alarms on the marketing set's metrics (what pauses it);
- paused or not: the set's ``SendingOptions`` in SES; since when: the guardrail's record.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from shared.broadcasts.model import PAUSED_REPUTATION
from shared.core import specs
from shared.core.errors import Conflict
from shared.reputation.store import ReputationStore

if TYPE_CHECKING:
    from ops.targets import Target

RATE_WINDOW = timedelta(hours=6)
NAMESPACE = "AWS/SES"
SET_DIMENSION = "ses:configuration-set"
BOUNCE, COMPLAINT = "Reputation.BounceRate", "Reputation.ComplaintRate"
MARKETING, TRANSACTIONAL = "marketing", "transactional"


@dataclass(frozen=True)
class SetReputation:
    kind: str  # marketing (the guardrail pauses it) | transactional (never paused)
    configuration_set: str
    sending_enabled: bool
    paused_at: str | None
    bounce_rate: float | None
    complaint_rate: float | None
    bounce_threshold: float | None
    complaint_threshold: float | None

    @property
    def above(self) -> list[str]:
        """The rates above their thresholds, described (empty: none)."""
        found = []
        for what, rate, threshold in (
            ("bounce", self.bounce_rate, self.bounce_threshold),
            ("complaint", self.complaint_rate, self.complaint_threshold),
        ):
            if rate is not None and threshold is not None and rate > threshold:
                found.append(f"{what} rate {rate:.2%} is above {threshold:.2%}")
        return found

    def public(self) -> dict[str, Any]:
        return {**asdict(self), "paused": not self.sending_enabled, "above_threshold": self.above}


class Reputation:
    def __init__(self, target: Target) -> None:
        self.target = target
        self.settings = target.settings
        self.store = ReputationStore(self.settings.table_name, client=target.client("dynamodb"))

    def _sets(self) -> list[tuple[str, str]]:
        marketing = self.settings.configuration_set
        transactional = self.settings.transactional_configuration_set
        found = [(MARKETING, marketing)] if marketing else []
        if transactional and transactional != marketing:
            found.append((TRANSACTIONAL, transactional))
        return found

    def _thresholds(self, configuration_set: str) -> dict[str, float]:
        cloudwatch = self.target.client("cloudwatch")
        found: dict[str, float] = {}
        for page in cloudwatch.get_paginator("describe_alarms").paginate(AlarmTypes=["MetricAlarm"]):
            for alarm in page.get("MetricAlarms", []):
                dimensions = {d["Name"]: d["Value"] for d in alarm.get("Dimensions", [])}
                metric = alarm.get("MetricName", "")
                if (
                    alarm.get("Namespace") == NAMESPACE
                    and metric in (BOUNCE, COMPLAINT)
                    and dimensions.get(SET_DIMENSION) == configuration_set
                ):
                    found[metric] = min(found.get(metric, float("inf")), float(alarm["Threshold"]))
        return found

    def _rate(self, configuration_set: str, metric: str) -> float | None:
        now = datetime.now(UTC)
        points = self.target.client("cloudwatch").get_metric_statistics(
            Namespace=NAMESPACE,
            MetricName=metric,
            Dimensions=[{"Name": SET_DIMENSION, "Value": configuration_set}],
            StartTime=now - RATE_WINDOW,
            EndTime=now + timedelta(minutes=1),
            Period=60,
            Statistics=["Maximum"],
        )["Datapoints"]
        if not points:
            return None
        return float(max(points, key=lambda p: p["Timestamp"])["Maximum"])

    def status(self) -> list[SetReputation]:
        ses = self.target.client("sesv2")
        marketing = self.settings.configuration_set
        thresholds = self._thresholds(marketing) if marketing else {}
        record = self.store.get(specs.PAUSABLE_CONFIGURATION_SET.id)
        found = []
        for kind, name in self._sets():
            options = ses.get_configuration_set(ConfigurationSetName=name).get("SendingOptions") or {}
            enabled = options.get("SendingEnabled", True) is not False
            found.append(
                SetReputation(
                    kind=kind,
                    configuration_set=name,
                    sending_enabled=enabled,
                    paused_at=record.paused_at
                    if record and record.paused and not enabled and kind == MARKETING
                    else None,
                    bounce_rate=self._rate(name, BOUNCE),
                    complaint_rate=self._rate(name, COMPLAINT),
                    bounce_threshold=thresholds.get(BOUNCE),
                    complaint_threshold=thresholds.get(COMPLAINT),
                )
            )
        return found

    def marketing(self) -> SetReputation:
        for found in self.status():
            if found.kind == MARKETING:
                return found
        raise Conflict("this deployment names no marketing configuration set")

    def resume(self, *, force: bool = False) -> dict[str, Any]:
        """Re-enable sending on the marketing set and resume its ``paused_reputation``
        broadcasts (a new round each: send-once, no duplicate). Refused while a rate is above its
        threshold, unless ``force``."""
        current = self.marketing()
        if current.above and not force:
            raise Conflict(
                f"not resumed: the marketing set's {'; '.join(current.above)}: find the cause first "
                "(`mailstep stats`, `mailstep suppression list`), or resume anyway with --force"
            )
        self.target.client("sesv2").put_configuration_set_sending_options(
            ConfigurationSetName=current.configuration_set, SendingEnabled=True
        )
        recorded = self.store.mark_resumed(specs.PAUSABLE_CONFIGURATION_SET.id, forced=force)
        from ops.broadcasts import Broadcasts

        broadcasts = Broadcasts.from_settings(self.settings, self.target.aws)
        resumed = []
        for record in broadcasts.list():
            if record.status == PAUSED_REPUTATION:
                resumed.append(broadcasts.resume(record.id).id)
        return {
            "configuration_set": current.configuration_set,
            "was_paused": not current.sending_enabled,
            "recorded": recorded,
            "forced": force and bool(current.above),
            "broadcasts_resumed": resumed,
        }


def doctor_finding(target: Target) -> str | None:
    """`mailstep doctor`: a paused marketing set is a finding (None: sending is on)."""
    current = Reputation(target).marketing()
    if current.sending_enabled:
        return None
    since = f" since {current.paused_at}" if current.paused_at else ""
    return (
        f"marketing sending is paused{since} (configuration set {current.configuration_set}): "
        "`mailstep reputation status`, then `mailstep reputation resume`"
    )
