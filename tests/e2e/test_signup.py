"""Sign-up, confirmation and the preference centre on the local runtime, as a website and a
reader use them: HTML form posts and JSON to POST /v1/signup, the confirmation link from the
outbox, GET (changes nothing) and POST on /c/<token>, then /u/<token> from a later mail; and
as an operator sees them: pending sign-ups, sign-up counts, topics (CLI and MCP).

Every request runs the deployed shape: the bundled asset, the template's routes and IAM."""

from __future__ import annotations

import json
import re
import time
from typing import Any
from urllib.parse import urlencode

import pytest

from tests.e2e.conftest import Local
from tests.e2e.helpers import (
    BROWSER_UA,
    EVENTS,
    FORM,
    MAIN,
    Tools,
    add_contact,
    age_signup_cooldown,
    eventually,
    item,
    link,
    mails,
    ok_json,
    ops,
    partition,
    public,
    request,
    run_session,
    scan_all,
    settled,
    subscribe,
    unique_email,
)

CONFIRM_TEMPLATE = "system/confirm"
WELCOME_SEQUENCE = "welcome-confirmed"


def sign_up(
    local: Local, fields: dict[str, Any] | list[tuple[str, str]], *, as_json: bool = False
) -> tuple[int, dict[str, str], str]:
    if as_json:
        return request(local.api_url + "/v1/signup", "POST", json.dumps(fields), "application/json")
    return request(local.api_url + "/v1/signup", "POST", urlencode(fields, doseq=True), FORM)


def confirmation_mails(local: Local, email: str) -> list[dict[str, Any]]:
    return [m for m in mails(local, {email})[email] if m["template"] == CONFIRM_TEMPLATE]


def signed_up(local: Local, prefix: str) -> tuple[str, str]:
    """A new address that signed up (JSON), and the link of its one confirmation mail."""
    email = unique_email(prefix)
    sign_up(local, {"email": email}, as_json=True)
    (mail,) = eventually(lambda: confirmation_mails(local, email), 30, "the confirmation mail")
    # SES has the mail before the sender records it: wait for its SENT# item and the released
    # claim, so that a snapshot taken now is the one a refused request must leave unchanged
    eventually(
        lambda: send_recorded(local, email), 30, "the confirmation mail's SENT# item, its claim released"
    )
    return email, link(local, mail, "/c/")


def settled_pending(local: Local, email: str) -> dict[str, Any] | None:
    """The address's pending sign-up once its confirmation went out and was counted (``mailed``
    set, ``uncounted`` gone) and its send recorded; None before."""
    pending = item(local, f"SUB#{email}", "PENDING")
    if pending is None or "mailed" not in pending or "uncounted" in pending:
        return None
    return pending if send_recorded(local, email) else None


def send_recorded(local: Local, email: str) -> bool:
    items = partition(local, f"SUB#{email}")
    return any(i["SK"]["S"].startswith("SENT#") for i in items) and not any(
        i["SK"]["S"].startswith("SEND#") for i in items
    )


def everything_of(local: Local, email: str) -> list[dict[str, Any]]:
    """Every item of the address in both tables."""
    return partition(local, f"SUB#{email}") + partition(local, f"SUB#{email}", EVENTS)


def audience_size(local: Local) -> int:
    """The size `mailstep broadcast send --template newsletter/monthly --dry-run` prints, counted
    in this process by the same code (the request the CLI builds, the resolver its dry run
    iterates: ops.broadcasts.Broadcasts.preview), without starting the CLI three times."""
    from ops.broadcast_requests import broadcast_request
    from shared.broadcasts.audience import AudienceResolver
    from shared.core.topics import require_topics

    audience = broadcast_request(template="newsletter/monthly").audience
    resolver = AudienceResolver(
        MAIN, client=local.client("dynamodb"), topics=require_topics(), events_table=EVENTS
    )
    return sum(1 for _ in resolver.iterate(audience))


def iam_calls(local: Local, function: str) -> dict[tuple[str, str], int]:
    code, report = local.http("GET", "/_local/iam")
    assert code == 200
    counts: dict[tuple[str, str], int] = {}
    for call in report["calls"]:
        if call["function"] == function:
            key = (call["action"], call["resource"].rsplit(":", 1)[-1])
            counts[key] = counts.get(key, 0) + int(call["count"])
    return counts


