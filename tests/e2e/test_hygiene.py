"""List hygiene on the local runtime: soft-bounce escalation through the whole path.

Given a subscriber who gets mail, when three of their mails soft-bounce (``mailstep local
bounce --soft``: the SES Transient bounce, published as SES publishes it), then the first two
are only counted and the third suppresses the address with reason ``soft_bounce_escalation``:
the next mail to them is skipped, and ``mailstep suppression list`` says why.
"""

from __future__ import annotations

import uuid
from typing import Any

from tests.e2e.conftest import Local
from tests.e2e.helpers import (
    add_contact,
    events_of,
    eventually,
    item,
    ok_json,
    ops,
    outbox,
    queue_url,
    wait_until_drained,
)
from tests.e2e.test_engagement import queue_send


def bounces(local: Local, email: str) -> list[dict[str, Any]]:
    return [e for e in events_of(local, email) if e.get("type") == "bounce"]


def mails_to(local: Local, email: str) -> int:
    return len([m for m in outbox(local) if email in m["destination"]])


def test_three_soft_bounced_mails_suppress_and_two_do_not(local: Local) -> None:
    email = f"soft-{uuid.uuid4().hex[:8]}@example.com"
    source = f"e2e-soft-{uuid.uuid4().hex[:6]}"
    add_contact(local, email)

    for n in range(1, 4):
        queue_send(local, email, source, f"mail-{n}")
        eventually(lambda n=n: mails_to(local, email) == n, 60, f"mail {n}")
        bounced = ops(local, "local", "bounce", "--soft", email)
        assert bounced.returncode == 0, bounced.stderr
        eventually(lambda n=n: len(bounces(local, email)) == n, 60, f"soft bounce {n} recorded")
        if n < 3:
            assert item(local, f"SUB#{email}", "SUPPRESSION") is None, f"suppressed after {n} soft bounce(s)"

    record = eventually(
        lambda: item(local, f"SUB#{email}", "SUPPRESSION"), 60, "the escalation's SUPPRESSION"
    )
    assert record["reason"] == {"S": "soft_bounce_escalation"}
    assert all(b.get("bounce_type") == "Transient" for b in bounces(local, email))
    listed = ok_json(ops(local, "suppression", "list", "--json"))
    assert any(r["email"] == email and r["reason"] == "soft_bounce_escalation" for r in listed), listed

    queue_send(local, email, source, "after")  # the next mail is skipped: nothing reaches SES
    wait_until_drained(local.client("sqs"), queue_url(local, "mailstep-send"))
    assert mails_to(local, email) == 3


def test_an_mpp_prefetch_counts_as_a_machine_open_and_a_person_s_open_as_the_open(local: Local) -> None:
    """Apple Mail Privacy Protection's prefetch (``mailstep local open --mpp``: an SES Open with
    the user agent ``Mozilla/5.0``) is shown apart from the reader's own open."""
    email = f"mpp-{uuid.uuid4().hex[:8]}@example.com"
    source = f"e2e-mpp-{uuid.uuid4().hex[:6]}"
    add_contact(local, email)
    queue_send(local, email, source, "welcome")
    eventually(lambda: mails_to(local, email) == 1, 60, "the mail")

    def rows() -> dict[str, dict[str, Any]]:
        return {r["metric"]: r for r in ok_json(ops(local, "stats", "--sequence", source, "--json"))["rows"]}

    assert ops(local, "local", "open", "--mpp", email).returncode == 0
    eventually(lambda: rows()["opened by machines"]["total"] == 1, 60, "the machine open counted")
    assert (rows()["opened"]["total"], rows()["opened"]["unique"]) == (0, 0)
    assert [e.get("machine") for e in events_of(local, email) if e["type"] == "open"] == ["mpp"]

    assert ops(local, "local", "open", email).returncode == 0
    eventually(lambda: rows()["opened"]["total"] == 1, 60, "the reader's open counted")
    assert (rows()["opened"]["unique"], rows()["opened by machines"]["total"]) == (1, 1)
