"""A/B tests: the decision rule, the split and the variants, the request's validation and the
``broadcast.ab_decided`` event (shared.broadcasts.abtest, ops.broadcast_requests)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from boto3.dynamodb.types import TypeSerializer

from ops.broadcast_requests import ab_request, broadcast_request, rest_request
from shared.broadcasts.abtest import AbTest, decide, in_test, variant_of
from shared.broadcasts.model import Broadcast
from shared.core.errors import InvalidInput
from shared.webhooks import events

AT = "2026-11-28T10:00:00.000Z"
EMAILS = [f"reader{i}@example.com" for i in range(2000)]


def settings_of(min_sample: int = 10, variants: int = 2) -> AbTest:
    return AbTest.model_validate(
        {
            "variants": [{"template": f"news/{letter}"} for letter in "abcde"[:variants]],
            "share": 20,
            "metric": "clicks",
            "decide_after_s": 3600,
            "min_sample": min_sample,
            "rest_id": "t1-rest",
        }
    )


def test_the_higher_rate_wins() -> None:
    decision = decide(settings_of(), [50, 50], [5, 12], decided_at=AT)
    assert (decision.winner, decision.reason) == ("B", "higher_rate")
    assert [(v.delivered, v.engaged, v.rate) for v in decision.variants] == [(50, 5, 0.1), (50, 12, 0.24)]


def test_the_rate_not_the_count_decides() -> None:
    decision = decide(settings_of(), [100, 20], [10, 5], decided_at=AT)  # 10% against 25%
    assert decision.winner == "B"


def test_a_tie_goes_to_the_first_of_the_tied() -> None:
    assert decide(settings_of(), [40, 40], [4, 4], decided_at=AT).model_dump(
        include={"winner", "reason"}
    ) == {
        "winner": "A",
        "reason": "tie",
    }
    three = decide(settings_of(variants=3), [40, 40, 40], [1, 6, 6], decided_at=AT)
    assert (three.winner, three.reason) == ("B", "tie")


def test_a_too_small_sample_gives_the_first_variant() -> None:
    decision = decide(settings_of(min_sample=50), [60, 49], [1, 40], decided_at=AT)
    assert (decision.winner, decision.reason) == ("A", "too_small_sample")
    nothing = decide(settings_of(), [0, 0], [0, 0], decided_at=AT)
    assert (nothing.winner, nothing.reason, nothing.variants[0].rate) == ("A", "too_small_sample", 0.0)


def test_the_split_is_deterministic_and_near_its_share() -> None:
    tested = [e for e in EMAILS if in_test("t1", e, 20)]
    assert tested == [e for e in EMAILS if in_test("t1", e, 20)]  # the same readers every time
    assert 320 <= len(tested) <= 480  # 20% of 2000, give or take
    assert tested != [e for e in EMAILS if in_test("t2", e, 20)]  # another test, another draw
    letters = [variant_of("t1", e, 2) for e in tested]
    assert letters == [variant_of("t1", e, 2) for e in tested]
    assert 0.35 <= letters.count(0) / len(letters) <= 0.65
    assert in_test("t1", "Reader1@Example.com ", 20) == in_test("t1", "reader1@example.com", 20)


def base_request(**extra: Any) -> Any:
    return broadcast_request(template="news/a", subject="Hello", broadcast_id="t1", tags=["news"], **extra)


def ab(**changes: Any) -> Any:
    options: dict[str, Any] = {
        "variants": ["subject=Spring sale", "template=news/b"],
        "test_share": 20,
        "metric": "clicks",
        "decide_after": "4h",
        "min_sample": 50,
    }
    return ab_request(base_request(), **(options | changes))


def test_the_request_names_its_variants_and_its_rest() -> None:
    request = ab()
    assert request.ab is not None and request.audience.split is not None
    assert [(v.template, v.subject) for v in request.ab.variants] == [
        ("news/a", "Spring sale"),
        ("news/b", "Hello"),
    ]
    assert (request.template, request.subject) == ("news/a", "Spring sale")  # variant A
    assert request.audience.split.side == "test" and request.audience.tags == ("news",)
    assert (request.ab.share, request.ab.metric, request.ab.decide_after_s) == (20, "clicks", 4 * 3600)
    both = ab(variants=["template=news/b,subject=Hi, you", "subject=Hey"])
    assert [(v.template, v.subject) for v in both.ab.variants] == [("news/b", "Hi, you"), ("news/a", "Hey")]


def test_the_rest_is_the_same_audience_minus_the_test_at_the_decision_time() -> None:
    request = ab()
    record = Broadcast(
        id="t1",
        sk="x",
        template=request.template,
        subject=request.subject,
        audience=request.audience,
        status="resolving",
        created_at=AT,
        ab=request.ab,
    )
    rest = rest_request(record)
    assert rest.id == "t1-rest" and rest.audience.split is not None
    assert rest.audience.split.side == "rest" and rest.audience.tags == ("news",)
    assert rest.at is not None and rest.at.isoformat().startswith("2026-11-28T14:00:00")
    assert all(rest.audience.split.keeps(e) != request.audience.split.keeps(e) for e in EMAILS)


@pytest.mark.parametrize(
    ("changes", "option"),
    [
        ({"variants": ["subject=only one"]}, "--variant"),
        ({"variants": ["subject=x"] * 6}, "--variant"),
        ({"variants": ["subject=Same", "subject=Same"]}, "--variant"),
        ({"variants": ["colour=red", "subject=x"]}, "--variant"),
        ({"variants": ["template=NOT A KEY", "subject=x"]}, "--variant"),
        ({"variants": ["subject=", "subject=x"]}, "--variant"),
        ({"test_share": 0}, "--test-share"),
        ({"test_share": 95}, "--test-share"),
        ({"test_share": None}, "--test-share"),
        ({"metric": "sends"}, "--metric"),
        ({"decide_after": "5m"}, "--decide-after"),
        ({"decide_after": "9d"}, "--decide-after"),
        ({"decide_after": "soon"}, "--decide-after"),
        ({"decide_after": None}, "--decide-after"),
        ({"min_sample": 0}, "--min-sample"),
    ],
)
def test_every_bad_field_is_named(changes: dict[str, Any], option: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        ab(**changes)
    assert caught.value.message.startswith(option), caught.value.message


def test_the_decision_is_one_webhook_event_when_stored() -> None:
    ser = TypeSerializer()
    decision = decide(settings_of(), [50, 50], [5, 12], decided_at=AT).model_dump_json()
    base = {"PK": "BROADCAST", "SK": "2026#t1", "id": "t1", "template": "news/a", "status": "done"}

    def change(old: dict[str, Any], new: dict[str, Any]) -> list[events.WebhookEvent]:
        image = {"OldImage": {k: ser.serialize(v) for k, v in old.items()}}
        image["NewImage"] = {k: ser.serialize(v) for k, v in new.items()}
        body = {"ApproximateCreationDateTime": 1_790_000_000, "Keys": {}, **image}
        return events.from_stream_record({"eventID": "r1", "eventName": "MODIFY", "dynamodb": body})

    (event,) = change(base, {**base, "ab_decision": decision})
    assert event.type == "broadcast.ab_decided" and "broadcast.ab_decided" in events.EVENT_TYPES
    assert event.data["broadcast_id"] == "t1" and event.data["winner"] == "B"
    assert event.data["variants"] == json.loads(decision)["variants"]
    assert change({**base, "ab_decision": decision}, {**base, "ab_decision": decision, "sent": 1}) == []
