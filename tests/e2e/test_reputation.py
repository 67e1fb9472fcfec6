"""The reputation guardrail on the local runtime, end to end (docs/reputation.md).

Given readers and SES mailbox simulator complaint addresses in one audience, when a broadcast
goes to them, then the complaints (published by the local SES as SES would) raise the marketing
set's complaint rate above its threshold, the stack's alarm fires, the reputation-guard function
pauses the marketing configuration set and the broadcast stops as ``paused_reputation`` with
nothing counted failed; a transactional mail still goes out; ``mailstep reputation status``
shows the pause and the rate; ``resume`` refuses without ``--force``; ``resume --force``
finishes the broadcast and every reader has exactly one mail of it.

The runtime is this file's own (``--reputation-min-sends 10``: the local rates count from ten
sends); the broadcast goes at 2 mails/s so it is still sending when the pause lands.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from shared.core.specs import CONFIGURATION_SET, ENV, TRANSACTIONAL_CONFIGURATION_SET
from tests.e2e.conftest import (
    ROOT,
    Local,
    dev_runtime,
    subprocess_env,
)
from tests.e2e.helpers import add_contact, broadcast_record, eventually, ok_json, ops, outbox
from tests.e2e.test_engagement import queue_send

READERS = 30
COMPLAINERS = 10  # = --reputation-min-sends: the alarm fires at the last complaint, all of them sent


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory, artifact: Any) -> Iterator[Local]:
    # the guard function runs only here (the session runtime has no reputation alarms): its IAM report
    with dev_runtime(
        tmp_path_factory.mktemp("mailstep-reputation"),
        *("--max-send-rate", "10", "--reputation-min-sends", "10"),
        report=(tmp_path_factory, "reputation"),
    ) as local:
        yield local


def test_complaints_pause_marketing_transactional_goes_on_and_a_forced_resume_finishes_once(
    guarded: Local,
) -> None:
    local = guarded
    run = uuid.uuid4().hex[:6]
    tag = f"guard-{run}"
    complainers = [f"complaint+{run}-{i:02d}@simulator.amazonses.com" for i in range(COMPLAINERS)]
    readers = [f"reader-{run}-{i:02d}@example.com" for i in range(READERS)]
    for email in (*complainers, *readers):  # the audience resolves in key order: complainers first
        add_contact(local, email, tags=[tag])
    broadcast_id = f"guard-{run}"

    # 2 mails/s for the broadcast (its own cap) on an SES that allows 10: no SES throttling, so
    # the mails leave in the audience's order and every complainer is mailed before the pause
    env = {**subprocess_env(), ENV["broadcast_max_send_rate"]: "2"}
    command = ["broadcast", "send", "--template", "newsletter/monthly", "--tag", tag, "--id", broadcast_id]
    sent = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli.main",
            *command,
            "--yes",
            "--no-wait",
            "--state-dir",
            str(local.state_dir),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert sent.returncode == 0, sent.stdout + sent.stderr

    paused = eventually(
        lambda: (b := broadcast_record(local, broadcast_id))["status"] == "paused_reputation" and b,
        90,
        "the broadcast paused by the guardrail",
    )
    assert paused["failed"] == 0

    def of_broadcast() -> list[dict[str, Any]]:
        return [m for m in outbox(local) if m["source"] == broadcast_id]

    before = {d for m in of_broadcast() for d in m["destination"]}
    assert set(complainers) <= before or len(before) >= 10  # the complaints that tripped it went out
    assert not set(readers) <= before, "the pause landed after the whole broadcast: nothing was held back"

    # transactional mail goes on, through its own configuration set
    receipt_to = readers[0]
    queue_send(local, receipt_to, f"receipts-{run}", "r1")
    receipt = eventually(
        lambda: [m for m in outbox(local) if m["source"] == f"receipts-{run}"], 60, "the transactional mail"
    )
    assert receipt[0]["configuration_set"] == TRANSACTIONAL_CONFIGURATION_SET.local_name

    status = ok_json(ops(local, "reputation", "status", "--json"))
    marketing = next(s for s in status if s["kind"] == "marketing")
    assert marketing["configuration_set"] == CONFIGURATION_SET.local_name
    assert marketing["paused"] is True and marketing["paused_at"]
    assert marketing["complaint_rate"] > marketing["complaint_threshold"] == pytest.approx(0.0008)
    assert next(s for s in status if s["kind"] == "transactional")["paused"] is False

    refused = ops(local, "reputation", "resume")
    assert refused.returncode == 1 and "--force" in refused.stdout, refused.stdout + refused.stderr
    assert broadcast_record(local, broadcast_id)["status"] == "paused_reputation"

    forced = ops(local, "reputation", "resume", "--force")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert broadcast_id in forced.stdout

    done = eventually(
        lambda: (b := broadcast_record(local, broadcast_id))["status"] == "done" and b,
        120,
        "the resumed broadcast done",
    )
    assert done["failed"] == 0
    delivered = [d for m in of_broadcast() for d in m["destination"]]
    for reader in readers:
        assert delivered.count(reader) == 1, (reader, delivered.count(reader))  # exactly one, no duplicate
    assert all(delivered.count(c) <= 1 for c in complainers)
    assert ok_json(ops(local, "reputation", "status", "--json"))[0]["paused"] is False
