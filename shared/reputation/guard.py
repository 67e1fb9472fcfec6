"""The pausing logic the reputation-guard function runs for each alarm notification.

CloudWatch publishes an alarm's state change to its SNS actions as JSON (``AlarmName``,
``NewStateValue``, ``NewStateReason``, ``StateChangeTime``, ``Trigger`` with ``MetricName``,
``Namespace``, ``Dimensions`` as ``[{"name", "value"}]`` and ``Threshold``: CloudWatch User
Guide, "Using Amazon CloudWatch alarms" / alarm actions to SNS). The topic delivers it to the
function's queue inside an SNS envelope (``Message``).

:func:`guard` is idempotent (SQS delivers at least once): pausing a paused set changes nothing
in SES, the record changes only when ``paused`` flips, and only broadcasts still in progress move.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shared.broadcasts.model import RESOLVING, SENDING
from shared.broadcasts.records import BroadcastStore
from shared.core.aws import client as aws_client
from shared.core.errors import InvalidInput
from shared.core.observability import logger
from shared.core.settings import Settings
from shared.core.specs import PAUSABLE_CONFIGURATION_SET
from shared.reputation.store import ReputationStore

if TYPE_CHECKING:
    from mypy_boto3_sesv2 import SESV2Client

ALARM = "ALARM"
SET_DIMENSION = "ses:configuration-set"  # SES's per-configuration-set reputation metrics


@dataclass(frozen=True)
class AlarmNotice:
    alarm: str
    state: str
    metric: str
    configuration_set: str
    threshold: float
    reason: str
    at: str


def parse_alarm(body: str) -> AlarmNotice:
    """An SQS body (SNS envelope or the bare alarm message) -> the notice; InvalidInput names
    what is missing."""
    try:
        message: Any = json.loads(body)
        if isinstance(message, dict) and "AlarmName" not in message and "Message" in message:
            message = json.loads(message["Message"])
        if not isinstance(message, dict):
            raise ValueError("not an object")
        trigger = message.get("Trigger") or {}
        dimensions = {
            str(d.get("name") or d.get("Name")): str(d.get("value") or d.get("Value"))
            for d in trigger.get("Dimensions") or []
        }
        return AlarmNotice(
            alarm=str(message["AlarmName"]),
            state=str(message["NewStateValue"]),
            metric=str(trigger.get("MetricName", "")),
            configuration_set=dimensions.get(SET_DIMENSION, ""),
            threshold=float(trigger.get("Threshold", 0.0)),
            reason=str(message.get("NewStateReason", "")),
            at=str(message.get("StateChangeTime", "")),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidInput(f"not a CloudWatch alarm notification: {exc}", []) from None


@dataclass(frozen=True)
class GuardResult:
    status: str  # paused | ignored
    newly_paused: bool = False
    broadcasts: list[str] = field(default_factory=list)


@dataclass
class GuardContext:
    configuration_set: str  # the marketing set's name
    store: ReputationStore
    broadcasts: BroadcastStore
    ses: SESV2Client | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> GuardContext:
        return cls(
            configuration_set=settings.configuration_set,
            store=ReputationStore(settings.table_name),
            broadcasts=BroadcastStore(settings.table_name),
        )

    @property
    def client(self) -> SESV2Client:
        return self.ses or aws_client("sesv2")


def guard(notice: AlarmNotice, ctx: GuardContext) -> GuardResult:
    """An alarm that entered ALARM for the marketing set pauses it (see module doc)."""
    log: dict[str, Any] = {"alarm": notice.alarm, "state": notice.state, "metric": notice.metric}
    if notice.state != ALARM or notice.configuration_set != ctx.configuration_set:
        logger.info(
            "reputation alarm ignored", **log, for_set=notice.configuration_set == ctx.configuration_set
        )
        return GuardResult(status="ignored")
    # SES first: a crash after it leaves the record to the redelivery, never a record of a
    # pause that did not happen.
    ctx.client.put_configuration_set_sending_options(
        ConfigurationSetName=ctx.configuration_set, SendingEnabled=False
    )
    newly = ctx.store.mark_paused(
        PAUSABLE_CONFIGURATION_SET.id,
        ctx.configuration_set,
        alarm=notice.alarm,
        metric=notice.metric,
        threshold=notice.threshold,
        reason=notice.reason,
        at=notice.at or None,
    )
    moved = []
    for record in ctx.broadcasts.list():
        if record.status in (RESOLVING, SENDING) and ctx.broadcasts.pause_for_reputation(record) is not None:
            moved.append(record.id)
    logger.warning("marketing sending paused", **log, newly_paused=newly, broadcasts=len(moved))
    return GuardResult(status="paused", newly_paused=newly, broadcasts=moved)
