"""Warm-up: a new sending domain's daily volume ramps on a schedule (docs/sending.md, "Warm-up").

Mailbox providers judge a domain by its history; a new one that sends its whole list on day one
looks like a spammer. The schedule (``mailstep:warmup``, ``shared.core.specs.parse_warmup``: the
daily volumes of day 1, 2, ...; no limit after the last day) counts every mail sent from the
domain per UTC day:

- broadcasts *take* from the day's allowance before they send (one UpdateItem per batch) and
  hold (``warmup``) when it is used, until the next day 00:00 UTC: a broadcast larger than
  today's allowance spreads over days, as :func:`plan` says before it is sent;
- sequences, transactional mail and confirmations are *counted* (one UpdateItem per mail while
  the ramp lasts) but never held: they are what a reader asked for.

Day 1 is the first day the domain sent a counted mail (the ``STATE`` item, written once);
`mailstep warmup restart` moves it to today, `mailstep warmup finish` ends the ramp.

Items (main table): ``WARMUP#<domain>`` / ``STATE`` {start_day, finished}, and
``WARMUP#<domain>`` / ``DAY#<yyyy-mm-dd>`` {used} (expires after a week).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from shared.core import clock
from shared.core.aws import client as aws_client
from shared.core.specs import TTL_ATTRIBUTE, warmup_text
from shared.store import keys
from shared.store.dynamo import deserialize, key, serialize, values

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

DAY_TTL_DAYS = 7
STATE_CACHE_S = 60.0


@dataclass(frozen=True)
class WarmupState:
    domain: str
    start_day: date | None  # None: nothing counted yet (day 1 is the first day that sends)
    finished: bool = False


@dataclass(frozen=True)
class Day:
    day: date
    count: int
    allowance: int | None  # None: no limit that day


def allowance(schedule: tuple[int, ...], state: WarmupState, day: date) -> int | None:
    """The day's allowance: the schedule's volume for the ramp's day, None once it is over."""
    if not schedule or state.finished:
        return None
    index = 0 if state.start_day is None else (day - state.start_day).days
    return schedule[index] if 0 <= index < len(schedule) else None


def plan(size: int, used_today: int, schedule: tuple[int, ...], state: WarmupState, today: date) -> list[Day]:
    """How a broadcast of ``size`` recipients spreads over days from ``today`` when nothing else
    uses the allowance meanwhile (sequences and transactional mail of later days count too)."""
    if state.start_day is None:  # nothing sent yet: today would be day 1
        state = WarmupState(state.domain, today, state.finished)
    days: list[Day] = []
    left, day, used = size, today, used_today
    while left > 0:
        limit = allowance(schedule, state, day)
        count = left if limit is None else max(0, min(left, limit - used))
        if count or limit is None:
            days.append(Day(day, count, limit))
        left -= count
        day, used = day + timedelta(days=1), 0
    return days


def describe(days: list[Day], size: int, today: date) -> str:
    """``today 400 of 2,000; the rest from tomorrow 00:00 UTC (2026-11-29: 600, ...)``."""
    if not days:
        return "nothing to send"
    first = days[0].count if days[0].day == today else 0
    if first == size:
        return f"all {size:,} today"
    later = [d for d in days if d.day != today]
    rest = ", ".join(f"{d.day.isoformat()}: {d.count:,}" for d in later)
    return f"today {first:,} of {size:,}; the rest from tomorrow 00:00 UTC ({rest})"


def seconds_to_next_day(now: datetime) -> int:
    """Seconds from ``now`` until the next 00:00 UTC."""
    tomorrow = datetime.combine(now.date() + timedelta(days=1), datetime.min.time(), tzinfo=now.tzinfo)
    return max(1, int((tomorrow - now).total_seconds()) + 1)


