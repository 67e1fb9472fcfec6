"""Counts per (sequence, step): a generated state machine on moto's interpreter sends through the
real send pipeline, and the mails' SES events go through the real engagement consumer.

Two steps of one sequence send the same template, so counting by template could not tell them
apart: the step's own counts (``shared.store.stats.step_attribute``) can, events delivered twice
count once, and the console's step graph (``ops.sequence_view.graph``) shows them.
"""

from __future__ import annotations

import json
from typing import Any

from ops.sequence_view import graph
from shared.engagement.consumer import process_body
from shared.sending.jobs import SendJob
from shared.store import keys
from shared.store.stats import StatsStore
from tests.integration import test_claim_recovery, test_sequence_execution
from tests.integration.conftest import fold_stream, scan_all
from tests.integration.test_claim_recovery import ses_event
from tests.integration.test_sequence_execution import Harness, send_wait_send, start

harness = test_sequence_execution.harness
engagement = test_claim_recovery.engagement


def mails(harness: Harness, email: str) -> dict[str, dict[str, Any]]:
    """The subscriber's logged mails by step code."""
    found = [
        i
        for i in scan_all(harness.store.table)
        if i["PK"] == keys.sub_pk(email) and i["SK"].startswith(keys.SENT_PREFIX)
    ]
    return {i["step"].split(":")[0]: i for i in found}


def event_of(kind: str, mail: dict[str, Any], at: str | None = None) -> str:
    job = SendJob(email=mail["email"], template=mail["template"], source=mail["source"], step=mail["step"])
    body = ses_event(kind, job, mail["ses_message_id"])
    if at is None:
        return body
    envelope = json.loads(body)
    record = json.loads(envelope["Message"])
    record[kind]["timestamp"] = at
    envelope["Message"] = json.dumps(record)
    return json.dumps(envelope)


def test_two_steps_sending_one_template_are_counted_apart_and_a_redelivery_counts_once(
    harness: Harness, engagement: Any, resources: Any
) -> None:
    # Given a sequence whose first and third steps send the same template, run for two readers
    sequence = send_wait_send("twice", "trigger: go", "onboarding/welcome", "onboarding/welcome")
    harness.deploy(sequence)
    for email in ("a@example.com", "b@example.com"):
        assert start(harness, sequence, email)["status"] == "SUCCEEDED"
    assert fold_stream(resources).sends == 4  # the stats fold, from the SENT# entries
    stats = StatsStore(resources.tables["table_name"], resources.tables["events_table_name"])
    assert stats.steps("twice") == {"S1": {"sent": 2}, "S3": {"sent": 2}}
    assert stats.template("onboarding/welcome").total("send") == 4  # the template cannot tell

    # When a@ opens the first mail (the event delivered twice) and again later, and clicks the
    # third; b@ opens the third
    a, b = mails(harness, "a@example.com"), mails(harness, "b@example.com")
    first_open = event_of("open", a["S1"])
    for body in (first_open, first_open, event_of("open", a["S1"], at="2017-08-09T23:00:00.000Z")):
        process_body(body, engagement)
    process_body(event_of("click", a["S3"]), engagement)
    process_body(event_of("open", b["S3"]), engagement)

    # Then each step counts its own mails and the readers who opened and clicked them
    assert stats.steps("twice") == {
        "S1": {"sent": 2, "opened": 1},
        "S3": {"sent": 2, "opened": 1, "clicked": 1},
    }
    source = stats.source("twice")
    assert (source.total("open"), source.uniques["open"]) == (3, 2)  # the sequence's own, as before
    # and the console's step graph shows them
    counts = {node.code: node.counts for node in graph(sequence, stats)}
    assert counts["S1"] == {"waiting": 0, "sent": 2, "opened": 1, "clicked": 0}
    assert counts["S3"] == {"waiting": 0, "sent": 2, "opened": 1, "clicked": 1}
    assert counts["S2"] == {"waiting": 0}  # the wait sends nothing
