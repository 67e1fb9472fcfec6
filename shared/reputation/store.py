"""The guardrail's record of each configuration set it watches (main table)::

    REPUTATION / <configuration set spec id>   paused (bool), configuration_set (name),
                                                paused_at, alarm, metric, threshold, reason,
                                                resumed_at, forced

Each change is one conditional UpdateItem that changes the item only when ``paused`` flips, so a
repeated alarm notification writes nothing (and the table's stream, hence the webhooks, sees one
``reputation.paused`` per pause).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from shared.core import clock
from shared.store import keys
from shared.store.dynamo import TableAdapter, deserialize, key, values


@dataclass(frozen=True)
class PauseRecord:
    set_id: str  # the configuration set spec's id (the item's SK), not the SES name
    configuration_set: str
    paused: bool
    paused_at: str = ""
    alarm: str = ""  # the CloudWatch alarm whose ALARM state paused it
    metric: str = ""
    threshold: float | None = None
    reason: str = ""
    resumed_at: str = ""
    forced: bool = False  # the last resume passed --force

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> PauseRecord:
        threshold = item.get("threshold")
        return cls(
            set_id=str(item["SK"]),
            configuration_set=str(item.get("configuration_set", "")),
            paused=bool(item.get("paused", False)),
            paused_at=str(item.get("paused_at", "")),
            alarm=str(item.get("alarm", "")),
            metric=str(item.get("metric", "")),
            threshold=float(threshold) if threshold is not None else None,
            reason=str(item.get("reason", "")),
            resumed_at=str(item.get("resumed_at", "")),
            forced=bool(item.get("forced", False)),
        )


class ReputationStore(TableAdapter):
    def get(self, set_id: str) -> PauseRecord | None:
        item = self.client.get_item(
            TableName=self.table, Key=key(keys.REPUTATION, set_id), ConsistentRead=True
        ).get("Item")
        return PauseRecord.from_item(deserialize(item)) if item else None

    def _flip(self, set_id: str, expression: str, condition: str, **vals: Any) -> bool:
        try:
            self.client.update_item(
                TableName=self.table,
                Key=key(keys.REPUTATION, set_id),
                UpdateExpression=expression,
                ConditionExpression=condition,
                ExpressionAttributeNames={"#paused": "paused"},
                ExpressionAttributeValues=values(**vals),
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def mark_paused(
        self,
        set_id: str,
        configuration_set: str,
        *,
        alarm: str,
        metric: str,
        threshold: float,
        reason: str,
        at: str | None = None,
    ) -> bool:
        """Record the pause; False when it was paused already (nothing written)."""
        return self._flip(
            set_id,
            "SET #paused = :true, configuration_set = :name, paused_at = :at, alarm = :alarm, "
            "metric = :metric, threshold = :threshold, reason = :reason REMOVE resumed_at, forced",
            "attribute_not_exists(#paused) OR #paused = :false",
            true=True,
            false=False,
            name=configuration_set,
            at=at or clock.iso(),
            alarm=alarm[:255],
            metric=metric[:100],
            threshold=threshold,
            reason=reason[:500],
        )

    def mark_resumed(self, set_id: str, *, forced: bool, at: str | None = None) -> bool:
        """Record the resume; False when it was not paused (nothing written)."""
        return self._flip(
            set_id,
            "SET #paused = :false, resumed_at = :at, forced = :forced",
            "#paused = :true",
            true=True,
            false=False,
            at=at or clock.iso(),
            forced=forced,
        )