class Warmup:
    """The adapter: the domain's state and its day counters on the main table."""

    def __init__(
        self, table: str, domain: str, schedule: tuple[int, ...], client: DynamoDBClient | None = None
    ) -> None:
        self.table = table
        self.domain = domain.lower()
        self.schedule = schedule
        self._client = client
        self._known: tuple[float, WarmupState] | None = None  # a started state, read lately

    @property
    def client(self) -> DynamoDBClient:
        return self._client or aws_client("dynamodb")

    @property
    def on(self) -> bool:
        return bool(self.schedule)

    def _state_item(self, **fields: Any) -> dict[str, Any]:
        return {
            **key(keys.warmup_pk(self.domain), keys.WARMUP_STATE),
            **serialize({"schedule": warmup_text(self.schedule), **fields}),
        }

    def state(self) -> WarmupState:
        item = self.client.get_item(
            TableName=self.table, Key=key(keys.warmup_pk(self.domain), keys.WARMUP_STATE), ConsistentRead=True
        ).get("Item")
        if not item:
            return WarmupState(self.domain, None)
        data = deserialize(item)
        start = data.get("start_day")
        return WarmupState(
            self.domain, date.fromisoformat(start) if start else None, bool(data.get("finished"))
        )

    def used(self, day: date) -> int:
        item = self.client.get_item(
            TableName=self.table,
            Key=key(keys.warmup_pk(self.domain), keys.warmup_day_sk(day)),
            ConsistentRead=True,
        ).get("Item")
        return int(deserialize(item).get("used", 0)) if item else 0

    def _start(self, day: date) -> WarmupState:
        """Day 1 is ``day`` unless the ramp started before (one conditional write, once)."""
        try:
            self.client.put_item(
                TableName=self.table,
                Item=self._state_item(start_day=day.isoformat()),
                ConditionExpression="attribute_not_exists(PK)",
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            return self.state()
        return WarmupState(self.domain, day)

    def _add(self, day: date, n: int) -> int:
        answer = self.client.update_item(
            TableName=self.table,
            Key=key(keys.warmup_pk(self.domain), keys.warmup_day_sk(day)),
            UpdateExpression="ADD #used :n SET #ttl = if_not_exists(#ttl, :ttl)",
            ExpressionAttributeNames={"#used": "used", "#ttl": TTL_ATTRIBUTE},
            ExpressionAttributeValues=values(n=n, ttl=clock.ttl_after(DAY_TTL_DAYS)),
            ReturnValues="UPDATED_NEW",
        )
        return int(deserialize(answer["Attributes"])["used"])

    def take(self, n: int, now: datetime | None = None) -> int:
        """Up to ``n`` mails of today's allowance for a broadcast: how many it may send now
        (``n`` when no ramp limits today). One UpdateItem; a second gives back what was over."""
        moment = now or clock.calendar_now()
        limit = allowance(self.schedule, self._ensure_started(moment.date()), moment.date())
        if limit is None or n <= 0:
            return n
        used = self._add(moment.date(), n)
        granted = max(0, min(n, limit - (used - n)))
        if granted < n:
            self._add(moment.date(), granted - n)
        return granted

    def give_back(self, n: int, now: datetime | None = None) -> None:
        """``n`` taken mails were not sent (skipped, already sent, refused)."""
        if n > 0:
            self._add((now or clock.calendar_now()).date(), -n)

    def count(self, n: int = 1, now: datetime | None = None) -> None:
        """Sequence, transactional and confirmation mail: counted, never held."""
        moment = now or clock.calendar_now()
        state = self._ensure_started(moment.date())
        if allowance(self.schedule, state, moment.date()) is not None:
            self._add(moment.date(), n)

    def _ensure_started(self, day: date) -> WarmupState:
        """The state, started on ``day`` if it was not; a started one is kept a minute (a
        restart or finish reaches the functions within it)."""
        now = clock.epoch_seconds()
        if self._known is not None and now - self._known[0] < STATE_CACHE_S:
            return self._known[1]
        state = self.state()
        if state.start_day is None and not state.finished:
            state = self._start(day)
        self._known = (now, state)
        return state

    def restart(self, day: date) -> WarmupState:
        """Day 1 is ``day`` (`mailstep warmup restart`)."""
        self.client.put_item(
            TableName=self.table,
            Item=self._state_item(start_day=day.isoformat()),
        )
        return WarmupState(self.domain, day)

    def finish(self) -> WarmupState:
        """No limit from now on (`mailstep warmup finish`)."""
        current = self.state()
        start = {"start_day": current.start_day.isoformat()} if current.start_day is not None else {}
        self.client.put_item(TableName=self.table, Item=self._state_item(finished=True, **start))
        return WarmupState(self.domain, current.start_day, True)
