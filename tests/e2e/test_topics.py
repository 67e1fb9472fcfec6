"""Topics on the local runtime, as a reader and an operator meet them: a broadcast on a topic
carries that topic's List-Id; its one-click unsubscribe leaves only that topic; the next
broadcast on the topic skips the reader with reason ``topic_opt_out`` while a broadcast
without a topic and a transactional mail still reach them.

Every request runs the deployed shape: the bundled asset, the template's routes and IAM."""

from __future__ import annotations

from email.message import EmailMessage
from typing import Any

from tests.e2e.conftest import Local
from tests.e2e.helpers import (
    add_contact,
    eventually,
    item,
    messages,
    ok_json,
    one_click,
    ops,
    post,
    unique,
    unsubscribe_targets,
)

TEMPLATE = "newsletter/monthly"
TOPIC, TOPIC_NAME = "product-updates", "Product updates"  # topics.yaml: default on


def _broadcast(local: Local, broadcast_id: str, tag: str, *extra: str) -> dict[str, Any]:
    answer = ops(
        local, "broadcast", "send", "--template", TEMPLATE, "--tag", tag, "--id", broadcast_id, "--yes",
        *extra, timeout=150,
    )  # fmt: skip
    assert answer.returncode == 0, answer.stdout + answer.stderr
    stored = dict(ok_json(ops(local, "broadcast", "get", broadcast_id)))
    assert stored["status"] == "done", stored
    return stored


def _mail_to(local: Local, source: str, email: str) -> list[EmailMessage]:
    return [msg for meta, msg in messages(local, source) if meta["destination"] == [email]]


def _topics(local: Local, email: str) -> tuple[str, set[str], set[str]]:
    profile = item(local, f"SUB#{email}", "PROFILE")
    assert profile is not None
    return (
        profile["status"]["S"],
        set(profile.get("topics_in", {}).get("SS", [])),
        set(profile.get("topics_out", {}).get("SS", [])),
    )


def test_one_click_of_a_topic_mail_leaves_only_that_topic(local: Local) -> None:
    run = unique("topic")
    stay, leave = f"stay-{run}@example.com", f"leave-{run}@example.com"
    for email in (stay, leave):
        add_contact(local, email, tags=[run])

    # 1. A topic broadcast reaches both; its List-Id names the topic, not the broadcast.
    first = _broadcast(local, f"{run}-1", run, "--topic", TOPIC)
    assert (first["sent"], first["skipped"], first["filters"]["topic"]) == (2, {}, TOPIC), first
    (mail,) = _mail_to(local, f"{run}-1", leave)
    list_id = str(mail["List-Id"])
    assert list_id.startswith(f'"{TOPIC_NAME}" <{TOPIC}.') or list_id.startswith(f"{TOPIC_NAME} <{TOPIC}."), (
        list_id
    )

    # 2. The reader's mail client posts its one-click unsubscribe (twice: a retry is harmless).
    one_click_url = unsubscribe_targets(mail)[0]
    assert one_click(local, one_click_url) == 200
    assert one_click(local, one_click_url) == 200
    assert _topics(local, leave) == ("subscribed", set(), {TOPIC})  # only the topic, nothing else
    assert _topics(local, stay) == ("subscribed", set(), set())
    left = [e for e in ok_json(ops(local, "events", leave, "--json")) if e["type"] == "topic_unsubscribe"]
    assert len(left) == 1 and left[0]["topic"] == TOPIC, left

    # 3. The next broadcast on the topic skips them with the reason; the other reader gets it.
    second = _broadcast(local, f"{run}-2", run, "--topic", TOPIC)
    assert (second["sent"], second["skipped"]) == (1, {"topic_opt_out": 1}), second
    assert len(_mail_to(local, f"{run}-2", stay)) == 1 and _mail_to(local, f"{run}-2", leave) == []

    # 4. Mail without a topic and transactional mail still reach them.
    third = _broadcast(local, f"{run}-3", run)
    assert (third["sent"], third["skipped"]) == (2, {}), third
    (result,) = post(
        local, {"type": "order.shipped", "email": leave, "data": {"order_id": run, "carrier": "DHL"}}
    )
    assert result["sequences_started"] == ["order-shipped"], result
    shipped = eventually(
        lambda: _mail_to(local, "order-shipped", leave), what="the transactional mail to the reader"
    )
    assert shipped[0]["List-Unsubscribe"] is None  # transactional: no list, never topic-gated


def test_an_unknown_topic_is_refused_and_nothing_is_created(local: Local) -> None:
    broadcast_id = unique("no-such-topic")
    answer = ops(
        local, "broadcast", "send", "--template", TEMPLATE, "--topic", "no-such-topic", "--id", broadcast_id,
        "--yes",
    )  # fmt: skip
    text = " ".join((answer.stdout + answer.stderr).split())
    assert answer.returncode != 0 and "--topic" in text and "no-such-topic" in text, text
    assert ops(local, "broadcast", "get", broadcast_id).returncode != 0
