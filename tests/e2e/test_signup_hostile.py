"""The public sign-up on the local runtime as an attacker uses it, through HTTP: the deployed
shape (the bundled asset, the template's routes and IAM), the confirmation mail through the
send queue and the sender function, SES events through the engagement function.

- A bounced address (only its SUPPRESSION item) signed up again: the usual answer, no mail.
- An old confirm link posted after a bot signed the address up again confirms nothing.
- An erased address signed up again: the usual answer, no item naming it, no mail.
- A flood of case and ``+tag`` variants of one mailbox: one confirmation mail.
- Every address state makes the same requests (and, measured by ``make bench``, takes the
  same time to answer).
"""

from __future__ import annotations

import json
import random
import statistics
import time
from typing import Any

import pytest

from shared.store import keys
from shared.store.pending import mailbox_key
from tests.e2e.conftest import Local
from tests.e2e.helpers import (
    EVENTS,
    age_signup_cooldown,
    eventually,
    item,
    link,
    mails,
    ops,
    outbox,
    partition,
    post,
    request,
    settled,
    subscribe,
    unique,
    unique_email,
)
from tests.e2e.test_engagement import bounce_unknown_address
from tests.e2e.test_signup import CONFIRM_TEMPLATE, confirmation_mails, iam_calls

ANSWER = {
    "status": "accepted",
    "confirmation": True,
    "message": "Thanks! Check your inbox and click the link to confirm.",
}


def sign_up(local: Local, email: str, **fields: Any) -> tuple[int, dict[str, Any]]:
    status, _, body = request(
        local.api_url + "/v1/signup", "POST", json.dumps({"email": email, **fields}), "application/json"
    )
    return status, json.loads(body)


def everything_of(local: Local, email: str) -> list[dict[str, Any]]:
    return partition(local, f"SUB#{email}") + partition(local, f"SUB#{email}", EVENTS)


def confirmation_deliveries(local: Local, email: str) -> list[dict[str, Any]]:
    """The delivery events of the address's confirmation mails."""
    return [
        i
        for i in partition(local, f"SUB#{email}", EVENTS)
        if i.get("type", {}).get("S") == "delivery" and i.get("template", {}).get("S") == CONFIRM_TEMPLATE
    ]


# ----- a suppressed address ---------------------------------------------------------------------
def test_a_bounced_address_signed_up_again_gets_the_usual_answer_and_no_mail(local: Local) -> None:
    # Given an address whose only record is its SUPPRESSION item (its mail bounced)
    email = bounce_unknown_address(local)
    before = everything_of(local, email)
    assert [i["SK"]["S"] for i in partition(local, f"SUB#{email}")] == [keys.SUPPRESSION]
    mailed = len(mails(local, {email})[email])

    # When a bot signs it up, twice
    answers = [sign_up(local, email, first_name="Ada") for _ in range(2)]
    settled(local)

    # Then every sign-up's answer, nothing written, no confirmation mail
    assert answers == [(200, ANSWER)] * 2
    assert everything_of(local, email) == before
    assert len(mails(local, {email})[email]) == mailed and confirmation_mails(local, email) == []


# ----- an old confirm link ----------------------------------------------------------------------
def test_an_old_confirm_link_does_not_confirm_a_bots_newer_sign_up(local: Local) -> None:
    # Given a reader who confirmed with link T1, then unsubscribed
    email = unique_email("stale-link")
    sign_up(local, email, first_name="Ada")
    (first,) = eventually(lambda: confirmation_mails(local, email), 30, "the first confirmation mail")
    old_link = link(local, first, "/c/")
    path = "/c/" + old_link.rsplit("/c/", 1)[1]
    assert request(local.api_url + path, "POST", "", "application/x-www-form-urlencoded")[0] == 200
    post(local, {"type": "subscriber.unsubscribed", "email": email})
    # and a bot that signs the address up again with another name after the cooldown
    age_signup_cooldown(local, email)
    assert sign_up(local, email, first_name="Bot")[0] == 200
    eventually(lambda: len(confirmation_mails(local, email)) == 2, 30, "the bot's confirmation mail")
    settled(local)
    pending = eventually(
        lambda: (found := item(local, f"SUB#{email}", "PENDING")) and "mailed" in found and found,
        30,
        "the bot's sign-up marked mailed",
    )
    assert pending["first_name"]["S"] == "Bot"
    # and both confirmation mails' delivery events recorded (they arrive through SNS/SQS)
    eventually(
        lambda: len(confirmation_deliveries(local, email)) == 2,
        30,
        "both confirmation mails' delivery events",
    )
    before = everything_of(local, email)

    # When the old link is shown and posted
    shown = request(local.api_url + path)
    posted = request(local.api_url + path, "POST", "", "application/x-www-form-urlencoded")

    # Then neither confirms the bot's sign-up: the page says the link was replaced
    for status, _, page in (shown, posted):
        assert status == 400 and "This link was replaced" in page, page[:1500]
    assert everything_of(local, email) == before
    profile = item(local, f"SUB#{email}", "PROFILE")
    assert profile is not None and profile["status"]["S"] == "unsubscribed"


