"""Audiences on engagement and the resend to non-openers, end to end on the local runtime.

Given a broadcast to 100 readers of whom 30 open it as people (5 of them click too) and 10 only
by Apple's prefetch (a machine open), when a broadcast names an engagement condition, then its
dry run (CLI and MCP) counts exactly the readers it then sends to (through the CLI or MCP), and
those are the readers the test's own bookkeeping says. A resend to non-openers 48 hours later
(the virtual clock waits) reaches the other 70 minus the 5 who unsubscribed meanwhile, one mail
each; a second resend is refused, and the original's record names its resend.
"""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from local_aws.simulate import publish_event
from shared.store.dynamo import serialize
from shared.store.hygiene import engagement_item
from shared.store.stats import StatsStore
from shared.store.subscribers import Profile, profile_items
from tests.e2e.conftest import Local
from tests.e2e.helpers import (
    EVENTS,
    MAIN,
    broadcast_record,
    eml,
    eventually,
    ops,
    post,
    run_session,
    sent_by,
)

TEMPLATE = "newsletter/monthly"
RUN = uuid.uuid4().hex[:6]
TAG = f"ea{RUN}"
ORIGINAL = f"e2e-ea-{RUN}"
READERS = [f"ea{RUN}-{i:03d}@example.com" for i in range(100)]
OPENED = set(READERS[:30])  # open as people
CLICKED = set(READERS[:5])  # ... and click
MACHINE = set(READERS[30:40])  # only Apple's prefetch opens
NON_OPENERS = set(READERS) - OPENED
UNSUBSCRIBED = set(READERS[90:95])  # non-openers who unsubscribe before the resend


def iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def broadcast(local: Local, *args: str, timeout: float = 180) -> Any:
    answer = ops(local, "broadcast", *args, timeout=timeout)
    answer.stdout = " ".join(answer.stdout.split())  # rich wraps at the terminal width
    return answer


def recipients(local: Local, broadcast_id: str) -> Counter[str]:
    return Counter(d for m in sent_by(local, broadcast_id) for d in m["destination"])


@pytest.fixture(scope="module")
def engaged(local: Local) -> None:
    """The 100 readers (profiles and TAG# partners as the store writes them, and their
    engagement items, subscribed 90 days ago), the original sent to them, and their opens and
    clicks published as SES publishes them (``mailstep local open|click``)."""
    ddb = local.client("dynamodb", retries=8)
    now = datetime.now(UTC)
    since = iso(now - timedelta(days=90))
    profiles = [
        Profile(email=e, tags=frozenset({TAG}), created_at=since, updated_at=since, version=1)
        for e in READERS
    ]
    items = [(MAIN, i) for profile in profiles for i in profile_items(profile, since)]
    items += [(EVENTS, engagement_item(email, since)) for email in READERS]
    for start in range(0, len(items), 25):
        request: dict[str, Any] = {}
        for table, item in items[start : start + 25]:
            request.setdefault(table, []).append({"PutRequest": {"Item": serialize(item)}})
        while request:
            request = ddb.batch_write_item(RequestItems=request).get("UnprocessedItems") or {}

    answer = broadcast(local, "send", "--template", TEMPLATE, "--tag", TAG, "--id", ORIGINAL, "--yes")
    assert answer.returncode == 0 and f"{ORIGINAL}: done" in answer.stdout, answer.stdout + answer.stderr
    message_of = {m["destination"][0]: m["message_id"] for m in sent_by(local, ORIGINAL)}
    assert set(message_of) == set(READERS)
    for email in sorted(OPENED):
        publish_event(local.state_dir, message_of[email], "open")
    for email in sorted(CLICKED):
        publish_event(local.state_dir, message_of[email], "click")
    for email in sorted(MACHINE):
        publish_event(local.state_dir, message_of[email], "open", mpp=True)
    stats = StatsStore(MAIN, EVENTS, client=local.client("dynamodb"))

    def counted() -> tuple[int, int, int]:
        counters = stats.source(ORIGINAL)
        return counters.unique("open"), counters.total("open_machine"), counters.unique("click")

    eventually(lambda: counted() == (30, 10, 5), 120, "the opens and clicks counted")


