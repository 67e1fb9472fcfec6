"""The local reputation monitor counts the bounces and complaints made with `mailstep local
bounce|complain` (published by the runtime's SES, as its own events are), and not a soft
bounce (SES's bounce rate counts hard bounces): ``GET /_local/status`` shows what each
configuration set's rates are computed from."""

from __future__ import annotations

from typing import Any

from tests.e2e.conftest import Local
from tests.e2e.helpers import add_contact, eventually, mails, ops, unique_email


def counted(local: Local, configuration_set: str) -> dict[str, int]:
    found: dict[str, Any] = local.status()["ses"]["reputation"]
    return dict(found.get(configuration_set) or {"sends": 0, "bounces": 0, "complaints": 0})


def test_bounces_and_complaints_made_with_mailstep_local_count_in_the_set_s_reputation(local: Local) -> None:
    readers = [unique_email("rep-count") for _ in range(3)]
    for reader in readers:
        add_contact(local, reader)
        sent = local.cli(
            "send-test", "newsletter/monthly", "--to", reader, "--state-dir", str(local.state_dir)
        )
        assert sent.returncode == 0, sent.stderr
    found = eventually(
        lambda: m if all((m := mails(local, set(readers))).values()) else None, 60, "the three test mails"
    )
    hard, soft, complained = (found[reader][0] for reader in readers)
    configuration_set = hard["configuration_set"]
    assert configuration_set
    before = counted(local, configuration_set)
    assert before["sends"] >= 3  # the sends are counted already

    for args in (("bounce", hard), ("bounce", "--soft", soft), ("complain", complained)):
        *command, meta = args
        answer = ops(local, "local", *command, meta["message_id"])
        assert answer.returncode == 0, answer.stdout + answer.stderr
        assert "published" in answer.stdout, answer.stdout

    after = eventually(
        lambda: (
            c
            if (c := counted(local, configuration_set))["complaints"] > before["complaints"]
            and c["bounces"] > before["bounces"]
            else None
        ),
        30,
        "the hard bounce and the complaint counted",
    )
    assert after["bounces"] >= before["bounces"] + 1 and after["complaints"] >= before["complaints"] + 1


def test_an_event_record_the_runtime_cannot_use_is_refused_naming_the_field(local: Local) -> None:
    for body, says in (
        ({}, "record is required"),
        ({"record": "Bounce"}, "record must be an SES event record"),
        (
            {"record": {"eventType": "Bounce", "mail": {}}},
            "record needs eventType and a mail object with its tags",
        ),
    ):
        status, answer = local.http("POST", "/_local/ses/events", body)
        assert status == 400 and says in answer["error"]["message"], answer
