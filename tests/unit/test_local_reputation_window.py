"""The local runtime's reputation rates (``local_aws.reputation.ReputationMonitor.rates``): a
running sum over the last 24 hours, equal to summing the window each time.

Given sends, permanent bounces and complaints observed at random times over three days, when the
rates are read after each event, then the sends counted and both rates equal a plain sum of the
events in the window (since the later of 24 hours ago and the last fresh start).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from local_aws import reputation
from local_aws.reputation import WINDOW_S, ReputationMonitor

SET = "marketing"


def _record(kind: str, n: int) -> dict[str, Any]:
    mail = {"tags": {"ses:configuration-set": [SET]}, "destination": ["a@example.com"] * n}
    if kind == "Bounce":
        return {
            "eventType": kind,
            "mail": mail,
            "bounce": {"bounceType": "Permanent", "bouncedRecipients": [{}] * n},
        }
    if kind == "Complaint":
        return {"eventType": kind, "mail": mail, "complaint": {"complainedRecipients": [{}] * n}}
    return {"eventType": kind, "mail": mail}


def test_the_rates_are_the_window_s_sums_as_events_come_and_age(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1_000_000.0]
    monkeypatch.setattr(reputation.time, "time", lambda: now[0])
    monitor = ReputationMonitor(lambda *_: None, account="123456789012", region="us-east-1", min_sends=1)
    seen: list[tuple[float, str, int]] = []
    fresh = 0.0
    chance = random.Random(7)
    for step in range(3_000):
        now[0] += chance.uniform(0, 150)  # about 5 days in all, 1.3 after the fresh start
        if step == 1_500:
            monitor.fresh_start(SET)
            fresh = now[0]
            seen.clear()
        kind = chance.choice(["Send", "Send", "Send", "Bounce", "Complaint"])
        n = chance.randint(1, 3)
        monitor.observe(_record(kind, n))
        seen.append((now[0], kind, n))
        start = max(now[0] - WINDOW_S, fresh)
        expected = {
            k: sum(c for at, kind_, c in seen if kind_ == k and at >= start)
            for k in ("Send", "Bounce", "Complaint")
        }
        sends, bounce, complaint = monitor.rates(SET)
        assert sends == expected["Send"]
        if sends:
            assert bounce == expected["Bounce"] / sends and complaint == expected["Complaint"] / sends
    assert 0 < sends < sum(c for _, k, c in seen if k == "Send")  # the window dropped the oldest
