"""How the console writes numbers, times, internal keys and a subscriber's timeline for people
(``console.formatting``, ``ops.subscriber_view``), and the new-broadcast form's send time."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from starlette.datastructures import FormData

from console.formatting import ago, breakable, condition_words, num, tone, took, when, words
from console.pages import _at
from ops.subscriber_view import Mail, decoded_subject, summary, timeline
from shared.core.errors import InvalidInput

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def test_numbers_have_thousands_separators() -> None:
    assert [num(0), num(1234), num(1234567), num(None), num("n/a")] == ["0", "1,234", "1,234,567", "-", "n/a"]


def test_a_time_carries_its_zone_on_one_line_and_reads_from_now() -> None:
    shown = str(when("2026-12-10T09:30:00+00:00"))
    assert shown == '<time datetime="2026-12-10T09:30:00+00:00">2026-12-10 09:30 UTC</time>'
    assert "2026-12-10 08:30 UTC" in str(when("2026-12-10T09:30:00+01:00"))  # in UTC, whatever it came in
    assert when("") == "" and when(None) == ""
    assert ago("2026-12-10T12:00:00Z", now=NOW) == "in 12 days"
    assert ago("2026-11-28T09:00:00Z", now=NOW) == "3 hours ago"
    assert ago("2026-11-28T11:59:30Z", now=NOW) == "just now"
    start = "2026-11-28T10:00:00Z"
    assert [took(start, end) for end in ("2026-11-28T10:00:45Z", "2026-11-28T10:12:00Z")] == [
        "45 s",
        "12 min",
    ]
    assert (
        took(start, "2026-11-28T13:20:00Z") == "3 h 20 min"
        and took(start, "2026-11-30T14:00:00Z") == "2 days 4 h"
    )


def test_internal_keys_read_as_words_and_statuses_have_a_colour() -> None:
    assert words("topic_opt_out") == "opted out of the topic"
    assert words("paused_reputation") == "held by the reputation pause"
    assert words("some_new_key") == "some new key"
    assert (tone("done"), tone("failed"), tone("paused_reputation"), tone("x")) == (
        "tone-good",
        "tone-bad",
        "tone-warn",
        "tone-plain",
    )
    assert condition_words({"tag": "pro"}) == "tagged pro"
    assert condition_words({"all": [{"tag": "pro"}, {"not": {"opened": "news/x"}}]}) == (
        "(tagged pro and not opened news/x)"
    )
    assert condition_words({"attribute": "plan", "equals": "pro"}) == 'plan = "pro"'


def test_an_address_breaks_only_after_its_separators_and_stays_escaped() -> None:
    assert str(breakable("a.b@x-y.com")) == "a.<wbr>b@<wbr>x-<wbr>y.<wbr>com"
    assert str(breakable("<b>@x")) == "&lt;b&gt;@<wbr>x"


def test_encoded_subjects_are_decoded_and_plain_ones_kept() -> None:
    assert decoded_subject("=?utf-8?q?Gr=C3=BC=C3=9Fe_aus_K=C3=B6ln?=") == "Grüße aus Köln"
    assert decoded_subject("=?UTF-8?B?0J3QvtCy0L7RgdGC0Lg=?=") == "Новости"
    assert decoded_subject("Plain =? not encoded") == "Plain =? not encoded"
    assert decoded_subject("Grüße") == "Grüße"


def test_a_timeline_groups_events_per_mail_newest_first_with_a_summary() -> None:
    events = [
        {"type": "contact.created", "at": "2026-11-01T00:00:00Z"},
        {"type": "send", "at": "2026-11-02T00:00:00Z", "ses_message_id": "m1", "subject": "Hello",
         "template": "news/a", "source": "bc-1"},
        {"type": "delivery", "at": "2026-11-02T00:00:01Z", "ses_message_id": "m1",
         "subject": "=?utf-8?q?Hell=C3=B6?="},
        {"type": "open", "at": "2026-11-02T00:00:02Z", "ses_message_id": "m1", "machine": "mpp"},
        {"type": "open", "at": "2026-11-02T01:00:00Z", "ses_message_id": "m1"},
        {"type": "open", "at": "2026-11-02T02:00:00Z", "ses_message_id": "m1"},
        {"type": "click", "at": "2026-11-02T02:00:01Z", "ses_message_id": "m1", "link": "https://x.test/"},
        {"type": "delivery", "at": "2026-11-03T00:00:00Z", "ses_message_id": "m2",
         "subject": "=?utf-8?q?Gr=C3=BC=C3=9Fe?=", "template": "news/b"},
        {"type": "unsubscribe", "at": "2026-11-04T00:00:00Z", "reason": "topic_opt_out"},
    ]  # fmt: skip
    rows = timeline(events)
    assert [r.message_id if isinstance(r, Mail) else r["type"] for r in rows] == [
        "unsubscribe",
        "m2",
        "m1",
        "contact.created",
    ]
    second, first = rows[1], rows[2]
    assert isinstance(first, Mail) and isinstance(second, Mail)
    assert first.subject == "Hello" and first.at == "2026-11-02T00:00:00Z"  # the send log's subject
    assert second.subject == "Grüße"  # decoded from the event's header
    assert first.outcome() == [("delivery", 1, False), ("open", 3, False), ("click", 1, False)]
    assert first.links() == ["https://x.test/"]
    found = summary(events)
    assert (found.sent, found.opened, found.opens, found.clicks, found.machine) == (1, 1, 2, 1, 1)
    assert found.last_open == "2026-11-02T02:00:00Z"


def test_send_at_without_a_zone_is_the_browser_s_time_and_a_bad_offset_is_named() -> None:
    def at(**fields: str) -> str | None:
        return _at(FormData(list(fields.items())))

    assert at(at="") is None
    assert at(at="2026-12-10T09:30", tz_offset="60") == "2026-12-10T09:30:00+01:00"
    assert at(at="2026-12-10T09:30") == "2026-12-10T09:30:00+00:00"  # no script: UTC, as the page says
    assert at(at="2026-12-10T09:30:00Z", tz_offset="60") == "2026-12-10T09:30:00Z"  # a zone given wins
    with pytest.raises(InvalidInput) as raised:
        at(at="2026-12-10T09:30", tz_offset="9999")
    assert raised.value.problems[0].field == "tz_offset"