# (CLI options, MCP arguments, who: by the test's own bookkeeping)
CASES = [
    (["--opened", ORIGINAL], {"opened": [ORIGINAL]}, OPENED),
    (["--opened", ORIGINAL, "--machine-opens"], {"opened": [ORIGINAL], "machine_opens": True},
     OPENED | MACHINE),
    (["--clicked", ORIGINAL], {"clicked": [ORIGINAL]}, CLICKED),
    (["--not-opened", ORIGINAL], {"not_opened": [ORIGINAL]}, NON_OPENERS),
    (["--not-opened", ORIGINAL, "--machine-opens"], {"not_opened": [ORIGINAL], "machine_opens": True},
     NON_OPENERS - MACHINE),
    (["--engaged-within", "7"], {"engaged_within_days": 7}, OPENED),
    (["--engaged-within", "7", "--machine-opens"], {"engaged_within_days": 7, "machine_opens": True},
     OPENED | MACHINE),
    (["--not-engaged-within", "7"], {"not_engaged_within_days": 7}, NON_OPENERS),
]  # fmt: skip


IDS = [" ".join(c[0]).replace(ORIGINAL, "X") for c in CASES]  # alike in every worker (no RUN)


@pytest.mark.parametrize(("options", "arguments", "want"), CASES, ids=IDS)
def test_the_dry_run_counts_exactly_whom_the_broadcast_sends_to_through_cli_and_mcp(
    local: Local, engaged: None, options: list[str], arguments: dict[str, Any], want: set[str]
) -> None:
    case = CASES.index((options, arguments, want))
    by_cli, by_mcp = f"e2e-ea-{RUN}-cli{case}", f"e2e-ea-{RUN}-mcp{case}"

    dry = broadcast(local, "send", "--template", TEMPLATE, "--tag", TAG, *options, "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert f"audience: {len(want)} subscriber(s)" in dry.stdout, dry.stdout
    sample = dry.stdout.split("sample: ")[1].split()[: min(5, len(want))] if want else []
    assert {s.rstrip(",") for s in sample} <= want and len(sample) == min(5, len(want))

    sent = broadcast(local, "send", "--template", TEMPLATE, "--tag", TAG, *options, "--id", by_cli, "--yes")
    assert sent.returncode == 0 and f"{by_cli}: done" in sent.stdout, sent.stdout + sent.stderr
    assert recipients(local, by_cli) == dict.fromkeys(want, 1)

    async def through_mcp(tools: Any) -> None:
        request = {"template": TEMPLATE, "tags": [TAG], **arguments}
        preview = await tools.call("broadcast_dry_run", **request)
        assert preview["audience_size"] == len(want) and set(preview["sample"]) <= want
        answer = await tools.call("broadcast_send", broadcast_id=by_mcp, confirm=True, **request)
        assert answer["created"]

    run_session(local, through_mcp)
    eventually(lambda: broadcast_record(local, by_mcp)["status"] == "done", 120, f"{by_mcp} done")
    assert recipients(local, by_mcp) == dict.fromkeys(want, 1)


def test_a_resend_reaches_the_non_openers_who_stayed_once_and_only_one_resend_is_made(
    local: Local, engaged: None
) -> None:
    unsubscribes = [
        {"type": "subscriber.unsubscribed", "email": e, "id": f"ea-{RUN}-{e}"} for e in UNSUBSCRIBED
    ]
    post(local, *unsubscribes)
    resend_id = f"{ORIGINAL}-resend"

    answer = broadcast(local, "resend", ORIGINAL, "--to", "non-openers", "--after", "48h",
                       "--subject", "In case you missed it")  # fmt: skip

    assert answer.returncode == 0 and f"resend {resend_id} of {ORIGINAL} scheduled" in answer.stdout, (
        answer.stdout + answer.stderr
    )
    eventually(lambda: broadcast_record(local, resend_id)["status"] == "done", 240, "the resend done")
    want = NON_OPENERS - UNSUBSCRIBED  # 70 - 5: the machine-only openers are among them
    assert len(want) == 65
    assert recipients(local, resend_id) == dict.fromkeys(want, 1)
    assert {str(eml(local, m)["Subject"]) for m in sent_by(local, resend_id)} == {"In case you missed it"}

    again = broadcast(local, "resend", ORIGINAL, "--after", "48h")
    assert again.returncode == 1 and "has a resend already" in again.stdout, again.stdout
    shown = broadcast(local, "get", ORIGINAL)
    assert f'"id": "{resend_id}"' in shown.stdout and '"status": "done"' in shown.stdout

    async def through_mcp(tools: Any) -> None:
        refused = await tools.error("broadcast_resend", broadcast_id=ORIGINAL, after="48h", confirm=True)
        assert "has a resend already" in refused
        shown = await tools.call("broadcast_get", broadcast_id=ORIGINAL)
        assert (shown["resend"]["id"], shown["resend"]["sent"]) == (resend_id, len(want))

    run_session(local, through_mcp)
    assert recipients(local, resend_id) == dict.fromkeys(want, 1)  # nothing more was sent