def difference(after: dict[tuple[str, str], int], before: dict[tuple[str, str], int]) -> dict[str, int]:
    return {
        f"{a} {r}": n - before.get((a, r), 0)
        for (a, r), n in sorted(after.items())
        if n != before.get((a, r), 0)
    }


# ----- sign-up ----------------------------------------------------------------------------------
def test_a_form_post_makes_a_pending_sign_up_and_one_mail_and_the_cooldown_holds(local: Local) -> None:
    email = unique_email("signup")
    before = iam_calls(local, "mailstep-signup")

    # Given a form post as the documented snippet sends it (hidden empty topics + one box)
    status, headers, page = sign_up(
        local,
        [
            ("email", email),
            ("first_name", "Ada"),
            ("topics", ""),
            ("topics", "newsletter"),
            ("form", "footer"),
        ],
    )

    # Then a "check your inbox" page, a pending sign-up (no profile) and one confirmation mail
    assert status == 200 and headers["content-type"].startswith("text/html") and "Check your inbox" in page
    pending = item(local, f"SUB#{email}", "PENDING")
    assert pending is not None and item(local, f"SUB#{email}", "PROFILE") is None
    assert pending["form"]["S"] == "footer" and pending["topics"]["L"] == [{"S": "newsletter"}]
    assert pending["ttl"] == pending["expires_at"]
    (mail,) = eventually(lambda: confirmation_mails(local, email), 30, "the confirmation mail")
    print(
        "\nper new sign-up (signup function requests):",
        difference(iam_calls(local, "mailstep-signup"), before),
    )
    # the sender marks the sign-up mailed once its mail went out (a redelivered job sends nothing)
    pending = eventually(
        lambda: (found := item(local, f"SUB#{email}", "PENDING")) and "mailed" in found and found,
        30,
        "the sign-up marked mailed",
    )

    # When the same address signs up 5 more times within the cooldown (JSON and form)
    middle = iam_calls(local, "mailstep-signup")
    answers = [sign_up(local, {"email": email}, as_json=True) for _ in range(3)]
    answers += [
        sign_up(local, {"email": f"  {email.replace('@example.com', '@Example.COM')} "}) for _ in range(2)
    ]

    # Then every answer looks the same, nothing more is sent, the pending item is unchanged
    assert {a[0] for a in answers} == {200}
    assert {a[2] for a in answers[:3]} == {
        json.dumps(
            {"status": "accepted", "confirmation": True, "message": json.loads(answers[0][2])["message"]}
        )
    }
    settled(local)
    assert confirmation_mails(local, email) == [mail]
    assert item(local, f"SUB#{email}", "PENDING") == pending
    print("5 repeats within the cooldown:", difference(iam_calls(local, "mailstep-signup"), middle))


def test_the_honeypot_answers_like_a_success_and_writes_nothing(local: Local) -> None:
    email = unique_email("bot")
    real = sign_up(local, {"email": unique_email("person")}, as_json=True)

    bot_json = sign_up(local, {"email": email, "website": "http://spam.example"}, as_json=True)
    bot_form = sign_up(local, {"email": email, "first_name": "Bot", "website": "x"})

    assert bot_json[0] == real[0] == 200 and bot_json[2] == real[2]
    assert bot_form[0] == 200 and "Check your inbox" in bot_form[2]
    settled(local)
    assert everything_of(local, email) == [] and mails(local, {email})[email] == []


def test_a_form_post_with_a_foreign_redirect_is_refused(local: Local) -> None:
    email = unique_email("redirect")
    status, _, page = sign_up(local, {"email": email, "redirect": "https://evil.example/thanks"})
    assert status == 400 and "redirect" in page and "<html" in page
    assert everything_of(local, email) == []


