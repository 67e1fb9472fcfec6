"""The warm-up on the local runtime (docs/sending.md, "Warm-up"): ``mailstep dev --warmup
30,60,120`` (the sending domain's first three days).

Given 150 readers (two batches of the broadcast), `mailstep broadcast send --dry-run` prints the
plan (today 30, then 60 and 60); the broadcast sent is spread exactly as printed, day by day as
the runtime's calendar moves on (`mailstep local advance --days 1`), each reader once; a welcome
(a sequence) goes out on a day whose allowance is used: it counts, it is never held.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from shared.store import keys
from tests.e2e.conftest import (
    START_TIMEOUT_S,
    Local,
    dev_runtime,
)
from tests.e2e.helpers import (
    broadcast_record,
    eventually,
    item,
    new_audience,
    ok_json,
    ops,
    outbox,
    sent_by,
    subscribe,
    unique_email,
)

SCHEDULE = "30,60,120"
AUDIENCE = 150
ONBOARDING_MAILS = 4  # sequences/onboarding.yaml for a reader without the `pro` tag


@pytest.fixture(scope="module")
def warming(tmp_path_factory: pytest.TempPathFactory, artifact: Any) -> Iterator[Local]:
    with dev_runtime(
        tmp_path_factory.mktemp("mailstep-warmup"),
        *("--warmup", SCHEDULE, "--max-send-rate", "200", "--no-reputation-alarms"),
        report=(tmp_path_factory, "warmup"),
        timeout_s=START_TIMEOUT_S * 3,  # a template of its own: synthesized first
    ) as local:
        yield local


@pytest.mark.timeout(900)  # three calendar days of a broadcast, a template of its own
def test_a_broadcast_is_spread_over_days_exactly_as_its_printed_plan(warming: Local) -> None:
    local = warming
    tag, readers = new_audience(local, "warm", AUDIENCE)
    command = ("broadcast", "send", "--template", "newsletter/monthly", "--tag", tag, "--id", tag)

    dry = ops(local, *command, "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    printed = " ".join(dry.stdout.split())
    found = re.search(r"warm-up: today (\d+) of 150; the rest from tomorrow 00:00 UTC \(([^)]*)\)", printed)
    assert found, printed
    later = [
        (day, int(count.replace(",", "")))
        for day, count in re.findall(r"(\d{4}-\d\d-\d\d): ([\d,]+)", found[2])
    ]
    plan = [int(found[1]), *(count for _, count in later)]
    assert plan == [30, 60, 60]

    sent = ops(local, *command, "--yes", "--no-wait")
    assert sent.returncode == 0, sent.stdout + sent.stderr
    assert "warm-up: today 30 of 30 left" in " ".join(sent.stdout.split())
    broadcast_id = tag

    for day, total in ((1, 30), (2, 90)):
        # the state asserted: the day's allowance sent, and the broadcast held for the next day
        # (while the calendar stands still, each look at the next day finds it used and holds again)
        eventually(lambda: len(sent_by(local, broadcast_id)) >= total, 240, f"day {day}: {total} sent")
        held = eventually(
            lambda: (b := broadcast_record(local, broadcast_id))["status"] == "held" and b,
            120,
            f"day {day}: the broadcast held for the warm-up",
        )
        assert len(sent_by(local, broadcast_id)) == total
        assert held["hold_reason"] == "warmup" and "T00:00:0" in held["resume_at"], held  # the next 00:00 UTC
        if day == 1:  # a sequence's mail on a used-up day: counted, never held
            ann = unique_email("warm-welcome")
            subscribe(local, ann, first_name="Ann")

            # her onboarding's waits are instant on the runtime's clock, so all four of its mails
            # go out today; the test waits for the whole of it (her pair gone: the execution
            # finished), so none of them counts on day 2, which stays the broadcast's alone
            def onboarded() -> list[dict[str, Any]]:
                mails = [m for m in outbox(local) if ann in m["destination"]]
                over = item(local, keys.sub_pk(ann), keys.exec_sk("onboarding")) is None
                return mails if len(mails) == ONBOARDING_MAILS and over else []

            eventually(onboarded, 120, "Ann's onboarding sent in full on the used-up day")
            status = ok_json(ops(local, "warmup", "status", "--json"))
            assert status["allowance"] == 30 and status["used"] > 30 and status["day"] == 1, status
        advanced = ops(local, "local", "advance", "--days", "1", timeout=600)
        assert advanced.returncode == 0, advanced.stderr

    done = eventually(
        lambda: (b := broadcast_record(local, broadcast_id))["status"] == "done" and b,
        240,
        "the broadcast done",
    )
    assert done["failed"] == 0 and done["sent"] == AUDIENCE
    mails = sent_by(local, broadcast_id)
    assert sorted(d for m in mails for d in m["destination"]) == sorted(readers)  # each reader once
    per_day = Counter(m["timestamp"][:10] for m in mails)  # the SES events' calendar days
    days = sorted(per_day)
    assert [per_day[d] for d in days] == plan  # spread exactly as printed
    assert days[1:] == [day for day, _ in later]
