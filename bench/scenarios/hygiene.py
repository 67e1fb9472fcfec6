"""List hygiene (docs/hygiene.md): what the sunset adds, measured on the local runtime's calendar.

100 subscribers (``contact.created``, no sequence), then, each step metered like the others:

- ``daily run, nothing due``: one day of the calendar, one invocation of the hygiene function
  from the EventBridge schedule: its Queries of the due day buckets (a fixed cost per day, not per
  subscriber) and the checkpoint;
- ``first human open of the day``: one SES Open per subscriber through SNS, SQS and the
  engagement function: the ENGAGEMENT item read, and written (moved to today's bucket);
- ``another open that day``: the same again: read, not written (at most one write a day);
- ``marked cold``: the calendar 30 days on: the 30 daily runs, and each subscriber marked cold
  (the claim, ``subscriber.cold`` through the events API's code, the re-engagement mail the
  example sequence sends);
- ``unsubscribed by the sunset``: 30 more days: the runs and each unsubscribe.

The last line, ``hygiene per subscriber per month``, composes what hygiene adds for one subscriber
on a list of ``LIST_SIZE`` who opens or clicks on ``ENGAGED_DAYS`` days a month: the month's 30
runs shared by the list and the marker's write on each of those days. Marking cold and the sunset
come once per subscriber who stops reading; their rows say what each costs (with the
re-engagement mail of the example sequence).
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from dataclasses import replace
from typing import Any

from bench.harness import Bench
from bench.meter import Measurement

NAME = "hygiene"
DESCRIPTION = (
    "list hygiene: the daily run, the last-engagement marker, cold and sunset, per subscriber per month"
)
SUBSCRIBERS = 100
LIST_SIZE = 100_000  # the list the daily run's fixed cost is shared by, in the composed line
ENGAGED_DAYS = 4  # days a month the composed subscriber opens or clicks (first open of the day)


def _expect_ok(status: int, answer: Any) -> None:
    if status != 200:
        raise RuntimeError(f"POST /v1/events answered {status}: {answer}")


def _advance(bench: Bench, days: float) -> None:
    status, answer = bench.runtime._control(
        "POST", "/_local/calendar", json.dumps({"advance_days": days}).encode()
    )
    if status != 200 or any(r["errored"] for r in answer["runs"]):
        raise RuntimeError(f"calendar advance failed: {answer}")


def _drained(bench: Bench, timeout_s: float = 120) -> None:
    sqs = bench.aws.client("sqs")
    url = sqs.get_queue_url(QueueName="mailstep-engagement")["QueueUrl"]
    deadline = time.monotonic() + timeout_s
    quiet = 0
    while time.monotonic() < deadline:
        attributes = sqs.get_queue_attributes(
            QueueUrl=url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        quiet = quiet + 1 if not any(int(v) for v in attributes.values()) else 0
        if quiet >= 10:
            return
        time.sleep(0.1)
    raise RuntimeError("the engagement queue did not drain")


def _mailed(bench: Bench, sends: int, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while bench.runtime.ses.sends < sends:
        if time.monotonic() > deadline:
            raise RuntimeError("the re-engagement mails did not go out")
        time.sleep(0.1)


def _opens(bench: Bench, emails: list[str]) -> None:
    """One SES Open per address (a person's user agent), published as SES publishes it."""
    from local_aws import ses_events as ev
    from shared.sending.sender import encode_tag_value

    for email in emails:
        mail = {
            "timestamp": ev.iso(),
            "messageId": f"bench-{uuid.uuid4().hex}",
            "source": "hello@example.com",
            "destination": [email],
            "tags": {
                "ses:configuration-set": ["mailstep"],
                "template": [encode_tag_value("hygiene/re-engagement")],
                "source": [encode_tag_value("bench-hygiene")],
            },
        }
        bench.runtime.ses.emit(ev.open_event(mail))
    _drained(bench)


def _scaled(measurement: Measurement, factor: float, label: str, units: int) -> Measurement:
    requests = Counter({k: round(v * factor) for k, v in measurement.requests.items()})
    return replace(
        measurement,
        label=label,
        units=units,
        requests=requests,
        wru=measurement.wru * factor,
        rru=measurement.rru * factor,
        lambda_invocations=round(measurement.lambda_invocations * factor),
        lambda_gb_s=measurement.lambda_gb_s * factor,
        lambda_gb_s_wall=measurement.lambda_gb_s_wall * factor,
        sfn_transitions=round(measurement.sfn_transitions * factor),
        ses_sends=round(measurement.ses_sends * factor),
        http_requests=round(measurement.http_requests * factor),
        sqs_platform_requests=round(measurement.sqs_platform_requests * factor),
    )


def _sum(parts: list[Measurement], label: str) -> Measurement:
    requests: Counter[tuple[str, str]] = Counter()
    for part in parts:
        requests.update(part.requests)
    first = parts[0]
    return replace(
        first,
        label=label,
        units=1,
        unit_name="subscriber-month",
        requests=requests,
        wru=sum(p.wru for p in parts),
        rru=sum(p.rru for p in parts),
        lambda_invocations=sum(p.lambda_invocations for p in parts),
        lambda_gb_s=sum(p.lambda_gb_s for p in parts),
        lambda_gb_s_wall=sum(p.lambda_gb_s_wall for p in parts),
        sfn_transitions=sum(p.sfn_transitions for p in parts),
        ses_sends=sum(p.ses_sends for p in parts),
        http_requests=sum(p.http_requests for p in parts),
        sqs_platform_requests=sum(p.sqs_platform_requests for p in parts),
    )


def run(bench: Bench) -> list[Measurement]:
    emails = [f"hygiene{i}@example.com" for i in range(SUBSCRIBERS)]
    _expect_ok(
        *bench.post("/v1/events", {"events": [{"type": "contact.created", "email": e} for e in emails]})
    )
    _advance(bench, 1)  # warm-up: the hygiene function's cold start
    _opens(bench, emails)  # warm-up: the engagement function's, and each reader's unique open

    daily = bench.measure("daily run, nothing due", 1, "run", lambda: _advance(bench, 1))
    first = bench.measure("first human open of the day", SUBSCRIBERS, "open", lambda: _opens(bench, emails))
    other = bench.measure("another open that day", SUBSCRIBERS, "open", lambda: _opens(bench, emails))

    def turn_cold() -> None:  # 31 days: day 32's run (30 days after the opens) whatever the hour
        sent = bench.runtime.ses.sends
        _advance(bench, 31)
        _mailed(bench, sent + SUBSCRIBERS)  # the re-engagement mails the sequence sends
        _drained(bench)

    cold = bench.measure("marked cold (31 days on)", SUBSCRIBERS, "subscriber", turn_cold)
    sunset = bench.measure(
        "unsubscribed by the sunset (30 days on)", SUBSCRIBERS, "subscriber", lambda: _advance(bench, 30)
    )

    # What hygiene adds per subscriber per month: the month's 30 runs shared by LIST_SIZE
    # subscribers, and the marker's write on ENGAGED_DAYS days (first minus another open). Not
    # separable here, so left out: the read of the item with each human open or click (one item
    # of a BatchGetItem, 0.5 RRU) and the index entry's move with each write (2 WRU: the meter
    # counts an UpdateItem's base-table write only); docs/hygiene.md adds them.
    marker = first.minus(other, "the marker's write (first minus another open)")
    month = _sum(
        [_scaled(daily, 30 / LIST_SIZE, "runs", 1), _scaled(marker, ENGAGED_DAYS / SUBSCRIBERS, "marker", 1)],
        f"hygiene per subscriber per month ({ENGAGED_DAYS} engaged days, list of {LIST_SIZE:,})",
    )
    return [daily, first, other, marker, cold, sunset, month]