@pytest.mark.parametrize(
    ("fields", "content_type", "status", "field"),
    [
        ({"email": "x@example.com", "first_name": "A" * 9000}, FORM, 413, None),
        ({"first_name": "<script>alert(1)</script>"}, "json", 400, "first_name"),
        ({"first_name": "Eve\r\nBcc: victim@example.com"}, "json", 400, "first_name"),
        ({"first_name": "Visit https://spam.example"}, "json", 400, "first_name"),
        ({"topics": ["newsletter", "casino"]}, "json", 400, "topics"),
        ({"redirect": "https://evil.example/x"}, "json", 400, "redirect"),
        ({"redirect": "javascript:alert(1)"}, "json", 400, "redirect"),
        ({"unknown": 1}, "json", 400, "unknown"),
        ({"email": "not an address"}, "json", 400, "email"),
        ({}, "text/plain", 400, "content-type"),
    ],
)
def test_hostile_sign_ups_get_a_clear_4xx_and_write_nothing(
    local: Local, fields: dict[str, Any], content_type: str, status: int, field: str | None
) -> None:
    email = unique_email("hostile")
    body = {"email": email, **fields}
    if content_type == "json":
        answer = request(local.api_url + "/v1/signup", "POST", json.dumps(body), "application/json")
    elif content_type == FORM:
        answer = request(local.api_url + "/v1/signup", "POST", urlencode(body), FORM)
    else:
        answer = request(local.api_url + "/v1/signup", "POST", json.dumps(body), content_type)
    assert answer[0] == status, answer
    if field is not None:
        error = json.loads(answer[2])["error"]
        assert error["field"] == field, error
    assert everything_of(local, email) == [] and mails(local, {email})[email] == []


# ----- confirmation -----------------------------------------------------------------------------
def test_get_changes_nothing_and_post_confirms_with_consent_and_starts_the_welcome(local: Local) -> None:
    email = unique_email("confirm")
    size_before = audience_size(local)
    assert (
        sign_up(local, {"email": email, "first_name": "Grace", "topics": ["product-updates"]}, as_json=True)[
            0
        ]
        == 200
    )
    (mail,) = eventually(lambda: confirmation_mails(local, email), 30, "the confirmation mail")
    url = public(local, link(local, mail, "/c/"))
    ctx = local.ssl_context()
    # the sender has marked the sign-up mailed and counted it (after SES had the mail)
    pending = eventually(
        lambda: settled_pending(local, email), 30, "the pending sign-up marked mailed and counted"
    )

    # A pending sign-up is in no broadcast audience
    assert audience_size(local) == size_before

    # GET (a link scanner, or the reader) shows a page with a button and changes nothing
    for _ in range(2):
        status, headers, page = request(url, context=ctx)
        assert status == 200 and '<form method="post"' in page and "Confirm your subscription" in page
        assert headers["cache-control"] == "no-store" and email not in page
    assert item(local, f"SUB#{email}", "PENDING") == pending
    assert item(local, f"SUB#{email}", "PROFILE") is None

    # POST confirms: subscribed, consent recorded, the pending sign-up gone
    before = iam_calls(local, "mailstep-signup")
    status, _, page = request(url, "POST", b"", FORM, context=ctx)
    assert status == 200 and "You are subscribed" in page
    print(
        "\nper confirmation (signup function requests):",
        difference(iam_calls(local, "mailstep-signup"), before),
    )
    profile = item(local, f"SUB#{email}", "PROFILE")
    assert profile is not None and profile["status"]["S"] == "subscribed"
    consent = profile["consent"]["M"]
    assert consent["method"]["S"] == "double" and consent["form"]["S"] == "default"
    assert consent["user_agent"]["S"] == BROWSER_UA and len(consent["ip_hash"]["S"]) == 32
    assert "127.0.0.1" not in json.dumps(profile)
    assert profile["topics_in"]["SS"] == ["product-updates"] and profile["topics_out"]["SS"] == ["newsletter"]
    assert item(local, f"SUB#{email}", "PENDING") is None
    # the subscriber's event items (the partition also holds the list-hygiene ENGAGEMENT item)
    kinds = [i["type"]["S"] for i in partition(local, f"SUB#{email}", EVENTS) if "type" in i]
    assert "subscriber.confirmed" in kinds

    # and the sequence triggered by subscriber.confirmed sends its welcome
    eventually(
        lambda: [m for m in mails(local, {email})[email] if m["source"] == WELCOME_SEQUENCE],
        60,
        "the welcome mail",
    )
    assert audience_size(local) == size_before + 1

    # Confirming again changes nothing
    version = profile["version"]
    status, _, page = request(url, "POST", b"", FORM, context=ctx)
    assert status == 200 and "already confirmed" in page
    assert item(local, f"SUB#{email}", "PROFILE")["version"] == version  # type: ignore[index]


