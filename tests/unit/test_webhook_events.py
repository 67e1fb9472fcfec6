"""The webhook event catalog, filters and the mapping from change-stream records to events."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
from boto3.dynamodb.types import TypeSerializer

from shared.core.errors import InvalidInput
from shared.webhooks import events

SER = TypeSerializer()


def record(
    name: str, old: dict[str, Any] | None = None, new: dict[str, Any] | None = None, rid: str = "r1"
) -> dict:
    body: dict[str, Any] = {"ApproximateCreationDateTime": 1_790_000_000, "Keys": {}}
    if old is not None:
        body["OldImage"] = {k: SER.serialize(v) for k, v in old.items()}
    if new is not None:
        body["NewImage"] = {k: SER.serialize(v) for k, v in new.items()}
    return {"eventID": rid, "eventName": name, "dynamodb": body}


def item(sk: str, **fields: Any) -> dict[str, Any]:
    """An item of ann@example.com's partition."""
    return {"PK": "SUB#ann@example.com", "SK": sk, **fields}


def profile(**fields: Any) -> dict[str, Any]:
    return item("PROFILE", email="ann@example.com", version=2, **fields)


def types(rec: dict) -> list[str]:
    return [e.type for e in events.from_stream_record(rec)]


def test_filters_accept_types_families_and_star_and_name_the_field() -> None:
    assert events.parse_filters("subscriber.*, email.bounced,email.bounced") == (
        "subscriber.*",
        "email.bounced",
    )
    assert events.parse_filters(["*"]) == ("*",)
    for bad in ("", "subscriber", "nope.*", "email.bounce", "sub#scriber.created"):
        with pytest.raises(InvalidInput) as raised:
            events.parse_filters(bad)
        assert raised.value.problems[0].field == "events"


def test_matching_by_type_family_and_star() -> None:
    assert events.matches(("subscriber.*",), "subscriber.deleted")
    assert not events.matches(("subscriber.*",), "email.sent")
    assert events.matches(("email.sent",), "email.sent")
    assert events.matches(("*",), "broadcast.completed")


def test_every_family_has_a_source() -> None:
    assert set(events.FAMILIES) == {"subscriber", "topic", "email", "sequence", "broadcast", "reputation"}


def test_profile_transitions() -> None:
    assert types(record("INSERT", new=profile(status="subscribed"))) == ["subscriber.created"]
    assert types(record("REMOVE", old=profile(status="subscribed"))) == ["subscriber.deleted"]
    unsub = record("MODIFY", old=profile(status="subscribed"), new=profile(status="unsubscribed"))
    assert types(unsub) == ["subscriber.unsubscribed"]
    resub = record("MODIFY", old=profile(status="unsubscribed"), new=profile(status="subscribed"))
    assert types(resub) == ["subscriber.resubscribed"]
    tagged = record(
        "MODIFY", old=profile(status="subscribed"), new=profile(status="subscribed", tags={"pro"})
    )
    (updated,) = events.from_stream_record(tagged)
    assert updated.type == "subscriber.updated" and updated.data == {
        "email": "ann@example.com",
        "changed": ["tags"],
        "version": 2,
    }
    topics = record(
        "MODIFY",
        old=profile(topics_in={"news"}),
        new=profile(topics_in={"news", "product"}, topics_out={"offers"}),
    )
    found = events.from_stream_record(topics)
    assert [(e.type, e.data["topic"]) for e in found] == [
        ("topic.opted_in", "product"),
        ("topic.opted_out", "offers"),
    ]
    assert len({e.id for e in found}) == 2
    # a write that changes nothing a webhook tells (updated_at only) is no event
    assert types(record("MODIFY", old=profile(updated_at="a"), new=profile(updated_at="b"))) == []


def test_payloads_carry_no_more_personal_data_than_the_event_needs() -> None:
    rec = record("INSERT", new=profile(status="subscribed", first_name="Ann", attributes={"plan": "pro"}))
    (created,) = events.from_stream_record(rec)
    body = json.loads(created.body())
    assert body == {
        "id": created.id,
        "type": "subscriber.created",
        "version": 1,
        "timestamp": "2026-09-21T14:13:20.000Z",
        "data": {"email": "ann@example.com", "status": "subscribed", "version": 2},
    }
    assert "Ann" not in created.body() and "plan" not in created.body()


