"""The demo's consent chapter: a reader signs up from an HTML form, confirms from the mail,
leaves one topic on the preference page, and a broadcast on that topic skips her.

Everything goes through the runtime's public https front as a browser would send it (form
posts, links from the outbox); the broadcast through the same operator code as
``mailstep broadcast send``.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from typing import Any, TypeVar
from urllib.parse import urlencode

from demo.story import Demo, until

READER = "hedy@example.com"
TOPIC = "product-updates"  # topics.yaml: default on
FORM = "application/x-www-form-urlencoded"
T = TypeVar("T")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _browser(demo: Demo, url: str, form: list[tuple[str, str]] | None = None) -> tuple[int, str]:
    """GET ``url`` (or POST ``form`` to it) like a browser: (status, body); redirects not followed."""
    opener = urllib.request.build_opener(
        _NoRedirect, urllib.request.HTTPSHandler(context=demo.runtime.ssl_context())
    )
    data = urlencode(form).encode() if form is not None else None
    request = urllib.request.Request(  # noqa: S310 - the local https front
        url, data=data, headers={"content-type": FORM} if data else {}, method="POST" if data else "GET"
    )
    try:
        with opener.open(request, timeout=30) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


def _mail(demo: Demo, template: str) -> EmailMessage | None:
    """The reader's newest mail of ``template`` in the outbox."""
    from ops.outbox import read_outbox
    from shared.sending.sender import decode_tag_value

    found = [
        m
        for m in read_outbox(demo.runtime.outbox)
        if READER in m["destination"] and decode_tag_value(m["email_tags"].get("template", "")) == template
    ]
    if not found:
        return None
    raw = (demo.runtime.outbox / f"{found[-1]['message_id']}.eml").read_bytes()
    return BytesParser(policy=policy.default).parsebytes(raw)  # type: ignore[return-value]


def _link(message: EmailMessage, path: str) -> str:
    body = message.get_body(("html",))
    html = body.get_content() if body is not None else ""
    found = re.search(r'href="(https://[^"]+' + re.escape(path) + r'[^"]+)"', html)
    return found.group(1).replace("&amp;", "&") if found else ""


def _profile(demo: Demo) -> dict[str, Any]:
    table = demo.runtime.resources.tables["table_name"]
    found = demo.ddb().get_item(
        TableName=table, Key={"PK": {"S": f"SUB#{READER}"}, "SK": {"S": "PROFILE"}}, ConsistentRead=True
    )
    return dict(found.get("Item", {}))


def chapter_signup_topics(demo: Demo) -> None:
    demo.chapter("Sign-up from a form, double opt-in, a topic left on the preference page")
    public = demo.runtime.public_url
    form = [("email", READER), ("first_name", "Hedy"), ("topics", ""), ("topics", TOPIC)]
    form += [("topics", "newsletter"), ("form", "demo-footer")]
    status, page = _browser(demo, f"{public}/v1/signup", form)
    demo.console.print(f"  [green]{status}[/green] form post to /v1/signup: {'Check your inbox' in page=}")
    demo.expect(status == 200 and not _profile(demo), f"sign-up answered {status} or made a subscriber")

    confirm_mail = until(lambda: _mail(demo, "system/confirm"))
    demo.expect(confirm_mail is not None, "no confirmation mail in the outbox")
    if confirm_mail is None:
        return
    link = _link(confirm_mail, "/c/")
    demo.console.print(
        f"  confirmation mail {confirm_mail['Subject']!r}, link <{link[:48]}...>", highlight=False
    )
    status, _ = _browser(demo, link)
    demo.console.print(f"  [green]{status}[/green] GET of the link (a link scanner): still no subscriber")
    demo.expect(status == 200 and not _profile(demo), "GET on the confirm link changed something")
    status, _ = _browser(demo, link, [("confirm", "1")])
    profile = _profile(demo)
    consent = profile.get("consent", {}).get("M", {})
    demo.console.print(
        f"  [green]{status}[/green] POST confirms: {profile.get('status', {}).get('S')}, consent from "
        f"form {consent.get('form', {}).get('S')!r} recorded",
        highlight=False,
    )
    demo.expect(profile.get("status", {}).get("S") == "subscribed", "the confirm POST did not subscribe")

    welcome = until(lambda: _mail(demo, "welcome"))
    demo.expect(welcome is not None, "subscriber.confirmed did not start welcome-confirmed")
    if welcome is None:
        return
    preferences = _link(welcome, "/u/")
    demo.console.print("  welcome-confirmed sent 'welcome'; its footer links the preference page")
    status, page = _browser(demo, preferences)
    demo.expect(status == 200 and "Product updates" in page, f"the preference page answered {status}")
    status, _ = _browser(demo, f"{preferences}/preferences", [("topics", ""), ("topics", "newsletter")])
    profile = _profile(demo)
    left = sorted(profile.get("topics_out", {}).get("SS", []))
    demo.console.print(f"  [green]{status}[/green] saved with '{TOPIC}' unticked: topics_out = {left}")
    demo.expect(left == [TOPIC], f"topics_out is {left}")
    _topic_broadcast(demo)


def _topic_broadcast(demo: Demo) -> None:
    from shared.broadcasts.model import parse_request

    service = demo.broadcasts()
    request = parse_request(id="demo-updates", template="newsletter/monthly", audience={"topic": TOPIC})
    service.send(request)
    record = until(lambda: (r := service.get("demo-updates")) is not None and r.status == "done" and r)
    if not record:
        demo.expect(False, "the topic broadcast did not finish")
        return
    demo.console.print(
        f"  broadcast --topic {TOPIC} to everyone: sent {record.sent}, skipped {record.skipped}",
        highlight=False,
    )
    demo.expect(
        record.skipped.get("topic_opt_out", 0) >= 1 and _mail(demo, "newsletter/monthly") is None,
        f"the reader was not skipped: {record.public()}",
    )