def test_forged_tampered_and_wrong_purpose_tokens_are_refused_and_write_nothing(local: Local) -> None:
    email, url = signed_up(local, "forged")
    ctx = local.ssl_context()
    token = url.rsplit("/", 1)[1]
    flipped = token[:-3] + ("A" if token[-3] != "A" else "B") + token[-2:]
    before = partition(local, f"SUB#{email}")
    for bad in ("nonsense", flipped, token[:20]):
        for method in ("GET", "POST"):
            status, _, page = request(
                f"{local.public_url}/c/{bad}", method, b"" if method == "POST" else None, FORM, ctx
            )
            assert status == 400 and "not valid" in page, (bad, method, status)
    # a confirmation token does not unsubscribe, and an unsubscribe page is no confirmation
    assert request(f"{local.public_url}/u/{token}", context=ctx)[0] == 400
    assert partition(local, f"SUB#{email}") == before


def test_an_expired_sign_up_is_gone_for_every_read_and_mailstep_scan(local: Local) -> None:
    email, url = signed_up(local, "expired")
    ctx = local.ssl_context()

    # Given its expiry passed (the clock moved past expires_at; DynamoDB TTL has not run)
    past = int(time.time()) - 1
    local.client("dynamodb").update_item(
        TableName="mailstep-main",
        Key={"PK": {"S": f"SUB#{email}"}, "SK": {"S": "PENDING"}},
        UpdateExpression="SET expires_at = :t, #ttl = :t",
        ExpressionAttributeNames={"#ttl": "ttl"},
        ExpressionAttributeValues={":t": {"N": str(past)}},
    )
    left = partition(local, f"SUB#{email}")

    # Then its (still signed) link shows and confirms nothing, and writes nothing
    assert request(url, context=ctx)[0] == 400
    status, _, page = request(url, "POST", b"", FORM, context=ctx)
    assert status == 400 and "expired" in page
    assert partition(local, f"SUB#{email}") == left and item(local, f"SUB#{email}", "PROFILE") is None

    # and no scan mailstep makes finds it: live sign-ups are filtered by expiry, not by TTL
    live = [
        i
        for i in scan_all(local)
        if i["SK"]["S"] == "PENDING" and int(i["expires_at"]["N"]) > int(time.time())
    ]
    assert f"SUB#{email}" not in {i["PK"]["S"] for i in live}
    # every item the sign-up left expires (TTL) at the sign-up's expiry at the latest: the
    # pending item and the confirmation mail's SENT# log; the send claim is gone already
    assert left and all(int(i["ttl"]["N"]) <= past for i in left if "ttl" in i and i["SK"]["S"] == "PENDING")
    assert not [i for i in left if i["SK"]["S"].startswith("SEND#")]

    # and a new sign-up after the mailbox's cooldown mails again (the cooldown is the
    # mailbox's, not the expired sign-up's)
    age_signup_cooldown(local, email)
    sign_up(local, {"email": email}, as_json=True)
    eventually(lambda: len(confirmation_mails(local, email)) == 2, 30, "a second confirmation mail")


# ----- the preference centre --------------------------------------------------------------------
def choice(local: Local, email: str) -> tuple[str, list[str] | None, list[str] | None]:
    """(status, topics_in, topics_out) of the profile (onboarding keeps changing its tags)."""
    found = item(local, f"SUB#{email}", "PROFILE")
    assert found is not None
    topics = [sorted(found[name]["SS"]) if name in found else None for name in ("topics_in", "topics_out")]
    return found["status"]["S"], topics[0], topics[1]


