"""SES event-publishing records (the documented format) parse into typed events."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shared.engagement import ses_events
from shared.engagement.ses_events import Bounce, Click, MalformedEvent, parse_body

FIXTURES = Path(__file__).parent / "fixtures" / "ses"
ALL = sorted(p.stem for p in FIXTURES.glob("*.json"))


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def sns(record: dict, message_id: str = "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324") -> str:
    return json.dumps(
        {
            "Type": "Notification",
            "MessageId": message_id,
            "TopicArn": "arn:aws:sns:us-east-1:123456789012:mailstep-ses-events",
            "Message": json.dumps(record),
            "Timestamp": "2017-08-05T00:41:03.000Z",
            "SignatureVersion": "1",
        }
    )


def test_there_is_one_fixture_per_documented_event_type() -> None:
    assert len(ALL) == 10
    assert {fixture(n)["eventType"] for n in ALL} == set(ses_events.EVENT_TYPES)


@pytest.mark.parametrize("name", ALL)
def test_every_fixture_parses_raw_and_inside_an_sns_envelope(name: str) -> None:
    record = fixture(name)
    raw = parse_body(json.dumps(record))
    wrapped = parse_body(sns(record))
    kind = ses_events.EVENT_TYPES[record["eventType"]][2]
    assert raw.kind == wrapped.kind == kind
    assert raw.sns_message_id is None
    assert wrapped.sns_message_id == "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324"
    assert raw.mail.message_id == record["mail"]["messageId"]
    assert raw.recipients() == ["recipient@example.com"]
    assert raw.timestamp.endswith("Z") and len(raw.timestamp) == 24
    # identity ignores the envelope: the same SES event is the same whichever way it came
    assert raw.identity("recipient@example.com") == wrapped.identity("recipient@example.com")


def test_type_objects_are_typed() -> None:
    bounce = parse_body(json.dumps(fixture("bounce")))
    assert isinstance(bounce.detail, Bounce) and bounce.permanent_bounce
    assert bounce.detail.bounced_recipients[0].diagnostic_code == "smtp; 550 5.1.1 user unknown"
    assert bounce.timestamp == "2017-08-05T00:41:02.669Z"  # the bounce's time, not the send's
    click = parse_body(json.dumps(fixture("click")))
    assert isinstance(click.detail, Click) and click.detail.link.startswith("http://docs.aws")
    send = parse_body(json.dumps(fixture("send")))
    assert send.timestamp == "2016-10-14T05:02:16.645Z"  # no own timestamp: the mail's
    assert send.mail.tag("template") == "onboarding_swelcome"


def test_a_transient_bounce_is_not_permanent() -> None:
    record = fixture("bounce")
    record["bounce"]["bounceType"] = "Transient"
    assert not parse_body(json.dumps(record)).permanent_bounce


def test_distinct_events_of_one_mail_have_distinct_identities() -> None:
    first = fixture("open")
    second = fixture("open")
    second["open"]["timestamp"] = "2017-08-09T22:05:00.000Z"
    a, b = parse_body(json.dumps(first)), parse_body(json.dumps(second))
    assert a.identity("recipient@example.com") != b.identity("recipient@example.com")


def test_an_unknown_event_type_parses_without_a_kind() -> None:
    record = fixture("send")
    record["eventType"] = "SomethingNew"
    event = parse_body(json.dumps(record))
    assert event.kind is None and event.event_type == "SomethingNew"


def test_identity_feedback_notifications_use_notification_type() -> None:
    record = fixture("bounce")
    record["notificationType"] = record.pop("eventType")
    assert parse_body(json.dumps(record)).kind == "bounce"


@pytest.mark.parametrize(
    "body",
    [
        "{not json",
        "[1, 2]",
        json.dumps({"eventType": "Open", "open": {}}),  # no mail
        json.dumps({"mail": fixture("open")["mail"]}),  # no eventType
        json.dumps({**fixture("open"), "mail": {"timestamp": "2017-08-09T21:59:49.927Z"}}),  # no messageId
        json.dumps({**fixture("bounce"), "bounce": {"bouncedRecipients": []}}),  # no bounceType
        json.dumps({k: v for k, v in fixture("click").items() if k != "click"}),  # no click object
        json.dumps({**fixture("open"), "open": {"timestamp": "yesterday"}}),  # bad timestamp
        json.dumps({"Type": "Notification", "MessageId": "m", "Message": "{broken"}),
    ],
)
def test_malformed_records_raise(body: str) -> None:
    with pytest.raises(MalformedEvent):
        parse_body(body)
