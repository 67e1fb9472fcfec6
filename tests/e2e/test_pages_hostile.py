"""The preference centre's promises under what browsers and mail clients really send, through
HTTP on the local runtime (the deployed shape: bundled asset, template routes and IAM).

- The reader's choice is the button they pressed: the page's "Unsubscribe from everything"
  form, parsed from the rendered page and posted as a browser posts it, unsubscribes from
  everything even on a topic mail's page; RFC 8058's one-click sent as multipart/form-data
  (which the RFC allows) on a topic link leaves only the topic.
- Erase is final: after a GDPR erase, every form of the page the reader still has open, and
  the mail's one-click link, write nothing naming the erased address.

Each mail is real: a topic broadcast through the CLI, its links read from the delivered mail.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Any

import pytest

from tests.e2e.conftest import Local
from tests.e2e.helpers import (
    EVENTS,
    FORM,
    MAIN,
    add_contact,
    events_of,
    eventually,
    item,
    link,
    messages,
    ok_json,
    ops,
    request,
    scan_all,
    unique,
    unsubscribe_targets,
)
from tests.forms import submission

TEMPLATE = "newsletter/monthly"
TOPIC = "product-updates"  # topics.yaml: default on
EVERYTHING = "Unsubscribe from everything"  # the page's button
READERS = ("page-form", "multipart", "erased")


# ----- what browsers and mail clients send ------------------------------------------------------
def press(local: Local, page_url: str, html: str, button_text: str) -> tuple[int, str]:
    """Press a button of the page as a browser does (``tests.forms.submission``)."""
    url, body = submission(page_url, html, button_text)
    status, _, answer = request(url, "POST", body, FORM, context=local.ssl_context())
    return status, answer


def multipart_one_click(local: Local, url: str) -> int:
    """RFC 8058's one-click as a mail client may send it: multipart/form-data, one part."""
    boundary = "----mailclient7MA4YWxkTrZu0gW"
    body = (
        f"--{boundary}\r\n"
        'Content-Disposition: form-data; name="List-Unsubscribe"\r\n'
        "\r\n"
        "One-Click\r\n"
        f"--{boundary}--\r\n"
    )
    content_type = f"multipart/form-data; boundary={boundary}"
    return request(url, "POST", body, content_type, context=local.ssl_context())[0]


def urlencoded_one_click(local: Local, url: str) -> int:
    return request(url, "POST", "List-Unsubscribe=One-Click", FORM, context=local.ssl_context())[0]


# ----- one topic broadcast gives every test its reader and mail ---------------------------------
@dataclass
class Reader:
    email: str
    mail: EmailMessage
    page_url: str  # the footer's /u/ link (what the reader opens)
    one_click_url: str  # List-Unsubscribe's https target (what the mail client posts to)


@pytest.fixture(scope="module")
def readers(local: Local) -> dict[str, Reader]:
    run = unique("pages")
    emails = {role: f"{role}-{run}@example.com" for role in READERS}
    for email in emails.values():
        add_contact(local, email, tags=[run])
    answer = ops(
        local, "broadcast", "send", "--template", TEMPLATE, "--tag", run, "--topic", TOPIC, "--id", run,
        "--yes", timeout=150,
    )  # fmt: skip
    assert answer.returncode == 0, answer.stdout + answer.stderr
    assert ok_json(ops(local, "broadcast", "get", run))["sent"] == len(READERS)
    found: dict[str, Reader] = {}
    for meta, mail in messages(local, run):
        (to,) = meta["destination"]
        role = next(r for r, e in emails.items() if e == to)
        found[role] = Reader(to, mail, link(local, meta, "/u/"), unsubscribe_targets(mail)[0])
    assert set(found) == set(READERS)
    return found


def _profile(local: Local, email: str) -> tuple[str, set[str], set[str]]:
    profile = item(local, f"SUB#{email}", "PROFILE")
    assert profile is not None, f"no profile for {email}"
    return (
        profile["status"]["S"],
        set(profile.get("topics_in", {}).get("SS", [])),
        set(profile.get("topics_out", {}).get("SS", [])),
    )


def _kinds(local: Local, email: str) -> list[str]:
    return sorted(e["type"] for e in events_of(local, email) if e["type"] not in ("send", "delivery"))


