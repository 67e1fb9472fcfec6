"""The sunset on the local runtime, on its calendar (``mailstep local advance``): the daily
EventBridge schedule runs the hygiene function from the artifact, with the template's IAM.

Given two subscribers who never open or click, when the calendar passes 30 days then both turn
cold (tag ``cold``, a ``subscriber.cold`` event) and get the re-engagement mail (the sequence
``re-engagement`` triggered by that event); when one of them opens it as a person, they are warm
again, while Apple MPP's prefetch and a scanner's clicks (the hidden link, a click a second after
delivery) keep the other cold; 30 days after turning cold, the cold one is unsubscribed with
reason ``sunset`` (not suppressed) and the warm one stays subscribed.

Its own runtime: moving the calendar 60 days would turn every other e2e file's subscribers cold.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.e2e.conftest import Local, dev_runtime
from tests.e2e.helpers import (
    add_contact,
    events_of,
    eventually,
    item,
    ok_json,
    ops,
    outbox,
    partition,
    paused_clock,
    profile_status,
    subscribe,
    unique_email,
)

EVENTS = "mailstep-events"


@pytest.fixture(scope="module")
def calendar(tmp_path_factory: pytest.TempPathFactory, artifact: Any) -> Iterator[Local]:
    state_dir = tmp_path_factory.mktemp("mailstep-sunset")
    # the hygiene function runs only here: its IAM report
    with dev_runtime(state_dir, "--max-send-rate", "1000", report=(tmp_path_factory, "sunset")) as local:
        yield local


def advance_to(local: Local, moment: datetime) -> dict[str, Any]:
    """Move the runtime's calendar to ``moment`` (every daily run on the way fires)."""
    now = datetime.fromisoformat(local.status()["clock"]["calendar"])
    days = (moment - now).total_seconds() / 86400
    result = ops(local, "local", "advance", "--days", f"{days:.6f}", timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    return dict(local.status())


def tags(local: Local, email: str) -> set[str]:
    found = item(local, f"SUB#{email}", "PROFILE") or {}
    return set(found.get("tags", {}).get("SS", []))


def reengagement_mails(local: Local, email: str) -> list[dict[str, Any]]:
    return [
        m
        for m in outbox(local)
        if email in m["destination"] and m["subject"].startswith("Still want to hear")
    ]


def test_cold_after_30_days_a_person_s_open_warms_machines_do_not_and_the_sunset_unsubscribes(
    calendar: Local,
) -> None:
    local = calendar
    quiet, reader = unique_email("quiet"), unique_email("reader")
    with paused_clock(local):  # the quiet one's onboarding holds at its first Wait: the sunset stops it
        subscribe(local, quiet)
        add_contact(local, reader)
        start = datetime.now(UTC).date()  # their subscription day
        run_the_sunset(local, quiet, reader, start)


def run_the_sunset(local: Local, quiet: str, reader: str, start: Any) -> None:
    eventually(lambda: len(executions(local, quiet)) == 1, 60, "the quiet one's onboarding")

    # 30 days without engagement (they are new): cold on day 30; the calendar stops on day 35
    advance_to(local, datetime(start.year, start.month, start.day, 12, tzinfo=UTC) + timedelta(days=35))
    for email in (quiet, reader):
        assert "cold" in tags(local, email)
        assert [e["type"] for e in events_of(local, email)].count("subscriber.cold") == 1
        eventually(
            lambda email=email: len(reengagement_mails(local, email)) == 1, 60, "the re-engagement mail"
        )

    # machines: Apple MPP's prefetch, a scanner following the hidden link and a link at delivery
    for args in (("open", "--mpp"), ("click", "--hidden"), ("click", "--scanner")):
        result = ops(local, "local", *args, quiet)
        assert result.returncode == 0, result.stderr
    # a person opens the re-engagement mail
    assert ops(local, "local", "open", reader).returncode == 0
    eventually(lambda: "cold" not in tags(local, reader), 60, "the reader warm again")
    machine = eventually(
        lambda: (
            sorted(str(e.get("machine")) for e in events_of(local, quiet) if e["type"] in ("open", "click"))
            if len([e for e in events_of(local, quiet) if e["type"] in ("open", "click")]) == 3
            else None
        ),
        60,
        "the machine open and clicks recorded",
    )
    assert machine == ["at_delivery", "hidden_link", "mpp"]
    assert "cold" in tags(local, quiet)
    report = ok_json(ops(local, "hygiene", "report", "--json"))
    assert report["cold"] >= 1 and report["next_run"]["dry_run"] is True

    # day 60: the quiet one's grace is over, the reader engaged on day 35
    advance_to(local, datetime(start.year, start.month, start.day, 12, tzinfo=UTC) + timedelta(days=60))
    assert profile_status(local, quiet) == "unsubscribed"
    assert tags(local, quiet) == {"sunset"}
    assert item(local, f"SUB#{quiet}", "SUPPRESSION") is None  # not suppressed: they may come back
    (gone,) = [e for e in events_of(local, quiet) if e["type"] == "subscriber.unsubscribed"]
    assert gone["data"]["reason"] == "sunset"
    assert profile_status(local, reader) == "subscribed" and "cold" not in tags(local, reader)
    assert executions(local, quiet) == []  # the sunset stopped their marketing sequence
    again = ops(local, "hygiene", "run", "--json")  # the same day once more: nothing changes
    assert ok_json(again)["unsubscribed"] == 0 and ok_json(again)["marked_cold"] == 0


def executions(local: Local, email: str) -> list[str]:
    """The subscriber's active executions (their EXEC pairs)."""
    return [i["SK"]["S"] for i in partition(local, f"SUB#{email}") if i["SK"]["S"].startswith("EXEC#")]
