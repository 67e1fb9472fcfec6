"""The sign-up and confirm routes' real handlers on moto, as an attacker and a careless client
use them: the sign-up handler and page module (``functions/signup/handler.py``,
``shared/web/signup.py``) with the send queue in moto and the sender handler mailing what
was queued.

- A suppressed address (its SUPPRESSION item, profile or not) is never mailed: neither a
  sign-up's confirmation nor any other mail, even when its profile does not say so.
- A confirm link confirms only its own sign-up; a link past its own expiry is expired even
  while a newer sign-up of the address is pending; GET changes nothing; the consent records
  who confirmed (the handler passes the requester).
- One confirmation mail per mailbox per cooldown, whatever the spelling (Gmail's dots and
  googlemail.com too); over a domain's cap a sign-up is held (told, mailed later, once), over
  the held budget refused with "try again" (429); one client address is limited on its own.
- An erased address is not signed up again.
- Names refuse domains and invisible line and direction controls.
- Every sign-up makes the same AWS requests whatever the address's state.
Every refused request leaves both tables as they were.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email import policy
from email.parser import BytesParser
from typing import Any

import pytest

from local_aws.apigw import LambdaContext, http_api_event
from local_aws.provision import LocalResources
from shared.consent.held import held_domains, release
from shared.consent.record import ip_hash
from shared.core.aws import client
from shared.core.secrets import get_secret
from shared.engagement.suppression import Suppression, Suppressions
from shared.sending.jobs import SendJob, from_message
from shared.sending.pipeline import send
from shared.sending.tokens import TokenClaims, issue
from shared.store import keys
from shared.store.dynamo import key, values
from shared.store.pending import mailbox_key
from shared.store.subscribers import SubscriberStore
from tests.integration.conftest import operations, scan_all, sqs_record

MAIN, EVENTS = "mailstep-main", "mailstep-events"
PAGE_URL = "https://api.acme.test"
EMAIL = "reader@example.com"
IP = "198.51.100.23"
AGENT = "Mozilla/5.0 (X11; Linux x86_64) Hostile/1.0"


@pytest.fixture
def queue_url(resources: LocalResources) -> Iterator[str]:
    sqs = client("sqs")
    url = sqs.create_queue(QueueName="mailstep-send-hostile")["QueueUrl"]
    yield url
    sqs.delete_queue(QueueUrl=url)


@pytest.fixture
def handlers(
    resources: LocalResources, queue_url: str, outbox: list[Any], monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """The signup and sender handler modules, loaded with the resources' environment and the
    send queue."""
    for name, value in resources.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SEND_QUEUE_URL", queue_url)
    monkeypatch.setenv("DEFAULT_FROM", "Acme <hello@acme.test>")
    monkeypatch.setenv("PUBLIC_BASE_URL", PAGE_URL)
    return {
        name: importlib.reload(importlib.import_module(f"functions.{name}.handler"))
        for name in ("signup", "sender")
    }


@pytest.fixture
def secret(resources: LocalResources) -> str:
    return get_secret(resources.secrets["unsubscribe_secret"])


def call(
    module: Any,
    method: str,
    path: str,
    body: str | None = None,
    content_type: str = "application/json",
    source_ip: str = IP,
) -> tuple[int, str]:
    return respond(module, method, path, body, content_type, source_ip)[:2]


def respond(
    module: Any, method: str, path: str, body: str | None, content_type: str, source_ip: str = IP
) -> tuple[int, str, dict[str, str]]:
    headers = {"content-type": content_type, "user-agent": AGENT}
    event = http_api_event(method, path, body=body, headers=headers, source_ip=source_ip)
    response = module.handler(event, LambdaContext("signup"))
    return response["statusCode"], response.get("body") or "", response.get("headers") or {}


def sign_up(handlers: dict[str, Any], source_ip: str = IP, **fields: Any) -> tuple[int, dict[str, Any]]:
    body = json.dumps({"email": EMAIL, **fields})
    status, text = call(handlers["signup"], "POST", "/v1/signup", body, source_ip=source_ip)
    return status, json.loads(text)


def queued(url: str) -> list[dict[str, Any]]:
    """Take every message off the send queue."""
    sqs, found = client("sqs"), []
    while batch := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
        found += batch
        for message in batch:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    return found


def deliver(handlers: dict[str, Any], url: str) -> list[SendJob]:
    """The sender handler consumes what the sign-ups queued (as its event source mapping
    hands it over); the jobs it got."""
    messages = queued(url)
    if messages:
        event = {"Records": [sqs_record(m["Body"], "mailstep-send-hostile") for m in messages]}
        answer = handlers["sender"].handler(event, LambdaContext("sender"))
        assert answer == {"batchItemFailures": []}
    return [from_message(m["Body"]) for m in messages]


def mails_to(outbox: list[Any], email: str) -> list[Any]:
    return [m for m in outbox if any(email in d for d in m.destinations)]


def confirm_path(message: Any) -> str:
    parsed = BytesParser(policy=policy.default).parsebytes(message.raw_data.encode())
    html = parsed.get_body(("html",)).get_content()
    found = re.findall(r'href="https://api\.acme\.test(/c/[A-Za-z0-9_-]+)"', html)
    assert len(set(found)) == 1, found
    return str(found[0])


def tables() -> list[dict[str, Any]]:
    """Both tables, but the per-client-address counters (every sign-up counts one for its
    client, whatever its address; no address in it)."""
    return [i for i in scan_all(MAIN) + scan_all(EVENTS) if not str(i.get("PK", "")).startswith(SOURCE_PK)]


SOURCE_PK = "SIGNUP#SOURCE#"


ANSWER = {
    "status": "accepted",
    "confirmation": True,
    "message": "Thanks! Check your inbox and click the link to confirm.",
}


# ----- fault 1: suppression is an address fact --------------------------------------------------
def test_a_sign_up_of_an_address_known_only_by_its_suppression_answers_alike_and_mails_nothing(
    handlers: dict[str, Any], queue_url: str, outbox: list[Any], store: SubscriberStore
) -> None:
    # Given an address whose only record is its SUPPRESSION item (its mail bounced)
    Suppressions(store).suppress(
        Suppression(EMAIL, "bounce", "Permanent/General", "2026-03-01T00:00:00.000Z")
    )
    before = tables()
    assert [i["SK"] for i in before if i["PK"] == keys.sub_pk(EMAIL)] == [keys.SUPPRESSION]

    # When anyone signs it up, twice
    answers = [sign_up(handlers, first_name="Ada") for _ in range(2)]
    deliver(handlers, queue_url)

    # Then the answer is every sign-up's, nothing is written and nothing is mailed
    assert answers == [(200, ANSWER)] * 2
    assert tables() == before
    assert mails_to(outbox, EMAIL) == []


@pytest.mark.parametrize("transactional", [True, False])
def test_a_send_to_a_subscriber_whose_suppression_item_exists_is_skipped(
    store: SubscriberStore, send_ctx: Any, outbox: list[Any], transactional: bool
) -> None:
    # Given a subscribed profile that does not say suppressed (a subscribe raced the bounce)
    store.upsert(EMAIL)
    Suppressions(store).suppress(Suppression(EMAIL, "complaint", "abuse", "2026-03-01T00:00:00.000Z"))
    client("dynamodb").update_item(
        TableName=MAIN,
        Key=key(keys.sub_pk(EMAIL), keys.PROFILE),
        UpdateExpression="SET suppressed = :no",
        ExpressionAttributeValues=values(no=False),
    )
    assert store.get_profile(EMAIL).suppressed is False  # type: ignore[union-attr]

    job = SendJob(email=EMAIL, template="welcome", source="onboarding", step="w", transactional=transactional)
    outcome = send(job, send_ctx)

    assert (outcome.status, outcome.reason) == ("skipped", "suppressed")
    assert outbox == []


# ----- fault 4 and issue 22: a link confirms only its own sign-up -------------------------------
def test_an_old_link_does_not_confirm_a_newer_sign_up_and_says_so(
    handlers: dict[str, Any], queue_url: str, outbox: list[Any], store: SubscriberStore
) -> None:
    # Given a reader who confirmed with link T1, then unsubscribed
    sign_up(handlers, first_name="Ada")
    deliver(handlers, queue_url)
    (first,) = mails_to(outbox, EMAIL)
    old_link = confirm_path(first)
    assert call(handlers["signup"], "POST", old_link, "", "application/x-www-form-urlencoded")[0] == 200
    store.unsubscribe(EMAIL)
    # and a bot that signs the address up again with another name once the cooldown passed
    _age_cooldown(EMAIL)
    assert sign_up(handlers, first_name="Bot")[0] == 200
    deliver(handlers, queue_url)
    pending = _pending(EMAIL)
    assert pending is not None and pending["first_name"] == "Bot"
    before = tables()

    # When the old link is posted (and shown)
    posted = call(handlers["signup"], "POST", old_link, "", "application/x-www-form-urlencoded")
    shown = call(handlers["signup"], "GET", old_link)

    # Then the bot's sign-up is not confirmed, nothing is written, and the page says why
    for status, page in (posted, shown):
        assert status == 400 and "This link was replaced" in page, page[:2000]
    assert tables() == before
    assert store.get_profile(EMAIL).status == "unsubscribed"  # type: ignore[union-attr]


def test_a_link_past_its_own_expiry_is_expired_while_a_newer_sign_up_is_pending(
    handlers: dict[str, Any], queue_url: str, secret: str, store: SubscriberStore
) -> None:
    # Given a live pending sign-up
    sign_up(handlers, first_name="Ada")
    jobs = deliver(handlers, queue_url)
    signup_id = jobs[0].step.removeprefix("confirm-")
    before = tables()
    # and links that expired an hour ago: one naming that very sign-up, one an earlier one
    past = datetime.now(UTC) - timedelta(days=2)
    expired = [
        issue(
            TokenClaims(email=EMAIL, source="signup", send_id=sid, purpose="confirm"),
            secret,
            ttl_seconds=86400 - 3600,
            now=past.timestamp(),
        )
        for sid in (signup_id, "0" * 32)
    ]

    for token in expired:
        for method in ("POST", "GET"):
            status, page = call(
                handlers["signup"], method, f"/c/{token}", "", "application/x-www-form-urlencoded"
            )
            # Then each answers "expired" and confirms nothing
            assert status == 400 and "This link has expired" in page, page[:2000]
    assert tables() == before
    assert store.get_profile(EMAIL) is None


def test_get_of_a_confirm_link_changes_nothing_and_post_records_who_confirmed(
    handlers: dict[str, Any], queue_url: str, outbox: list[Any], store: SubscriberStore, secret: str
) -> None:
    sign_up(handlers, first_name="Ada")
    deliver(handlers, queue_url)
    (mail,) = mails_to(outbox, EMAIL)
    link = confirm_path(mail)
    before = tables()

    # A link scanner's GET (twice) shows the page and writes nothing
    for _ in range(2):
        status, page = call(handlers["signup"], "GET", link)
        assert status == 200 and "<form" in page
    assert tables() == before

    # The reader's POST confirms, with who confirmed recorded
    status, page = call(handlers["signup"], "POST", link, "", "application/x-www-form-urlencoded")
    assert status == 200
    profile = store.get_profile(EMAIL)
    assert profile is not None and profile.status == "subscribed" and profile.consent is not None
    assert profile.consent["ip_hash"] == ip_hash(IP, secret)
    assert profile.consent["user_agent"] == AGENT


# ----- fault 10: one mailbox, many spellings; a cap per domain ----------------------------------
def test_variants_of_one_mailbox_get_one_confirmation_mail_per_cooldown(
    handlers: dict[str, Any], queue_url: str, outbox: list[Any]
) -> None:
    variants = ["Reader@example.com", "READER@example.com", "reader+a@example.com", "ReAdEr+win@example.com"]
    answers = [sign_up(handlers, email=v) for v in variants + [EMAIL]]
    deliver(handlers, queue_url)

    assert answers == [(200, ANSWER)] * len(answers)
    assert len(outbox) == 1
    assert {mailbox_key(v) for v in variants} == {EMAIL}


def test_dot_and_googlemail_spellings_of_one_gmail_mailbox_get_one_confirmation_mail(
    handlers: dict[str, Any], queue_url: str, outbox: list[Any]
) -> None:
    variants = [
        "a.d.a.reader@gmail.com",
        "Ada.Reader@googlemail.com",
        "adareader+x@gmail.com",
        "A.DAREADER@gmail.com",
    ]
    assert {mailbox_key(v) for v in variants} == {"adareader@gmail.com"}
    answers = [sign_up(handlers, email=v) for v in variants]
    deliver(handlers, queue_url)

    assert answers == [(200, ANSWER)] * len(answers)
    assert len(outbox) == 1
    assert len(mails_to(outbox, "a.d.a.reader@gmail.com")) == 1  # mailed as the reader typed it
    assert _pending("a.d.a.reader@gmail.com") is not None  # stored as typed: only the cooldown key folds


def test_over_a_domains_cap_a_sign_up_is_held_told_and_mailed_once_then_try_later(
    handlers: dict[str, Any], queue_url: str, outbox: list[Any], store: SubscriberStore
) -> None:
    # Given a domain whose cap (3) is spent this hour, with one held place (the budget above it)
    pages = handlers["signup"].pages
    handlers["signup"].pages = _with_config(pages, domain_cap_per_hour=3, domain_held_per_hour=1)
    for i in range(3):
        assert sign_up(handlers, email=f"m{i}@catch-all.test") == (200, ANSWER)
    deliver(handlers, queue_url)
    assert len(outbox) == 3
    store.upsert("known@catch-all.test")  # a subscribed reader of the domain

    # When a reader of the domain signs up: held, and the answer says so (a known address of the
    # domain gets the very same answer)
    known, held = (
        sign_up(handlers, email="known@catch-all.test"),
        sign_up(handlers, email="reader@catch-all.test"),
    )
    assert held[0] == 200 and held[1]["status"] == "held" and "delayed" in held[1]["message"], held
    assert "catch-all.test" in held[1]["message"] and held[1]["mail_by"]
    assert known[0] == 200 and known[1].keys() == held[1].keys() and known[1]["status"] == "held"
    # its job waits on the queue (delayed), nothing is mailed now
    assert deliver(handlers, queue_url) == [] and len(outbox) == 3
    pending = _pending("reader@catch-all.test")
    assert pending is not None and "held_at" in pending
    # the held budget (1) is spent too: the next reader is asked to try again, nothing written
    before = tables()
    status, text, headers = respond(
        handlers["signup"],
        "POST",
        "/v1/signup",
        json.dumps({"email": "late@catch-all.test"}),
        "application/json",
    )
    assert status == 429 and json.loads(text)["status"] == "try_later" and int(headers["Retry-After"]) > 0
    assert tables() == before
    # another domain is not held back
    assert sign_up(handlers, email="other@example.com") == (200, ANSWER)
    deliver(handlers, queue_url)
    assert len(outbox) == 4

    # The operator sees the domain held and releases it: the reader is mailed once, however
    # often the release runs (and the delayed job later sends nothing more)
    ctx = handlers["signup"].pages.ctx
    [domain] = held_domains(ctx.pending)
    assert (domain.domain, domain.held, domain.waiting) == ("catch-all.test", 1, 1)
    assert release(ctx, "catch-all.test") == 1
    deliver(handlers, queue_url)
    assert len(mails_to(outbox, "reader@catch-all.test")) == 1
    assert release(ctx, "catch-all.test") == 0  # mailed: nothing waits any more
    assert held_domains(ctx.pending)[0].waiting == 0
    # both held sign-ups' jobs wait, delayed (the known address's finds no sign-up: no mail)
    delayed = {job.email: job for job in (from_message(b) for b in _delayed_bodies(queue_url))}
    assert set(delayed) == {"reader@catch-all.test", "known@catch-all.test"}
    assert send(delayed["known@catch-all.test"], ctx.send).reason == "no_signup"
    job = delayed["reader@catch-all.test"]
    outcome = send(job, ctx.send)  # the delayed job, delivered twice
    assert outcome.status == "skipped" and outcome.reason == "already_sent"
    assert send(job, ctx.send).reason == "already_sent"
    assert len(mails_to(outbox, "reader@catch-all.test")) == 1


def test_one_client_address_is_limited_on_its_own(
    handlers: dict[str, Any], queue_url: str, outbox: list[Any]
) -> None:
    handlers["signup"].pages = _with_config(handlers["signup"].pages, source_cap_per_hour=2)
    assert sign_up(handlers, email="a@flood.test") == (200, ANSWER)
    assert sign_up(handlers, email="b@flood.test") == (200, ANSWER)
    before = tables()
    status, answer = sign_up(handlers, email="c@flood.test")
    assert status == 429 and answer["status"] == "try_later" and "network" in answer["message"]
    assert tables() == before and _pending("c@flood.test") is None
    # a reader elsewhere (another sourceIp) is not held back by the flooding machine
    assert sign_up(handlers, source_ip="203.0.113.9", email="c@flood.test") == (200, ANSWER)
    deliver(handlers, queue_url)
    assert len(outbox) == 3


# ----- fault 13: erase is final -----------------------------------------------------------------
def test_an_erased_address_is_not_signed_up_again(
    handlers: dict[str, Any], queue_url: str, outbox: list[Any], store: SubscriberStore
) -> None:
    store.upsert(EMAIL, first_name="Ada")
    store.erase(EMAIL)
    store.remember_erased(EMAIL)
    before = tables()

    answer = sign_up(handlers, first_name="Ada")
    deliver(handlers, queue_url)

    assert answer == (200, ANSWER)
    assert tables() == before
    assert outbox == []


# ----- fault 12: names --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name",
    [
        "Win cash at evil.com/win now",
        "evil.com",
        "visit bit.ly",
        "Ada\u0085Eve",
        "Ada\u2028Eve",
        "Ada\u2029Eve",
        "Ada\u202eEve",
        "Ada\u202aEve",
        "Ada\u2066Eve",
        "Ada\u2069Eve",
        "Ada\u200eEve",
        "Ada\u200fEve",
    ],
)
def test_a_name_with_a_domain_or_an_invisible_control_is_refused_naming_it(
    handlers: dict[str, Any], queue_url: str, name: str
) -> None:
    before = tables()
    status, answer = sign_up(handlers, first_name=name)
    assert status == 400 and answer["error"]["field"] == "first_name", answer
    assert tables() == before and queued(queue_url) == []


@pytest.mark.parametrize("name", ["J.R.R. Tolkien", "Anne-Marie O'Neil", "José", "Dr. Ada"])
def test_plain_names_with_dots_and_accents_are_accepted(handlers: dict[str, Any], name: str) -> None:
    assert sign_up(handlers, first_name=name) == (200, ANSWER)


# ----- fault 9: the same requests whatever the address's state ----------------------------------
def test_every_sign_up_makes_the_same_requests_whatever_the_address_state(
    handlers: dict[str, Any], queue_url: str, store: SubscriberStore
) -> None:
    states = {
        "new": "new@example.com",
        "subscribed": "subscribed@example.com",
        "suppressed": "suppressed@example.com",
        "cooldown": "cooldown@example.com",
        "erased": "erased@example.com",
    }
    store.upsert(states["subscribed"])
    Suppressions(store).suppress(Suppression(states["suppressed"], "bounce", "x", "2026-03-01T00:00:00.000Z"))
    sign_up(handlers, email=states["cooldown"])
    store.remember_erased(states["erased"])
    queued(queue_url)

    made = {}
    for state, email in states.items():
        with operations() as calls:
            assert sign_up(handlers, email=email) == (200, ANSWER)
        made[state] = calls
    assert made["new"] == ["UpdateItem", "BatchGetItem", "TransactWriteItems", "SendMessageBatch"], made
    assert all(calls == made["new"] for calls in made.values()), made


# ----- helpers ----------------------------------------------------------------------------------
def _pending(email: str) -> dict[str, Any] | None:
    return next(
        (i for i in scan_all(MAIN) if i["PK"] == keys.sub_pk(email) and i["SK"] == keys.PENDING), None
    )


def _age_cooldown(email: str) -> None:
    """The mailbox's cooldown window passed (its last confirmation mail two hours back)."""
    client("dynamodb").update_item(
        TableName=MAIN,
        Key=key(keys.signup_mailbox_pk(mailbox_key(email)), keys.COOLDOWN),
        UpdateExpression="SET last_mail_at = last_mail_at - :two_hours",
        ExpressionAttributeValues=values(two_hours=7200),
    )


def _with_config(pages: Any, **config: int) -> Any:
    from dataclasses import replace

    ctx = pages.ctx
    return replace(pages, ctx=replace(ctx, config=replace(ctx.config, **config)))


def _delayed_bodies(url: str) -> list[str]:
    """The bodies of the messages still delayed on the queue (moto keeps them out of receives:
    read its queue directly)."""
    from moto.sqs.models import sqs_backends

    name = url.rsplit("/", 1)[1]
    for backend in sqs_backends.values():
        for region in backend.values():
            queue = region.queues.get(name)
            if queue is not None:
                return [m.body for m in queue._messages if m.delayed]
    return []