def test_send_log_executions_suppression_and_timeline() -> None:
    sent = item(
        "SENT#2026#onboarding#s1", template="onboarding/welcome", source="onboarding", ses_message_id="m-1"
    )
    (email_sent,) = events.from_stream_record(record("INSERT", new=sent))
    assert email_sent.type == "email.sent" and email_sent.data["message_id"] == "m-1"
    exec_item = item("EXEC#onboarding", execution_arn="arn")
    assert types(record("INSERT", new=exec_item)) == ["sequence.started"]
    assert types(record("REMOVE", old=exec_item)) == ["sequence.exited"]
    assert types(record("REMOVE", old={**exec_item, "ended": "completed"})) == ["sequence.completed"]
    # the inverse partner of the pair is no second event
    assert types(record("INSERT", new={"PK": "EXEC#onboarding", "SK": "SUB#ann@example.com"})) == []
    supp = item("SUPPRESSION", reason="bounce")
    (suppressed,) = events.from_stream_record(record("INSERT", new=supp))
    assert suppressed.data == {"email": "ann@example.com", "reason": "bounce"}
    click = item(
        "EVT#2026#click#x",
        type="click",
        link="https://acme.test/a",
        ses_message_id="m-1",
        user_agent="UA",
        ip="1.2.3.4",
    )
    (clicked,) = events.from_stream_record(record("INSERT", new=click))
    assert clicked.type == "email.clicked" and clicked.data["link"] == "https://acme.test/a"
    assert "ip" not in clicked.data and "user_agent" not in clicked.data
    bounce = item("EVT#2026#bounce#x", type="bounce", bounce_type="Permanent")
    assert types(record("INSERT", new=bounce)) == ["email.bounced"]
    for kind, expected in (
        ("delivery", "email.delivered"),
        ("complaint", "email.complained"),
        ("open", "email.opened"),
    ):
        assert types(record("INSERT", new={"PK": "SUB#a@b.c", "SK": f"EVT#t#{kind}#x", "type": kind})) == [
            expected
        ]
    prefetch = {
        "PK": "SUB#a@b.c",
        "SK": "EVT#t#open#y",
        "type": "open",
        "machine": "mpp",
        "ses_message_id": "m",
    }
    (machine_open,) = events.from_stream_record(record("INSERT", new=prefetch))
    assert machine_open.data["machine"] == "mpp"
    (person_open,) = events.from_stream_record(record("INSERT", new={**prefetch, "machine": None}))
    assert "machine" not in person_open.data
    confirmed = {"PK": "SUB#a@b.c", "SK": "EVT#t#subscriber.confirmed#x", "type": "subscriber.confirmed"}
    assert types(record("INSERT", new=confirmed)) == ["subscriber.confirmed"]
    assert (
        types(
            record(
                "INSERT",
                new={"PK": "SUB#a@b.c", "SK": "EVT#t#purchase.completed#x", "type": "purchase.completed"},
            )
        )
        == []
    )


def test_broadcast_started_and_completed() -> None:
    base = {"PK": "BROADCAST", "SK": "2026#b1", "id": "b1", "template": "news/monthly", "round": 1}
    started = record("MODIFY", old={**base, "status": "scheduled"}, new={**base, "status": "resolving"})
    assert types(started) == ["broadcast.started"]
    assert types(record("INSERT", new={**base, "status": "resolving"})) == ["broadcast.started"]
    done = record(
        "MODIFY", old={**base, "status": "sending"}, new={**base, "status": "done", "sent": 3, "failed": 0}
    )
    (completed,) = events.from_stream_record(done)
    assert completed.type == "broadcast.completed" and completed.data["sent"] == 3
    counters = record(
        "MODIFY", old={**base, "status": "sending", "sent": 1}, new={**base, "status": "sending", "sent": 2}
    )
    assert types(counters) == []


def test_reputation_paused_and_resumed_only_when_paused_flips() -> None:
    base = {"PK": "REPUTATION", "SK": "ConfigurationSet", "configuration_set": "mailstep"}
    paused = {
        **base,
        "paused": True,
        "paused_at": "2026-11-27T10:00:00.000Z",
        "alarm": "a",
        "threshold": Decimal("0.04"),
    }
    (event,) = events.from_stream_record(record("INSERT", new=paused))
    assert event.type == "reputation.paused"
    assert event.data == {
        "configuration_set": "mailstep",
        "alarm": "a",
        "threshold": 0.04,
        "paused_at": "2026-11-27T10:00:00.000Z",
    }
    resumed = {**paused, "paused": False, "resumed_at": "2026-11-27T11:00:00.000Z", "forced": True}
    assert types(record("MODIFY", old=paused, new=resumed)) == ["reputation.resumed"]
    assert types(record("MODIFY", old=paused, new={**paused, "reason": "again"})) == []


def test_the_same_record_gives_the_same_event_ids_a_different_one_others() -> None:
    rec = record("INSERT", new=profile(status="subscribed"))
    assert events.from_stream_record(rec) == events.from_stream_record(json.loads(json.dumps(rec)))
    other = record("INSERT", new=profile(status="subscribed"), rid="r2")
    assert events.from_stream_record(rec)[0].id != events.from_stream_record(other)[0].id


def test_without_a_stream_time_the_item_time_keeps_the_event_id_and_time_stable() -> None:
    rec = record("INSERT", new=profile(status="subscribed", updated_at="2026-11-01T10:00:00.000Z"))
    del rec["dynamodb"]["ApproximateCreationDateTime"]
    first, again = events.from_stream_record(rec), events.from_stream_record(rec)
    assert first == again and first[0].timestamp == "2026-11-01T10:00:00.000Z"