def test_the_preference_centre_shows_and_saves_topics_and_keeps_one_click(local: Local) -> None:
    email = unique_email("prefs")
    subscribe(local, email)  # onboarding's first mail carries the /u/ link
    (welcome,) = eventually(lambda: mails(local, {email})[email][:1], 60, "the onboarding welcome")
    url = public(local, link(local, welcome, "/u/"))
    ctx = local.ssl_context()
    profile = choice(local, email)

    # GET lists every topic with the reader's current choice (defaults) and changes nothing
    status, _, page = request(url, context=ctx)
    assert status == 200 and "Product updates" in page and "Newsletter" in page
    assert re.search(r'value="product-updates"[^>]*checked', page)
    assert not re.search(r'value="newsletter"[^>]*checked', page)
    assert "Unsubscribe from everything" in page
    assert choice(local, email) == profile == ("subscribed", None, None)

    # POST /u/<token>/preferences saves the whole choice, then shows the page again
    body = urlencode([("topics", ""), ("topics", "newsletter")])
    status, headers, _ = request(url + "/preferences", "POST", body, FORM, context=ctx)
    assert status == 303 and headers["location"].endswith("?saved=1")
    saved = item(local, f"SUB#{email}", "PROFILE")
    assert saved is not None and saved["status"]["S"] == "subscribed"
    assert saved["topics_in"]["SS"] == ["newsletter"] and saved["topics_out"]["SS"] == ["product-updates"]
    status, _, page = request(url + "?saved=1", context=ctx)
    assert "Saved." in page and re.search(r'value="newsletter"[^>]*checked', page)

    # An unknown topic is refused and changes nothing
    status, _, _ = request(url + "/preferences", "POST", "topics=casino", FORM, context=ctx)
    assert status == 400 and choice(local, email) == ("subscribed", ["newsletter"], ["product-updates"])

    # RFC 8058 one-click still unsubscribes from everything
    status, _, page = request(url, "POST", "List-Unsubscribe=One-Click", FORM, context=ctx)
    assert status == 200 and "You are unsubscribed" in page
    assert item(local, f"SUB#{email}", "PROFILE")["status"]["S"] == "unsubscribed"  # type: ignore[index]


# ----- operators: pending sign-ups, sign-up counts, topics (CLI and MCP) -------------------------
def signup_counts(local: Local) -> dict[str, Any]:
    return dict(ok_json(ops(local, "stats", "--signups", "--json")))


def pending_of(local: Local) -> dict[str, dict[str, Any]]:
    listed = ok_json(ops(local, "signups", "pending", "--limit", "1000", "--json"))
    assert listed["total"] == len(listed["pending"])
    return {p["email"]: p for p in listed["pending"]}


def test_operators_see_a_pending_sign_up_and_count_it_and_its_confirmation_once(local: Local) -> None:
    email = unique_email("ops-signup")
    before = signup_counts(local)

    # Given a sign-up, and two more of the address within the cooldown
    sign_up(local, {"email": email, "topics": ["newsletter"], "form": "footer"}, as_json=True)
    (mail,) = eventually(lambda: confirmation_mails(local, email), 30, "the confirmation mail")
    for _ in range(2):
        assert sign_up(local, {"email": email}, as_json=True)[0] == 200

    # Then `signups pending` lists it as stored, and it is one sign-up
    stored = item(local, f"SUB#{email}", "PENDING")
    assert stored is not None
    expires = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(int(stored["expires_at"]["N"])))
    mailed = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(int(stored["last_mail_at"]["N"])))
    assert pending_of(local)[email] == {
        "email": email,
        "form": "footer",
        "created_at": stored["created_at"]["S"],
        "expires_at": expires,
        "last_mail_at": mailed,
        "topics": ["newsletter"],
    }
    table = ops(local, "signups", "pending")
    assert table.returncode == 0 and "Pending sign-ups" in table.stdout
    counted = signup_counts(local)
    assert (counted["signups"], counted["confirmed"]) == (before["signups"] + 1, before["confirmed"])

    # When the reader confirms, twice
    url = public(local, link(local, mail, "/c/"))
    for _ in range(2):
        assert request(url, "POST", b"", FORM, context=local.ssl_context())[0] == 200

    # Then the sign-up is no longer pending, and its confirmation counted once
    assert email not in pending_of(local)
    after = signup_counts(local)
    assert (after["signups"], after["confirmed"]) == (before["signups"] + 1, before["confirmed"] + 1)
    assert after["confirmation_rate"] == after["confirmed"] / after["signups"]
    # and plain `mailstep stats` shows the sign-ups below the sources
    shown = ops(local, "stats")
    assert shown.returncode == 0 and "Sign-ups" in shown.stdout and "confirmed" in shown.stdout


