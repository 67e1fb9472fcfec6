"""A broadcast survives workers that die mid-send, with no human action.

The local runtime runs from a copy of the template whose broadcast worker has a short claim
lease (``SEND_CLAIM_LEASE_SECONDS``) and function timeout, and whose batch queue gets a
short visibility timeout, so that a killed worker's batch comes back within a minute. Two
worker execution environments are killed (SIGKILL, ``POST /_local/environments/kill``) a
few seconds apart while a broadcast is sending at a low rate: to 400 subscribers in ``make test``
(both kills land while batches are still being sent), to 1,000 in ``make bench``.

Then: the broadcast ends ``done``; every recipient has a mail; a recipient has two only if
the mail was sent again after a takeover (``after_takeover`` on its ``SENT#``), i.e. no SES
event for the first mail had been recorded when the claim's lease ended. Mails whose worker
died between SES and the send log are found by their SES event (``recovered`` on their
``SENT#``) and not sent again. The counts of a run are printed (``-s`` shows them).
"""

from __future__ import annotations

import copy
import json
import os
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from shared.core import specs
from shared.store.dynamo import serialize
from shared.store.subscribers import Profile, profile_items
from tests.e2e.conftest import Local, mailstep, start_dev, stop_dev, subprocess_env, wait_for_state
from tests.e2e.helpers import MAIN, broadcast_record, eventually, queue_url, sent_by

TAG = "fault"
LEASE_S = 30  # the claim lease (the setting's minimum)
WORKER_TIMEOUT_S = 35  # the worker stops starting sends 15 s before its deadline
VISIBILITY_S = 40  # a killed worker's batch comes back after this, when its claims' lease ended
RATE = 25  # mails per second for the broadcast workers together (half the default 50)
KILLS = 2
KILL_GAP_S = 4


