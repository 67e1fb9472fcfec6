"""Sending on the local runtime: send queue -> sender Lambda -> local SES outbox, and the
unsubscribe routes through the local https front (self-signed certificate, verified)."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest

from shared.core import specs
from shared.sending.jobs import SendJob
from tests.e2e.conftest import Local
from tests.e2e.helpers import (
    FORM,
    add_contact,
    eml,
    enqueue,
    eventually,
    messages,
    outbox,
    partition,
    post,
    profile_status,
    queue_url,
    receipt,
    request,
    settled,
    unsubscribe_targets,
)

ONE_CLICK = "List-Unsubscribe=One-Click"
# Copies of a job received at once: the one that finds another's claim in flight fails and comes
# back after the send queue's visibility timeout (360 s, specs.SEND_QUEUE), then finds the mail
# sent. These tests wait for every copy consumed (``settled``) before asserting one mail, so here
# a failed copy comes back after this instead; the sender it reaches is the same.
COPY_BACK_AFTER_S = 20


@pytest.fixture(scope="module", autouse=True)
def failed_copies_come_back_soon(local: Local) -> Any:
    """The session runtime's send queue hands a failed copy back after ``COPY_BACK_AFTER_S``
    during this file, and its own visibility timeout again afterwards."""
    sqs, url = local.client("sqs"), queue_url(local, specs.SEND_QUEUE.local_name)
    before = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout"])["Attributes"]
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": str(COPY_BACK_AFTER_S)})
    yield
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": before["VisibilityTimeout"]})


def _profile(local: Local, email: str, first_name: str = "Ada") -> None:
    add_contact(local, email, first_name=first_name)


def _sent_items(local: Local, email: str) -> list[dict[str, Any]]:
    return [i for i in partition(local, f"SUB#{email}") if i["SK"]["S"].startswith("SENT#")]


def _one_click(local: Local, url: str) -> tuple[int, str]:
    """The RFC 8058 one-click POST to ``url`` itself (the https front, trusting the runtime's
    certificate): (status, page)."""
    status, _, page = request(url, "POST", ONE_CLICK, FORM, local.ssl_context())
    return status, page


def test_a_job_delivered_three_times_sends_once_with_compliant_headers(local: Local):
    email, source = f"ada-{uuid.uuid4().hex[:8]}@example.com", f"e2e-{uuid.uuid4().hex[:8]}"
    _profile(local, email)
    job = SendJob(email=email, template="onboarding/welcome", source=source, step="welcome")

    enqueue(local, job, times=3)

    eventually(lambda: messages(local, source), what="the welcome mail in the outbox")
    settled(local)  # every copy consumed: the send queue holds none, visible or in flight
    found = messages(local, source)
    assert len(found) == 1 and len(_sent_items(local, email)) == 1
    meta, msg = found[0]
    assert meta["destination"] == [email] and meta["configuration_set"]
    assert (
        meta["email_tags"]["template"] == "onboarding_swelcome" and meta["email_tags"]["kind"] == "marketing"
    )
    assert msg["Subject"] == "Welcome aboard, Ada"
    url = unsubscribe_targets(msg)[0]
    assert local.public_url.startswith("https://127.0.0.1:") and url.startswith(local.public_url + "/u/")
    assert msg["List-Unsubscribe-Post"] == ONE_CLICK
    assert [p.get_content_type() for p in msg.iter_parts()] == ["text/plain", "text/html"]
    assert 'style="' in msg.get_body(("html",)).get_content()
    assert f"Unsubscribe ({url})" in msg.get_body(("plain",)).get_content()


def test_transactional_mail_reaches_unsubscribed_and_has_no_list_headers(local: Local):
    email, source = f"buyer-{uuid.uuid4().hex[:8]}@example.com", f"e2e-{uuid.uuid4().hex[:8]}"
    post(local, {"type": "subscriber.unsubscribed", "email": email})
    enqueue(local, receipt(email, source, "order-1"))
    enqueue(local, SendJob(email=email, template="onboarding/tips", source=source, step="tips"))
    eventually(lambda: messages(local, source), what="the receipt")
    settled(local)  # every copy consumed: the send queue holds none, visible or in flight
    found = messages(local, source)
    assert len(found) == 1  # the marketing mail was skipped: unsubscribed
    meta, msg = found[0]
    assert meta["email_tags"]["kind"] == "transactional"
    assert msg["List-Unsubscribe"] is None and msg["List-Unsubscribe-Post"] is None
    assert [p.get_content_type() for p in msg.iter_parts()] == ["text/plain", "text/html"]


def test_every_pipeline_message_in_the_outbox_follows_the_header_rules(local: Local):
    email, source = f"mixed-{uuid.uuid4().hex[:8]}@example.com", f"e2e-{uuid.uuid4().hex[:8]}"
    _profile(local, email)
    enqueue(local, SendJob(email=email, template="onboarding/welcome", source=source, step="welcome"))
    enqueue(local, receipt(email, source, "o2", order_id="A-2", total="$5"))
    eventually(lambda: len(messages(local, source)) == 2, what="a marketing and a transactional mail")

    checked = {"transactional": 0, "other": 0}
    for meta in outbox(local):
        tags = meta.get("email_tags", {})
        if "send_id" not in tags:  # not sent by the send pipeline
            continue
        msg = eml(local, meta)
        if tags["kind"] == "transactional":
            assert msg["List-Unsubscribe"] is None and msg["List-Unsubscribe-Post"] is None
            checked["transactional"] += 1
        else:
            one_click, *others = unsubscribe_targets(msg)
            assert one_click.startswith(local.public_url + "/u/"), one_click
            assert all(t.startswith(("https://", "mailto:")) for t in others), others
            assert msg["List-Unsubscribe-Post"] == ONE_CLICK
            checked["other"] += 1
        assert [p.get_content_type() for p in msg.iter_parts()] == ["text/plain", "text/html"]
        assert 'style="' in msg.get_body(("html",)).get_content()
    assert checked["transactional"] >= 1 and checked["other"] >= 1


def test_unsubscribe_link_get_changes_nothing_and_one_click_post_unsubscribes(local: Local):
    email, source = f"grace-{uuid.uuid4().hex[:8]}@example.com", f"e2e-{uuid.uuid4().hex[:8]}"
    _profile(local, email, "Grace")
    enqueue(local, SendJob(email=email, template="welcome", source=source, step="w"))
    meta, msg = eventually(lambda: messages(local, source), what="the welcome mail")[0]
    url = unsubscribe_targets(msg)[0]
    assert url.startswith(local.public_url + "/u/")

    status, _, page = request(url, context=local.ssl_context())
    assert status == 200 and "<form" in page and profile_status(local, email) == "subscribed"

    for _ in range(2):
        status, page = _one_click(local, url)
        assert status == 200 and "You are unsubscribed" in page
    assert profile_status(local, email) == "unsubscribed"

    tampered = url[:-3] + ("AAA" if not url.endswith("AAA") else "BBB")
    assert _one_click(local, tampered)[0] == 400


def test_the_https_front_is_verified_tls_with_the_runtime_certificate(local: Local):
    """Links are real https: trusted through the runtime's certificate, refused without it."""
    url = local.public_url + "/u/not-a-token"
    assert _one_click(local, url)[0] == 400  # reached the function through TLS
    untrusted = urllib.request.Request(url, data=ONE_CLICK.encode(), method="POST")  # noqa: S310
    with pytest.raises(urllib.error.URLError) as refused:
        urllib.request.urlopen(untrusted, timeout=10, context=ssl.create_default_context())  # noqa: S310
    assert isinstance(refused.value.reason, ssl.SSLCertVerificationError)
    plain = urllib.request.Request(url.replace("https://", "http://", 1), data=b"x", method="POST")  # noqa: S310
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen(plain, timeout=10)  # noqa: S310
    # the plain-http API port stays, for curl convenience, and the banner names both
    assert local.api_url.startswith("http://127.0.0.1:") and local.api_url != local.public_url
    log = (local.state_dir / "dev.log").read_text()
    assert local.public_url in log and local.state["tls_cert"] in log