# ----- fault 2: the page's "Unsubscribe from everything" on a topic mail ------------------------
def test_unsubscribe_from_everything_on_a_topic_mails_page_leaves_everything(
    local: Local, readers: dict[str, Reader]
) -> None:
    reader = readers["page-form"]
    ctx = local.ssl_context()
    status, _, html = request(reader.page_url, context=ctx)
    assert status == 200 and EVERYTHING in html, html[:2000]

    # The reader presses the button (twice: a double click or a retried post is harmless).
    for _ in range(2):
        status, page = press(local, reader.page_url, html, EVERYTHING)
        assert status == 200 and "You are unsubscribed" in page, page[:2000]

    assert _profile(local, reader.email)[0] == "unsubscribed"  # everything, not only the topic
    unsubscribes = [e for e in events_of(local, reader.email) if e["type"] == "unsubscribe"]
    assert [e["origin"] for e in unsubscribes] == ["form"], unsubscribes  # once, from the page
    assert "topic_unsubscribe" not in _kinds(local, reader.email)


# ----- fault 3: RFC 8058 one-click as multipart/form-data on a topic link -----------------------
def test_multipart_one_click_on_a_topic_link_leaves_only_the_topic(
    local: Local, readers: dict[str, Reader]
) -> None:
    reader = readers["multipart"]
    assert multipart_one_click(local, reader.one_click_url) == 200
    assert multipart_one_click(local, reader.one_click_url) == 200  # a client's retry

    assert _profile(local, reader.email) == ("subscribed", set(), {TOPIC})
    left = [e for e in events_of(local, reader.email) if e["type"] == "topic_unsubscribe"]
    assert [(e["origin"], e["topic"]) for e in left] == [("one_click", TOPIC)], left
    assert "unsubscribe" not in _kinds(local, reader.email)


# ----- fault 13: erase is final on the page's paths ---------------------------------------------
def test_after_erase_no_form_or_one_click_of_an_old_link_writes_anything(
    local: Local, readers: dict[str, Reader]
) -> None:
    reader = readers["erased"]
    ctx = local.ssl_context()
    # The reader's open tabs: the preference page, and the "you are unsubscribed" page (with its
    # "Subscribe again" form) after pressing "Unsubscribe from everything".
    status, _, preferences = request(reader.page_url, context=ctx)
    assert status == 200
    status, unsubscribed = press(local, reader.page_url, preferences, EVERYTHING)
    assert status == 200 and "Subscribe again" in unsubscribed

    def mentions() -> list[dict[str, Any]]:
        return [i for t in (MAIN, EVENTS) for i in scan_all(local, t) if reader.email in json.dumps(i)]

    def delivered() -> bool:  # the broadcast's SES delivery event is recorded (none in flight)
        return any(i.get("type", {}).get("S") == "delivery" for i in mentions())

    eventually(delivered, 60, "the broadcast mail's delivery event", interval_s=0.2)
    erased = ops(local, "subscribers", "delete", reader.email, "--yes", "--json")
    assert erased.returncode == 0, erased.stderr
    # What is left naming the address after the erase (the broadcast's audience page, not an
    # item of the subscriber) must stay exactly that.
    left = mentions()
    assert [i for i in left if i["PK"]["S"] == f"SUB#{reader.email}"] == []

    # Every form of the open pages, and the mail's one-click in both encodings, twice each.
    for _ in range(2):
        status, page = press(local, reader.page_url, preferences, EVERYTHING)
        assert status == 200 and "erased" in page and "Subscribe again" not in page, page[:2000]
        assert urlencoded_one_click(local, reader.one_click_url) == 200
        assert multipart_one_click(local, reader.one_click_url) == 200
        status, page = press(local, reader.page_url, preferences, "Save my choices")
        assert status == 404 and "We no longer hold your data" in page, page[:2000]
        status, page = press(local, reader.page_url, unsubscribed, "Subscribe again")
        assert status == 404 and "We no longer hold your data" in page, page[:2000]
    status, _, page = request(reader.page_url, context=ctx)
    assert status == 200 and "erased" in page and EVERYTHING not in page

    assert mentions() == left  # no profile, no event, nothing more naming the address
