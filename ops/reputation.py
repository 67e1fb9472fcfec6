"""The reputation guardrail for operators (docs/reputation.md): ``status`` and ``resume``, one
implementation for the CLI (`mailstep reputation`), the MCP server and `mailstep doctor`.

- rates: SES's per-configuration-set ``Reputation.BounceRate`` / ``Reputation.ComplaintRate``
  (CloudWatch ``AWS/SES``, dimension ``ses:configuration-set``), the latest datapoint of the
  last :data:`RATE_WINDOW`; none while SES publishes none (too little volume);
- thresholds: those of the stack's alarms on the marketing set's metrics (what pauses it);
- paused or not: the set's ``SendingOptions`` in SES; since when: the guardrail's record;
- the broadcasts the pause holds: those ``paused_reputation`` among the newest 50.
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
    from ops.broadcasts import Broadcasts
    from ops.targets import Target
    from shared.broadcasts.model import Broadcast

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

    def _sending_enabled(self, configuration_set: str) -> bool:
        """Whether SES sends through the set (its ``SendingOptions``: one GetConfigurationSet)."""
        answer = self.target.client("sesv2").get_configuration_set(ConfigurationSetName=configuration_set)
        return (answer.get("SendingOptions") or {}).get("SendingEnabled", True) is not False

    def marketing_paused(self) -> bool:
        """Whether marketing sending is paused (one read: the marketing set's options in SES); the
        console's overview asks it on every load. False when the deployment names no marketing set."""
        marketing = self.settings.configuration_set
        return bool(marketing) and not self._sending_enabled(marketing)

    def paused_broadcasts(self) -> list[Broadcast]:
        """The broadcasts the pause holds (``paused_reputation``, among the 50 newest: the ones that
        can be in progress), which :meth:`resume` resumes."""
        return [r for r in self._broadcasts().list() if r.status == PAUSED_REPUTATION]

    def _broadcasts(self) -> Broadcasts:
        from ops.broadcasts import Broadcasts

        return Broadcasts.from_settings(self.settings, self.target.aws)

    def status(self) -> list[SetReputation]:
        marketing = self.settings.configuration_set
        thresholds = self._thresholds(marketing) if marketing else {}
        record = self.store.get(specs.PAUSABLE_CONFIGURATION_SET.id)
        found = []
        for kind, name in self._sets():
            enabled = self._sending_enabled(name)
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
        broadcasts = self._broadcasts()
        resumed = [broadcasts.resume(record.id).id for record in self.paused_broadcasts()]
        return {
            "configuration_set": current.configuration_set,
            "was_paused": not current.sending_enabled,
            "recorded": recorded,
            "forced": force and bool(current.above),
            "broadcasts_resumed": resumed,
        }


def resumed_line(answer: dict[str, Any]) -> str:
    """What :meth:`Reputation.resume` did, in a line (the CLI's output, the console's message)."""
    resumed = ", ".join(answer["broadcasts_resumed"]) or "none"
    forced = " (forced)" if answer["forced"] else ""
    return (
        f"marketing sending resumed on {answer['configuration_set']}{forced}; broadcasts resumed: {resumed}"
    )


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
