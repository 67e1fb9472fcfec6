"""POST /v1/events through the real handler on moto: outcomes, idempotency, hostile input."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TypeVar

import pytest

from tests.integration.conftest import API_KEY, ApiClient, scan_all

MAIN, EVENTS = "mailstep-main", "mailstep-events"
T = TypeVar("T")


def ok(email: str = "ann@example.com", **extra: object) -> dict:
    return {"type": "subscriber.subscribed", "email": email, **extra}


def test_subscribe_creates_profile_tags_and_event(api: ApiClient, store) -> None:
    status, body = api.post(
        "/v1/events",
        ok(
            "  Ann@Example.COM ",
            first_name="Ann",
            tags=["pro", "beta"],
            attributes={"plan": "pro", "seats": 3},
        ),
    )
    assert status == 200
    result = body["results"][0]
    assert result["subscriber"] == "created" and result["status"] == "subscribed"
    assert result["tags_added"] == ["beta", "pro"]
    profile = store.get_profile("Ann@example.com")
    assert (
        profile is not None
        and profile.tags == {"pro", "beta"}
        and profile.attributes == {"plan": "pro", "seats": 3}
    )
    assert sorted(store.tag_members("pro")) == ["Ann@example.com"]
    events = store.list_events("Ann@example.com")
    assert [e["type"] for e in events] == ["subscriber.subscribed"]


def test_batch_outcomes_in_order_and_unsubscribe_is_sticky(api: ApiClient, store) -> None:
    status, body = api.post(
        "/v1/events",
        {
            "events": [
                ok("a@example.com", tags=["x"]),
                {"type": "subscriber.unsubscribed", "email": "a@example.com"},
                ok("a@example.com", tags={"add": ["y"], "remove": ["x"]}),
                {"type": "trial.started", "email": "b@example.com", "data": {"plan": "pro"}},
            ]
        },
    )
    assert status == 200
    results = body["results"]
    assert [r["index"] for r in results] == [0, 1, 2, 3]
    assert results[1]["status"] == "unsubscribed"
    # An upsert never clears "unsubscribed".
    assert results[2]["status"] == "unsubscribed" and results[2]["tags_removed"] == ["x"]
    assert store.get_profile("a@example.com").tags == {"y"}
    assert store.tag_members("x") == []
    assert results[3]["subscriber"] == "created"


def test_unsubscribe_of_unknown_address_remembers_the_opt_out(api: ApiClient, store) -> None:
    api.post("/v1/events", {"type": "subscriber.unsubscribed", "email": "new@example.com"})
    api.post("/v1/events", ok("new@example.com"))
    assert store.get_profile("new@example.com").status == "unsubscribed"


def test_retried_event_with_id_is_harmless(api: ApiClient, store) -> None:
    event = ok("c@example.com", tags=["t1"], id="evt-123")
    first = api.post("/v1/events", event)
    items_after_first = scan_all(MAIN) + scan_all(EVENTS)
    second = api.post("/v1/events", event)
    assert first[0] == second[0] == 200
    assert first[1]["results"][0]["replayed"] is False
    assert second[1]["results"][0]["replayed"] is True
    assert second[1]["results"][0]["subscriber"] == "created"
    assert scan_all(MAIN) + scan_all(EVENTS) == items_after_first
    assert len(store.list_events("c@example.com")) == 1


def test_reused_id_with_different_payload_is_a_conflict_and_changes_nothing(api: ApiClient, store) -> None:
    api.post("/v1/events", ok("d@example.com", tags=["a"], id="evt-9"))
    before = scan_all(MAIN) + scan_all(EVENTS)
    status, body = api.post("/v1/events", ok("d@example.com", tags=["b"], id="evt-9"))
    assert status == 409
    assert body["results"][0]["error"]["code"] == "conflict"
    assert scan_all(MAIN) + scan_all(EVENTS) == before


def test_unchanged_upsert_writes_nothing_but_the_event(api: ApiClient, store) -> None:
    api.post("/v1/events", ok("e@example.com", tags=["a"]))
    version = store.get_profile("e@example.com").version
    status, body = api.post("/v1/events", ok("e@example.com", tags=["a"]))
    assert body["results"][0]["subscriber"] == "unchanged"
    assert store.get_profile("e@example.com").version == version


LONG = "x" * 10_000
HOSTILE: list[tuple[str, object, bool, str]] = [
    # (case id, body, send raw text?, expected field or message fragment)
    ("malformed-json", '{"type": "x", "email": ', True, "body"),
    ("not-json-at-all", "hello", True, "body"),
    ("nan", '{"type":"x","email":"a@b.co","data":{"n":NaN}}', True, "body"),
    ("non-object-list", [1, 2], False, "body"),
    ("non-object-string", "just a string", False, "body"),
    ("non-object-null", None, False, "body"),
    ("empty-object", {}, False, "type"),
    ("missing-email", {"type": "subscriber.subscribed"}, False, "email"),
    ("missing-type", {"email": "a@example.com"}, False, "type"),
    ("invalid-email-no-at", ok("not-an-email"), False, "email"),
    ("invalid-email-two-at", ok("a@b@example.com"), False, "email"),
    ("invalid-email-space", ok("a b@example.com"), False, "email"),
    ("invalid-email-hash", ok("a#b@example.com"), False, "email"),
    ("invalid-email-no-domain-dot", ok("a@localhost"), False, "email"),
    ("email-wrong-type", ok(12345), False, "email"),
    ("type-wrong-type", {"type": 7, "email": "a@example.com"}, False, "type"),
    ("type-with-hash", {"type": "x#y", "email": "a@example.com"}, False, "type"),
    ("tag-with-hash", ok(tags=["a#b"]), False, "tags"),
    ("tag-with-space", ok(tags=["a b"]), False, "tags"),
    ("tag-uppercase", ok(tags=["Pro"]), False, "tags"),
    ("tags-wrong-type", ok(tags="pro"), False, "tags"),
    ("tags-add-and-remove", ok(tags={"add": ["a"], "remove": ["a"]}), False, "tags"),
    ("tags-unknown-op", ok(tags={"replace": ["a"]}), False, "tags"),
    ("first-name-crlf", ok(first_name="Ann\r\nBcc: evil@example.com"), False, "first_name"),
    ("first-name-wrong-type", ok(first_name=["Ann"]), False, "first_name"),
    ("first-name-too-long", ok(first_name="A" * 101), False, "first_name"),
    ("attribute-10k", ok(attributes={"bio": LONG}), False, "attributes"),
    ("attributes-200", ok(attributes={f"k{i}": i for i in range(200)}), False, "attributes"),
    (
        "attributes-depth-10",
        ok(attributes={"a": json.loads('{"b":' * 9 + "1" + "}" * 9)}),
        False,
        "attributes",
    ),
    ("attribute-reserved", ok(attributes={"email": "x@example.com"}), False, "attributes"),
    ("attribute-bad-name", ok(attributes={"bad-name": 1}), False, "attributes"),
    ("attributes-wrong-type", ok(attributes=["a"]), False, "attributes"),
    ("data-depth", ok(data=json.loads('{"a":' * 8 + "1" + "}" * 8)), False, "data"),
    (
        "data-depth-100000",
        '{"type":"x","email":"a@b.co","data":{"a":' + "[" * 99_000 + "]" * 99_000 + "}}",
        True,
        "body",
    ),
    ("attribute-infinity", '{"type":"x","email":"a@b.co","attributes":{"n":1e400}}', True, "attributes"),
    ("data-negative-infinity", '{"type":"x","email":"a@b.co","data":{"n":-1e400}}', True, "data"),
    ("data-infinity-literal", '{"type":"x","email":"a@b.co","data":{"n":Infinity}}', True, "body"),
    ("attribute-60-digit-integer", ok(attributes={"n": 10**59 + 7}), False, "attributes"),
    ("attribute-39-digit-integer", ok(attributes={"n": 10**38}), False, "attributes"),
    ("data-underflow", '{"type":"x","email":"a@b.co","data":{"n":1e-200}}', True, "data"),
    ("data-overflow", '{"type":"x","email":"a@b.co","data":{"n":1e200}}', True, "data"),
    ("data-nested-huge-number", ok(data={"a": [{"b": 10**45}]}), False, "data.a[0].b"),
    (
        "batch-second-event-unstorable",
        {"events": [ok("a@example.com"), ok("b@example.com", data={"n": 10**60})]},
        False,
        "events[1].data",
    ),
    ("unknown-top-level-key", ok(extra=1), False, "extra"),
    ("id-wrong-type", ok(id=123), False, "id"),
    ("id-too-long", ok(id="x" * 129), False, "id"),
    ("empty-batch", {"events": []}, False, "events"),
    ("batch-101", {"events": [ok(f"u{i}@example.com") for i in range(101)]}, False, "events"),
    ("batch-not-list", {"events": {"a": 1}}, False, "events"),
    ("batch-duplicate-ids", {"events": [ok(id="same"), ok("b@example.com", id="same")]}, False, "events"),
    ("batch-unknown-key", {"events": [ok()], "dry_run": True}, False, "dry_run"),
    (
        "batch-one-bad-among-good",
        {"events": [ok("a@example.com"), ok("bad"), ok("c@example.com")]},
        False,
        "events[1].email",
    ),
    # Names match as whole strings: "$" also matches before a final newline.
    ("tag-trailing-newline", ok(tags=["vip\n"]), False, "tags"),
    ("tag-removed-trailing-newline", ok(tags={"remove": ["vip\n"]}), False, "tags"),
    ("type-trailing-newline", {"type": "trial.started\n", "email": "a@example.com"}, False, "type"),
    ("attribute-name-trailing-newline", ok(attributes={"plan\n": "pro"}), False, "attributes"),
    ("id-trailing-newline", ok(id="evt-1\n"), False, "id"),
    # A domain IDNA 2008 cannot encode is refused, never folded into another one.
    ("email-domain-not-idna-2008", ok("ann@\u2603.net"), False, "email"),
    ("email-domain-zero-width-joiner", ok("ann@a\u200d.de"), False, "email"),
    # Per-subscriber limits hold on the profile the whole batch produces.
    (
        "batch-one-subscriber-30-plus-30-tags",
        {"events": [ok(tags=[f"a{i}" for i in range(30)]), ok(tags=[f"b{i}" for i in range(30)])]},
        False,
        "events[1].tags",
    ),
    (
        "batch-one-subscriber-30-plus-21-attributes",
        {
            "events": [
                ok(attributes={f"a{i}": i for i in range(30)}),
                ok(" ann@EXAMPLE.com ", attributes={f"b{i}": i for i in range(21)}),
            ]
        },
        False,
        "events[1].attributes",
    ),
    (
        "batch-one-subscriber-attributes-over-8-kib",
        {
            "events": [
                ok(
                    attributes={
                        "a": "x" * 900,
                        "b": "x" * 900,
                        "c": "x" * 900,
                        "d": "x" * 900,
                        "e": "x" * 900,
                    }
                ),
                ok(
                    attributes={
                        "f": "y" * 900,
                        "g": "y" * 900,
                        "h": "y" * 900,
                        "i": "y" * 900,
                        "j": "y" * 900,
                    }
                ),
            ]
        },
        False,
        "events[1].attributes",
    ),
    (
        "batch-limit-broken-by-the-last-event-only",
        {
            "events": [
                ok("b@example.com", tags=["x"]),
                ok(tags=[f"a{i}" for i in range(50)]),
                {"type": "trial.started", "email": "c@example.com"},
                ok(tags={"add": ["one-more"]}),
            ]
        },
        False,
        "events[3].tags",
    ),
]


@pytest.mark.parametrize(
    ("body", "raw", "field"), [(b, r, f) for _, b, r, f in HOSTILE], ids=[case for case, *_ in HOSTILE]
)
def test_hostile_body_gets_400_naming_the_problem_and_writes_nothing(
    api: ApiClient, body, raw, field
) -> None:
    status, response = api.post("/v1/events", body, raw=raw)
    assert status == 400, response
    error = response["error"]
    assert error["code"] == "invalid_request"
    assert field in error.get("field", "") or field in error["message"], error
    assert scan_all(MAIN) == [] and scan_all(EVENTS) == []


def test_numbers_dynamodb_can_hold_are_accepted(api: ApiClient, store) -> None:
    limits = {
        "zero": -0.0,
        "digits38": 10**38 - 1,
        "negative38": -(10**38 - 1),
        "big": 9.9e125,
        "tiny": 1e-130,
    }
    status, response = api.post("/v1/events", ok(attributes=limits))
    assert status == 200, response
    assert store.get_profile("ann@example.com").attributes["digits38"] == 10**38 - 1


@pytest.mark.parametrize(
    ("key", "headers"),
    [
        (None, None),
        ("wrong-key", None),
        ("", None),
        (None, {"authorization": "Basic dXNlcjpwYXNz"}),
        (None, {"authorization": "Bearer"}),
        ("test-api-key-0123456789x", None),
    ],
    ids=["missing", "wrong", "empty", "basic-scheme", "bearer-without-key", "longer-key"],
)
def test_missing_or_wrong_key_gets_401_and_writes_nothing(api: ApiClient, key, headers) -> None:
    status, response = api.post("/v1/events", ok(), key=key, headers=headers)
    assert status == 401
    assert response["error"]["code"] == "unauthorized"
    assert scan_all(MAIN) == [] and scan_all(EVENTS) == []


def test_oversize_body_gets_413_and_writes_nothing(api: ApiClient) -> None:
    body = {"events": [ok(f"u{i}@example.com", data={"blob": "y" * 4000}) for i in range(90)]}
    status, response = api.post("/v1/events", body)
    assert status == 413
    assert response["error"]["code"] == "payload_too_large"
    assert scan_all(MAIN) == [] and scan_all(EVENTS) == []


def test_unknown_route_is_404(api: ApiClient) -> None:
    status, response = api.post("/v1/nope", ok())
    assert status == 404


def test_contention_that_outlasts_the_retries_is_a_503_to_retry_and_the_retry_succeeds(
    api: ApiClient, store, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shared.store.subscribers
    from local_aws.apigw import LambdaContext, http_api_event
    from shared.store.dynamo import TransactionConflict

    def always_conflicting(client: object, actions: object) -> None:
        raise TransactionConflict("another writer won")

    body = json.dumps(ok(id="contended-1"))
    headers = {"content-type": "application/json", "authorization": f"Bearer {API_KEY}"}
    with monkeypatch.context() as patch:
        patch.setattr(shared.store.subscribers, "transact", always_conflicting)
        response = api.module.handler(
            http_api_event("POST", "/v1/events", body=body, headers=headers), LambdaContext("api")
        )
    assert response["statusCode"] == 503 and response["headers"]["Retry-After"] == "1"
    assert json.loads(response["body"])["error"]["code"] == "busy"
    assert store.get_profile("ann@example.com") is None  # nothing half-written

    status, answer = api.post("/v1/events", ok(id="contended-1"))  # the client retries as told

    assert status == 200 and answer["results"][0]["subscriber"] == "created"


def _tables() -> list[dict]:
    return scan_all(MAIN) + scan_all(EVENTS)


def test_per_subscriber_limits_hold_on_the_merged_profile_across_requests(api: ApiClient, store) -> None:
    # Given a subscriber at the limits: 50 attributes (sent over two requests) and 50 tags
    api.post("/v1/events", ok(attributes={f"a{i}": i for i in range(30)}, tags=[f"t{i}" for i in range(25)]))
    api.post("/v1/events", ok(attributes={f"b{i}": i for i in range(20)}, tags=[f"u{i}" for i in range(25)]))
    before = _tables()

    # When one more attribute, or one more tag, arrives in a request of its own
    attribute = api.post("/v1/events", ok(attributes={"one_more": 1}))
    tag = api.post("/v1/events", ok(tags=["one-more"]))

    # Then each is refused with a 400 naming its field (one event: the field itself), and nothing changed
    assert attribute[0] == 400 and attribute[1]["error"]["field"] == "attributes", attribute
    assert "at most 50 attributes" in attribute[1]["error"]["message"]
    assert tag[0] == 400 and tag[1]["error"]["field"] == "tags", tag
    assert _tables() == before
    # while a change that keeps the profile within its limits passes
    status, body = api.post("/v1/events", ok(attributes={"a0": None, "one_more": 1}, tags={"remove": ["t0"]}))
    assert status == 200 and body["results"][0]["subscriber"] == "updated"


def test_a_profile_cannot_grow_past_8_kib_and_a_refused_batch_writes_nothing(api: ApiClient, store) -> None:
    # Given a subscriber grown, request by request, to just under 8 KiB of attributes
    for i in range(8):
        status, _ = api.post("/v1/events", ok(attributes={f"note{i}": "n" * 990}))
        assert status == 200
    before = _tables()

    # When a batch would take it past the limit after writing another subscriber first
    status, body = api.post(
        "/v1/events",
        {"events": [ok("other@example.com", tags=["x"]), ok(attributes={"note8": "n" * 990})]},
    )

    # Then the whole batch is refused: a 400 naming the event's field, never a 500, nothing written
    assert status == 400, body
    assert body["error"]["field"] == "events[1].attributes"
    assert "8192 bytes" in body["error"]["message"]
    assert _tables() == before
    assert store.get_profile("other@example.com") is None


def test_a_profile_stored_past_a_limit_can_still_shrink_and_unsubscribe(api: ApiClient, store) -> None:
    # Given a profile written before the limits held (60 tags, stored as they were)
    from shared.core.aws import client
    from shared.store.dynamo import serialize
    from shared.store.subscribers import Profile

    legacy = Profile(email="ann@example.com", tags=frozenset(f"t{i}" for i in range(60)), version=1)
    client("dynamodb").put_item(TableName=MAIN, Item=serialize(legacy.to_item()))

    # When a change would grow it, it is refused; one that does not grow it passes
    grow = api.post("/v1/events", ok(tags=["t60"]))
    shrink = api.post("/v1/events", ok(tags={"remove": ["t0", "t1"]}))
    leave = api.post("/v1/events", {"type": "subscriber.unsubscribed", "email": "ann@example.com"})

    assert grow[0] == 400 and grow[1]["error"]["field"] == "tags"
    assert shrink[0] == 200 and leave[0] == 200
    profile = store.get_profile("ann@example.com")
    assert profile.status == "unsubscribed" and len(profile.tags) == 58


def test_a_concurrent_write_between_the_check_and_the_write_refuses_that_event_alone(
    api: ApiClient, store
) -> None:
    """The batch check reads every profile first; a writer that fills a profile's tags after that
    read makes the store refuse the event at write time. Events already written stay written and
    are reported; the refused one names its field in its result, never a 400 that wrote."""
    from shared.core.aws import register_hook, unregister_hook

    writer = {"done": False}

    def concurrent_writer(model: object, **_: object) -> None:  # after the batch's first write
        if getattr(model, "name", "") == "TransactWriteItems" and not writer["done"]:
            writer["done"] = True
            store.upsert("b@example.com", add_tags=[f"t{i}" for i in range(50)])

    register_hook("after-call", concurrent_writer)
    try:
        status, body = api.post(
            "/v1/events", {"events": [ok("a@example.com"), ok("b@example.com", tags=["late"])]}
        )
    finally:
        unregister_hook("after-call", concurrent_writer)

    assert status == 200, body
    first, second = body["results"]
    assert first["subscriber"] == "created"
    assert second["error"] == {
        "code": "invalid_request",
        "message": "a subscriber holds at most 50 tags (this makes 51)",
        "field": "events[1].tags",
    }
    assert "late" not in store.get_profile("b@example.com").tags
    assert [e["type"] for e in store.list_events("b@example.com")] == []


def _dynamodb_calls(api: ApiClient, body: dict) -> tuple[tuple[int, dict], list[str]]:
    """The answer to POST /v1/events with ``body``, and the DynamoDB operations it made."""
    return _counted(lambda: api.post("/v1/events", body))


def _counted(action: Callable[[], T]) -> tuple[T, list[str]]:
    """What ``action`` returns, and the DynamoDB operations it made."""
    from shared.core.aws import register_hook, unregister_hook

    calls: list[str] = []

    def count(model: object, **_: object) -> None:
        if getattr(getattr(model, "service_model", None), "service_name", "") == "dynamodb":
            calls.append(str(getattr(model, "name", "")))

    register_hook("after-call", count)
    try:
        answer = action()
    finally:
        unregister_hook("after-call", count)
    return answer, calls


def test_a_new_subscriber_alone_in_a_request_is_written_without_a_read(api: ApiClient, store) -> None:
    # When a new address subscribes in a request of its own
    (status, body), calls = _dynamodb_calls(api, ok(tags=["news"], attributes={"plan": "pro"}))

    # Then 1 DynamoDB request: the profile with its TAG# partner (its conditions stand for the
    # read: no profile, no SUPPRESSION item) and the event record, in one transaction
    assert status == 200 and body["results"][0]["subscriber"] == "created"
    assert calls == ["TransactWriteItems"]
    assert [e["type"] for e in store.list_events("ann@example.com")] == ["subscriber.subscribed"]
    assert store.tag_members("news") == ["ann@example.com"]
    assert not store.get_profile("ann@example.com").suppressed


def test_an_existing_subscriber_alone_in_a_request_is_merged_from_the_refused_write(
    api: ApiClient, store
) -> None:
    # Given a subscriber with a tag and an attribute
    api.post("/v1/events", ok(tags=["news"], attributes={"plan": "pro"}))

    # When the same address comes again in a request of its own, and the same event twice
    (status, body), calls = _dynamodb_calls(api, ok(tags=["beta"], attributes={"seats": 3}))
    again = api.post("/v1/events", ok(tags=["beta"], attributes={"seats": 3}))

    # Then the refused write brought the profile back (no read): merged onto it, TAG# in step
    assert status == 200 and body["results"][0]["subscriber"] == "updated"
    assert calls == ["TransactWriteItems", "TransactWriteItems"]  # the event record in the second
    profile = store.get_profile("ann@example.com")
    assert profile.tags == {"news", "beta"} and profile.attributes == {"plan": "pro", "seats": 3}
    assert profile.version == 2
    assert store.tag_members("news") == ["ann@example.com"] == store.tag_members("beta")
    # and the event delivered twice changes nothing more (recorded twice, as every event is)
    assert again[0] == 200 and again[1]["results"][0]["subscriber"] == "unchanged"
    assert store.get_profile("ann@example.com").version == 2
    assert len(store.list_events("ann@example.com")) == 3


def test_a_suppressed_address_subscribing_alone_starts_suppressed(api: ApiClient, store) -> None:
    # Given an address that bounced before it was a subscriber (its SUPPRESSION item)
    store.put_suppression({"email": "ann@example.com", "reason": "bounce"})

    # When it subscribes in a request of its own
    (status, body), calls = _dynamodb_calls(api, ok(tags=["news"]))

    # Then the write that assumed it new was refused by the SUPPRESSION check, and the profile
    # was created suppressed, with its TAG# partner
    assert status == 200 and body["results"][0]["subscriber"] == "created"
    assert calls == ["TransactWriteItems", "TransactWriteItems"]
    assert store.get_profile("ann@example.com").suppressed
    assert store.tag_members("news") == ["ann@example.com"]


def test_other_callers_of_ingest_read_first(store) -> None:
    """The sunset and replies apply one event at a time about existing subscribers: they read
    the profile first (a refused write would cost more than the read)."""
    from shared.core.models import EventBatch, InboundEvent
    from shared.web.ingest import IngestContext, ingest

    store.upsert("ann@example.com", add_tags=["news"])
    ctx = IngestContext(store=store, data_ttl_days=30)
    event = InboundEvent.model_validate({"type": "subscriber.unsubscribed", "email": "ann@example.com"})

    (result,), calls = _counted(lambda: ingest(EventBatch(events=[event]), ctx))

    assert result["status"] == "unsubscribed"
    assert calls == ["BatchGetItem", "TransactWriteItems"]  # the event record joins the profile's write
    # an event that changes nothing is recorded alone
    (_,), calls = _counted(lambda: ingest(EventBatch(events=[event]), ctx))
    assert calls == ["BatchGetItem", "PutItem"]
    assert [e["type"] for e in store.list_events("ann@example.com")] == ["subscriber.unsubscribed"] * 2