def fault_template(template: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``template`` whose broadcast worker has a short lease and timeout."""
    changed = copy.deepcopy(template)
    worker = next(
        r
        for r in changed["Resources"].values()
        if r["Type"] == "AWS::Lambda::Function"
        and r["Properties"]["Handler"] == specs.BROADCAST_WORKER_FUNCTION.handler
    )
    worker["Properties"]["Timeout"] = WORKER_TIMEOUT_S
    variables = worker["Properties"]["Environment"]["Variables"]
    assert specs.ENV["send_claim_lease_seconds"] not in variables  # the default (300 s) otherwise
    variables[specs.ENV["send_claim_lease_seconds"]] = str(LEASE_S)
    return changed


def seed(local: Local, emails: list[str]) -> None:
    """Subscribers written as the store writes them (profile + TAG# partner), in batches."""
    now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    ddb = local.client("dynamodb", retries=8)
    items: list[dict[str, Any]] = []
    for email in emails:
        profile = Profile(email=email, tags=frozenset({TAG}), created_at=now, updated_at=now, version=1)
        items += profile_items(profile, now)
    for start in range(0, len(items), 25):
        request = {MAIN: [{"PutRequest": {"Item": serialize(i)}} for i in items[start : start + 25]]}
        while request:
            request = ddb.batch_write_item(RequestItems=request).get("UnprocessedItems") or {}


def send_log(local: Local, source: str) -> list[dict[str, Any]]:
    """The ``SENT#`` items of one source (a filtered scan)."""
    pages = (
        local.client("dynamodb")
        .get_paginator("scan")
        .paginate(
            TableName=MAIN,
            ConsistentRead=True,
            FilterExpression="begins_with(SK, :sent) AND #source = :source",
            ExpressionAttributeNames={"#source": "source"},
            ExpressionAttributeValues={":sent": {"S": "SENT#"}, ":source": {"S": source}},
        )
    )
    return [item for page in pages for item in page["Items"]]


def kill_worker(local: Local) -> int:
    """SIGKILL one broadcast worker environment that is in an invocation (retried until one is)."""

    def kill() -> int | None:
        code, answer = local.http(
            "POST", "/_local/environments/kill", {"function": specs.BROADCAST_WORKER_FUNCTION.name}
        )
        return int(answer["killed_pid"]) if code == 200 else None

    pid = eventually(kill, 30, "a running broadcast worker to kill", interval_s=0.05)
    assert pid is not None
    return pid


@pytest.mark.timeout(900)  # the killed workers' batches come back after VISIBILITY_S
@pytest.mark.parametrize(
    "count", [pytest.param(400, id="400"), pytest.param(1000, id="1000", marks=pytest.mark.bench)]
)
def test_a_broadcast_survives_two_killed_workers_without_losing_or_repeating_mail(
    tmp_path: Path, artifact: Any, count: int
) -> None:
    template = tmp_path / "template.json"
    template.write_text(json.dumps(fault_template(artifact.template)))
    state_dir = tmp_path / "dev"
    process = start_dev(state_dir, "--template", str(template), "--max-send-rate", "1000")
    try:
        local = Local(state=wait_for_state(state_dir, process, 60), state_dir=state_dir)
        sqs = local.client("sqs")
        sqs.set_queue_attributes(
            QueueUrl=queue_url(local, specs.BROADCAST_QUEUE.local_name),
            Attributes={"VisibilityTimeout": str(VISIBILITY_S)},
        )
        people = [f"fault{i:04d}@example.com" for i in range(count)]
        seed(local, people)
        broadcast_id = "e2e-faults"

        # Given a broadcast to the subscribers at a low rate
        started = mailstep(
            *("broadcast", "send", "--template", "newsletter/monthly", "--tag", TAG, "--id", broadcast_id),
            *("--yes", "--no-wait", "--state-dir", str(state_dir)),
            env={**subprocess_env(), specs.ENV["broadcast_max_send_rate"]: str(RATE)},
            timeout=120,
        )
        assert started.returncode == 0, started.stdout + started.stderr
        first_kill_at = count * 3 // 20  # 15% sent: every worker is busy with a batch
        eventually(
            lambda: len(sent_by(local, broadcast_id)) >= first_kill_at,
            120,
            f"{first_kill_at} mails sent",
            interval_s=0.2,
        )

        # When two worker environments are killed a few seconds apart
        killed = [kill_worker(local)]
        for _ in range(KILLS - 1):
            time.sleep(KILL_GAP_S)
            killed.append(kill_worker(local))
        assert len(set(killed)) == KILLS

        # Then the broadcast ends done with no human action
        finished = eventually(
            lambda: (r := broadcast_record(local, broadcast_id))["status"] == "done" and r,
            600,
            f"{broadcast_id} to be done",
            interval_s=2,
        )
        got = Counter(d for m in sent_by(local, broadcast_id) for d in m["destination"])
        log = send_log(local, broadcast_id)
        recovered = {i["email"]["S"] for i in log if i.get("recovered", {}).get("S") == "ses_event"}
        resent = {i["email"]["S"] for i in log if i.get("after_takeover", {}).get("BOOL")}
        duplicates = {e for e, n in got.items() if n > 1}
        counts = {
            "recipients": count,
            "mails": sum(got.values()),
            "duplicates": len(duplicates),
            "recovered_by_evidence": len(recovered),
            "re_sent": len(resent),
            "killed": len(killed),
            "run": os.environ.get("FAULT_RUN", "-"),
        }
        print(f"\nbroadcast fault run: {json.dumps(counts)}")

        assert (finished["audience"], finished["processed"], finished["sent"]) == (count, count, count)
        assert set(got) == set(people)  # every recipient has a mail
        assert len(log) == count  # one send-log entry each
        # a second mail only after a takeover that found no SES event for the first
        assert duplicates <= resent - recovered, (duplicates, resent, recovered)
        assert all(n <= 2 for n in got.values())
        assert finished["dead_lettered_batches"] == 0
    finally:
        stop_dev(process)