# ----- an erased address ------------------------------------------------------------------------
def test_an_erased_address_signed_up_again_leaves_nothing_and_gets_no_mail(local: Local) -> None:
    email = unique_email("erased-signup")
    subscribe(local, email, first_name="Ada")
    result = ops(local, "subscribers", "delete", email, "--yes", "--json")
    assert result.returncode == 0, result.stderr
    eventually(lambda: everything_of(local, email) == [], 30, "the erase")
    mailed = len(mails(local, {email})[email])

    answers = [sign_up(local, email, first_name="Ada") for _ in range(2)]
    settled(local)

    assert answers == [(200, ANSWER)] * 2
    assert everything_of(local, email) == []
    assert len(mails(local, {email})[email]) == mailed


# ----- list bombing through mailbox variants ----------------------------------------------------
def test_a_flood_of_case_and_tag_variants_of_one_mailbox_gets_one_confirmation_mail(local: Local) -> None:
    base = "listbomb" + unique("v").removeprefix("v")
    mailbox = f"{base}@example.com"
    # 64 spellings in case (the first eight letters as the bits of 1..64) and 64 +tags
    variants = [
        "".join(c.upper() if n < 8 and (i >> n) & 1 else c for n, c in enumerate(base)) + "@example.com"
        for i in range(1, 65)
    ]
    variants += [f"{base}+{unique('t')}@example.com" for _ in range(64)]
    assert len(set(variants)) == 128 and {mailbox_key(v) for v in variants} == {mailbox}

    started = time.monotonic()
    answers = [sign_up(local, v, first_name="Ada") for v in variants]
    elapsed = time.monotonic() - started
    settled(local)

    assert {a for a, _ in answers} == {200} and all(body == ANSWER for _, body in answers)
    received = [
        m
        for m in outbox(local)
        if m["template"] == CONFIRM_TEMPLATE and {mailbox_key(d) for d in m["destination"]} == {mailbox}
    ]
    print(f"\n128 variant sign-ups in {elapsed:.1f} s: {len(received)} confirmation mail(s) to the mailbox")
    assert len(received) == 1


# ----- answers do not tell the address's state --------------------------------------------------
def _states(local: Local) -> dict[str, str]:
    """One address per state: new (fresh each time: see ``address``), subscribed, suppressed,
    and one signed up within the cooldown."""
    subscribed = unique_email("timing-subscribed")
    subscribe(local, subscribed)
    suppressed = bounce_unknown_address(local)
    cooldown = unique_email("timing-cooldown")
    assert sign_up(local, cooldown)[0] == 200
    settled(local)
    return {"subscribed": subscribed, "suppressed": suppressed, "cooldown": cooldown}


def address(state: str, states: dict[str, str]) -> str:
    return unique_email("timing-new") if state == "new" else states[state]


def test_every_address_state_makes_the_same_requests(local: Local) -> None:
    states = _states(local)
    made = {}
    for state in ("new", "subscribed", "suppressed", "cooldown"):
        before = iam_calls(local, "mailstep-signup")
        assert sign_up(local, address(state, states)) == (200, ANSWER)
        after = iam_calls(local, "mailstep-signup")
        made[state] = {k: n - before.get(k, 0) for k, n in after.items() if n != before.get(k, 0)}
    assert all(calls == made["new"] for calls in made.values()), made


@pytest.mark.bench
def test_median_answer_times_per_address_state_are_within_25_percent(local: Local) -> None:
    """Measured from outside, as an attacker times the answers. On AWS the sender function runs
    in execution environments of its own; here it shares the machine's cores with the signup
    function, so each request is timed once the send queue is drained (the previous request's
    mail is not in the next one's time), in a shuffled order per round."""
    states = _states(local)
    rounds = 60
    times: dict[str, list[float]] = {s: [] for s in ("new", "subscribed", "suppressed", "cooldown")}
    order = list(times)
    shuffler = random.Random(23)
    for _ in range(rounds):
        shuffler.shuffle(order)
        for state in order:
            email = address(state, states)
            settled(local)
            started = time.perf_counter()
            status, body = sign_up(local, email)
            times[state].append(time.perf_counter() - started)
            assert (status, body) == (200, ANSWER)
    medians = {s: statistics.median(t) * 1000 for s, t in times.items()}
    print("\nmedian answer time per address state (ms):", {s: round(m, 1) for s, m in medians.items()})
    assert max(medians.values()) <= 1.25 * min(medians.values()), medians
