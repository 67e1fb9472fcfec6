"""An A/B test end to end on the local runtime (docs/broadcasts.md, "A/B tests").

Given 200 readers, when an A/B test of two subjects goes to a 20% test share with clicks as
its metric and, while the virtual clock stands still, variant B's readers click as people
while variant A's mails are clicked by a link scanner (a machine: never counted) and by three
people, then at the decision time B wins, B goes to the other 160, every reader has exactly one
mail in the outbox, and the decision with its numbers is on `broadcast get`, in `mailstep
stats` and in the webhook stream (``broadcast.ab_decided``).

The size is the smallest that keeps every rule in play: the test share's draw is exactly 40 of
the 200 and each variant is delivered to 20, the ``--min-sample`` (so the decision is made on the
rates, ``higher_rate``, not by the min-sample rule); B has the 12 readers who click.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from typing import Any

import pytest

from local_aws.simulate import publish_event
from shared.broadcasts.abtest import in_test, variant_of
from shared.broadcasts.records import BroadcastStore
from shared.store.stats import StatsStore
from tests.e2e.conftest import Local
from tests.e2e.helpers import (
    EVENTS,
    MAIN,
    broadcast_record,
    eml,
    eventually,
    new_audience,
    ops,
    paused_clock,
    run_session,
    sent_by,
)
from tests.e2e.test_webhooks import add, endpoints, verified
from tests.webhook_receiver import Receiver

TEMPLATE = "newsletter/monthly"
__all__ = ["endpoints"]  # the fixture, from test_webhooks
SUBJECTS = ("Spring is here", "Our spring sale")
READERS = 200
TESTED = READERS // 5  # the 20% test share, drawn exactly
MIN_SAMPLE = TESTED // 2  # each variant exactly at the min-sample: the rates decide


def drawn(test_id: str, readers: list[str]) -> Counter[int]:
    """How many of ``readers`` each variant of ``test_id`` draws into the test share."""
    return Counter(variant_of(test_id, e, 2) for e in readers if in_test(test_id, e, 20))


def flat(answer: Any) -> str:
    return " ".join(answer.stdout.split())  # rich wraps at the terminal width


def test_the_winner_on_human_clicks_goes_to_the_rest_and_every_reader_gets_one_mail(
    local: Local, receiver: Receiver, request: pytest.FixtureRequest
) -> None:
    tag, readers = new_audience(local, "ab", READERS)
    # The share is drawn per reader (a hash of test id and address: about 20%, then about half
    # each); the numbers asserted are exact, so the test takes an id whose draw is exactly 40 of
    # these 200, 20 a variant.
    test_id = next(
        i
        for i in (f"e2e-ab-{uuid.uuid4().hex[:6]}" for _ in range(100_000))
        if drawn(i, readers) == {0: MIN_SAMPLE, 1: MIN_SAMPLE}
    )
    rest_id = f"{test_id}-rest"
    endpoint = request.getfixturevalue("endpoints")  # removed after the test (test_webhooks)
    _, secret = add(local, endpoint, receiver.url, "broadcast.ab_decided")
    options = ["--template", TEMPLATE, "--tag", tag, "--variant", f"subject={SUBJECTS[0]}",
               "--variant", f"subject={SUBJECTS[1]}", "--test-share", "20", "--metric", "clicks",
               "--decide-after", "4h", "--min-sample", str(MIN_SAMPLE)]  # fmt: skip
    tested = {e for e in readers if in_test(test_id, e, 20)}
    group = {e: variant_of(test_id, e, 2) for e in tested}

    bad_options = [["--metric", "sends"], ["--test-share", "95"], ["--decide-after", "soon"],
                   ["--min-sample", "0"], ["--variant", "colour=red"]]  # fmt: skip
    for bad in bad_options:
        named = bad[0]
        refused = ops(local, "broadcast", "send", *options, *bad, "--id", test_id, "--yes")
        assert refused.returncode == 2 and named in flat(refused), refused.stdout + refused.stderr
    dry = ops(local, "broadcast", "send", *options, "--id", test_id, "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    counts = Counter(group.values())
    for letter, count in (("A", counts[0]), ("B", counts[1]), ("rest", READERS - TESTED)):
        assert f"{letter}: {count} subscriber(s)" in flat(dry), dry.stdout
    store = BroadcastStore(MAIN, client=local.client("dynamodb"))
    assert store.get(test_id) is None and store.get(rest_id) is None  # a dry run writes nothing

    with paused_clock(local):  # the decision waits until the clicks are in
        sent = ops(local, "broadcast", "send", *options, "--id", test_id, "--yes", timeout=240)
        assert sent.returncode == 0 and f"{test_id}: done" in flat(sent), sent.stdout + sent.stderr
        mails = sent_by(local, test_id)
        assert Counter(d for m in mails for d in m["destination"]) == dict.fromkeys(tested, 1)
        for meta in mails:
            assert str(eml(local, meta)["Subject"]) == SUBJECTS[group[meta["destination"][0]]]
        message_of = {m["destination"][0]: m["message_id"] for m in mails}
        a_readers = sorted(e for e in tested if group[e] == 0)
        b_readers = sorted(e for e in tested if group[e] == 1)
        for email in a_readers:  # a link scanner clicks every link of A's mails: a machine
            publish_event(local.state_dir, message_of[email], "click", scanner=True)
        for email in a_readers[:3] + b_readers[:12]:
            publish_event(local.state_dir, message_of[email], "click")
        stats = StatsStore(MAIN, EVENTS, client=local.client("dynamodb"))
        eventually(lambda: stats.source(test_id).unique("click") == 15, 120, "the human clicks counted")
        assert broadcast_record(local, rest_id)["status"] == "scheduled"

    eventually(lambda: broadcast_record(local, rest_id)["status"] == "done", 300, "the rest sent")
    everyone = Counter(
        d for source in (test_id, rest_id) for m in sent_by(local, source) for d in m["destination"]
    )
    assert everyone == dict.fromkeys(readers, 1)  # one mail each, across the test and the rest
    rest = sent_by(local, rest_id)
    assert len(tested) == TESTED and len(rest) == READERS - TESTED
    assert {str(eml(local, m)["Subject"]) for m in rest} == {SUBJECTS[1]}

    shown = ops(local, "broadcast", "get", test_id)
    decision = json.loads(shown.stdout)["ab_decision"]
    assert (decision["winner"], decision["reason"], decision["metric"]) == ("B", "higher_rate", "clicks")
    a, b = decision["variants"]
    assert (a["delivered"], a["engaged"], b["delivered"], b["engaged"]) == (counts[0], 3, counts[1], 12)
    assert json.loads(shown.stdout)["rest"]["id"] == rest_id

    async def through_mcp(tools: Any) -> None:
        got = await tools.call("broadcast_get", broadcast_id=test_id)
        assert got["ab_decision"] == decision and got["rest"]["sent"] == READERS - TESTED

    run_session(local, through_mcp)
    table = flat(ops(local, "stats", "--broadcast", test_id))
    assert f"A/B test {test_id}: B won (higher_rate)" in table, table

    def decided() -> list[dict[str, Any]]:
        return [p for p in verified(receiver, secret) if p["type"] == "broadcast.ab_decided"]

    eventually(lambda: len(decided()) >= 1, 120, "the broadcast.ab_decided delivery")
    (event,) = {json.dumps(p, sort_keys=True) for p in decided()}  # one event (retries: the same one)
    data = json.loads(event)["data"]
    assert (data["broadcast_id"], data["winner"], data["rest_id"]) == (test_id, "B", rest_id)
    assert data["variants"] == decision["variants"]