def topic_rows(local: Local) -> dict[str, dict[str, Any]]:
    listed = ok_json(ops(local, "topics", "list", "--json"))
    return {t["id"]: t for t in listed["topics"]}


def test_operators_see_and_change_a_readers_topics_and_the_counts_follow(local: Local) -> None:
    email = unique_email("ops-topics")
    add_contact(local, email)
    before = topic_rows(local)
    assert [(t, r["default"]) for t, r in before.items()] == [
        ("product-updates", "on"),
        ("newsletter", "off"),
    ]

    # A new reader follows the defaults
    shown = ok_json(ops(local, "subscribers", "topics", email, "--json"))
    assert [(t["id"], t["receives"], t["source"]) for t in shown["topics"]] == [
        ("product-updates", True, "default"),
        ("newsletter", False, "default"),
    ]

    # --on newsletter --off product-updates: both become the reader's choice
    changed = ok_json(
        ops(local, "subscribers", "topics", email, "--on", "newsletter", "--off", "product-updates", "--json")
    )
    assert changed["changed"] is True
    assert [(t["id"], t["receives"], t["source"]) for t in changed["topics"]] == [
        ("product-updates", False, "choice"),
        ("newsletter", True, "choice"),
    ]
    profile = item(local, f"SUB#{email}", "PROFILE")
    assert profile is not None
    assert (profile["topics_in"]["SS"], profile["topics_out"]["SS"]) == (["newsletter"], ["product-updates"])
    after = topic_rows(local)
    assert after["newsletter"]["receiving"] == before["newsletter"]["receiving"] + 1
    assert after["newsletter"]["opted_in"] == before["newsletter"]["opted_in"] + 1
    assert after["product-updates"]["receiving"] == before["product-updates"]["receiving"] - 1
    assert after["product-updates"]["opted_out"] == before["product-updates"]["opted_out"] + 1

    # An unknown topic is refused by name and changes nothing
    refused = ops(local, "subscribers", "topics", email, "--on", "casino")
    assert refused.returncode == 2 and "'casino'" in refused.stderr
    assert item(local, f"SUB#{email}", "PROFILE") == profile
    # and the tables read like the JSON
    table = ops(local, "subscribers", "topics", email)
    assert table.returncode == 0 and "their choice" in table.stdout
    listing = ops(local, "topics", "list")
    assert listing.returncode == 0 and "Newsletter" in listing.stdout


def test_the_mcp_tools_answer_like_the_cli(local: Local) -> None:
    email = unique_email("mcp-topics")
    add_contact(local, email)
    waiting = unique_email("mcp-pending")
    sign_up(local, {"email": waiting}, as_json=True)
    eventually(lambda: confirmation_mails(local, waiting), 30, "the confirmation mail")

    async def body(tools: Tools) -> None:
        assert await tools.call("topics_list") == ok_json(ops(local, "topics", "list", "--json"))
        shown = await tools.call("subscriber_topics", email=email)
        assert shown == ok_json(ops(local, "subscribers", "topics", email, "--json"))

        changed = await tools.call("subscriber_topics_update", email=email, on=["newsletter"])
        assert changed["changed"] is True
        assert [(t["id"], t["receives"]) for t in changed["topics"]] == [
            ("product-updates", True),
            ("newsletter", True),
        ]
        assert item(local, f"SUB#{email}", "PROFILE")["topics_in"]["SS"] == ["newsletter"]  # type: ignore[index]
        error = await tools.error("subscriber_topics_update", email=email, off=["casino"])
        assert "'casino'" in error

        pending = await tools.call("signups_pending", limit=1000)
        assert {p["email"]: p for p in pending["pending"]} == pending_of(local)
        assert waiting in {p["email"] for p in pending["pending"]}
        assert await tools.call("stats", signups=True) == signup_counts(local)

    run_session(local, body)
