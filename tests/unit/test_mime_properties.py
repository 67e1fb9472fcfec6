"""MIME headers cannot be injected and round-trip: property tests with hostile input."""

from __future__ import annotations

from email import policy
from email.header import decode_header, make_header
from email.parser import BytesParser
from email.utils import parseaddr

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.core.errors import InvalidInput
from shared.sending.mime import Envelope, build_message, clean_header_text, to_bytes

HOSTILE = st.sampled_from(
    [
        "\r\n",
        "\n",
        "\r",
        "\rBcc: evil@x.test",
        "\r\nBcc: evil@x.test\r\n",
        "\x00",
        "\t",
        "\u2028",
        "\u0085",
        '"',
        "'",
        "<",
        ">",
        ",",
        ";",
        ":",
        "\\",
        "=?utf-8?q?x?=",
        "=?",
        "?=",
        "é",
        "中文",
        "🙂",
        " ",
        "  ",
    ]
)
TEXT = st.lists(st.one_of(st.text(min_size=0, max_size=40), HOSTILE), max_size=12).map("".join)
LONG = st.text(min_size=200, max_size=1200)
ASCII = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=300)
BASE = {
    "From",
    "To",
    "Reply-To",
    "Subject",
    "Date",
    "Message-ID",
    "X-Mailstep-Send-Id",
    "MIME-Version",
    "Content-Type",
}
LIST = {"List-Unsubscribe", "List-Unsubscribe-Post", "List-Id"}


def _parse(raw: bytes):
    return BytesParser(policy=policy.default).parsebytes(raw)


def _display_name(raw: bytes, header: str) -> str:
    """The display name decoded as RFC 2047 section 6.2 says (whitespace between adjacent
    encoded words is ignored). ``email.header`` follows it; the modern address parser
    joins adjacent encoded words in a phrase with a space, so it is not the reference."""
    value = BytesParser(policy=policy.compat32).parsebytes(raw, headersonly=True)[header]
    name, _ = parseaddr(value)
    return str(make_header(decode_header(name)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    subject=st.one_of(TEXT, LONG, ASCII),
    from_name=st.one_of(TEXT, ASCII),
    to_name=st.one_of(TEXT, ASCII),
    attribute=TEXT,
    marketing=st.booleans(),
)
def test_hostile_values_parse_back_to_the_same_values_with_no_extra_headers(
    subject, from_name, to_name, attribute, marketing
):
    envelope = Envelope(
        from_email="hello@acme.test",
        from_name=from_name,
        to_email="jane@example.com",
        to_name=to_name,
        reply_to="Help <help@acme.test>",
        subject=f"{subject} {attribute}",
        send_id="send-1",
        unsubscribe_url="https://api.acme.test/u/" + "A" * 300 if marketing else None,
        unsubscribe_mailto="mailto:unsub@acme.test?subject=unsubscribe" if marketing else None,
        list_id="onboarding.acme.test" if marketing else None,
        list_name="onboarding",
    )
    raw = to_bytes(build_message(envelope, text=f"hi {attribute}", html=f"<p>{attribute}</p>"))
    msg = _parse(raw)

    assert set(msg.keys()) == (BASE | LIST if marketing else BASE)
    assert all(len(msg.get_all(name)) == 1 for name in msg.keys())  # noqa: SIM118 - Message, not dict
    assert all(len(line) <= 998 for line in raw.split(b"\r\n"))
    assert msg["Subject"] == clean_header_text(f"{subject} {attribute}", 989)
    assert _display_name(raw, "From") == clean_header_text(from_name, 200)
    assert msg["From"].addresses[0].addr_spec == "hello@acme.test"
    assert _display_name(raw, "To") == clean_header_text(to_name, 200)
    assert [a.addr_spec for a in msg["To"].addresses] == ["jane@example.com"]
    assert [part.get_content_type() for part in msg.iter_parts()] == ["text/plain", "text/html"]
    if marketing:
        assert msg["List-Unsubscribe"] == (
            "<https://api.acme.test/u/" + "A" * 300 + ">, <mailto:unsub@acme.test?subject=unsubscribe>"
        )
        assert msg["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"


@given(st.text(max_size=300))
def test_clean_header_text_leaves_no_line_breaks_or_controls(value):
    cleaned = clean_header_text(value)
    assert not any(c in cleaned for c in "\r\n\x00\x85\u2028\u2029\t")
    assert cleaned == cleaned.strip() and "  " not in cleaned and "=?" not in cleaned


@pytest.mark.parametrize(
    "bad",
    [
        {"to_email": "a@b.test\r\nBcc: x@y.test"},
        {"from_email": "hello@acme.test>"},
        {"unsubscribe_url": "https://x.test/u/a>\r\nBcc: x@y.test"},
        {"unsubscribe_url": "http://x.test/u/a"},
        {"unsubscribe_url": "https://x.test/u/a b"},
        {"send_id": "a\r\nb"},
        {"list_id": "x y.test", "unsubscribe_url": None},
        {"reply_to": "Help <help@acme.test>\r\nBcc: x@y.test"},
    ],
)
def test_invalid_addresses_urls_and_ids_are_refused(bad):
    fields = {
        "from_email": "hello@acme.test",
        "to_email": "jane@example.com",
        "subject": "s",
        "send_id": "s1",
        "unsubscribe_url": "https://x.test/u/a",
        **bad,
    }
    with pytest.raises(InvalidInput):
        build_message(Envelope(**fields), text="t", html="<p>t</p>")


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.1:8787", "localhost", "localhost:8443", "x.test"])
def test_list_unsubscribe_needs_https_on_every_host_loopback_included(host):
    fields = {
        "from_email": "hello@acme.test",
        "to_email": "jane@example.com",
        "subject": "s",
        "send_id": "s1",
    }
    msg = build_message(Envelope(**fields, unsubscribe_url=f"https://{host}/u/a"), text="t", html="<p>t</p>")
    assert msg["List-Unsubscribe"] == f"<https://{host}/u/a>"
    assert msg["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    for envelope in (
        Envelope(**fields, unsubscribe_url=f"http://{host}/u/a"),
        Envelope(**fields, unsubscribe_url=f"https://{host}/u/a", unsubscribe_mailto=f"http://{host}/u/b"),
    ):
        with pytest.raises(InvalidInput):
            build_message(envelope, text="t", html="<p>t</p>")
