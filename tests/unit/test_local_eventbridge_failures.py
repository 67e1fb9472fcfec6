"""The local runtime's asynchronous invocations of EventBridge targets: Lambda retries a function
error (the function's EventInvokeConfig), then sends an invocation record holding the event to the
on-failure destination; the grants check's arithmetic over the runtimes' IAM reports."""

from __future__ import annotations

from typing import Any

from local_aws.eventbridge import AsyncTarget, invoke_async
from tests.e2e.conftest import failure_only, unused_grants


def test_a_failing_target_is_retried_then_its_event_goes_to_the_on_failure_destination() -> None:
    calls: list[str] = []
    sent: list[tuple[str, str, dict[str, Any]]] = []

    def invoke(function: str, event: dict[str, Any]) -> bool:
        calls.append(function)
        return True  # always a function error

    event = {"detail-type": "Scheduled Event", "time": "2026-01-01T04:00:00Z"}
    target = AsyncTarget(attempts=3, on_failure="arn:aws:sqs:us-east-1:1:mailstep-hygiene-failures")
    errored = invoke_async(
        invoke,
        "mailstep-hygiene",
        event,
        target,
        function_arn="arn:fn",
        send_failure=lambda *a: sent.append(a),
    )
    assert errored and calls == ["mailstep-hygiene"] * 3
    ((function, destination, record),) = sent
    assert (function, destination) == ("mailstep-hygiene", target.on_failure)
    assert record["requestPayload"] == event  # the event itself: replayable as it is
    assert record["requestContext"]["condition"] == "RetriesExhausted"
    assert record["requestContext"]["approximateInvokeCount"] == 3


def test_a_target_that_recovers_sends_nothing() -> None:
    answers = iter([True, False])
    sent: list[Any] = []
    errored = invoke_async(
        lambda f, e: next(answers), "fn", {}, AsyncTarget(3, "arn:q"), send_failure=lambda *a: sent.append(a)
    )
    assert not errored and sent == []


def grant(
    action: str, resource: str = "arn:table/main", function: str = "mailstep-reputation-guard"
) -> dict[str, str]:
    return {"function": function, "action": action, "resource": resource}


def test_each_action_of_a_statement_must_be_used_on_its_own() -> None:
    # Given a role statement of four actions on one table, of which the code used two
    held = [
        grant(a) for a in ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query")
    ]
    run = {"grants": held, "unused_grants": held[:2]}
    # Then the two others are unused, whatever the statement's other actions did
    assert unused_grants([run]) == {
        ("mailstep-reputation-guard", "dynamodb:GetItem", "arn:table/main"),
        ("mailstep-reputation-guard", "dynamodb:PutItem", "arn:table/main"),
    }
    # a runtime that held no grants (no functions) does not hide them, as an intersection would
    assert unused_grants([run, {"grants": [], "unused_grants": []}]) == unused_grants([run])
    # and a runtime that did use one counts
    other = {"grants": held, "unused_grants": [held[1]]}
    assert unused_grants([run, other]) == {
        ("mailstep-reputation-guard", "dynamodb:PutItem", "arn:table/main")
    }


def test_only_the_on_failure_send_to_a_failure_queue_is_failure_only() -> None:
    queue = "arn:aws:sqs:us-east-1:123456789012:mailstep-webhook-stream-failures"
    assert failure_only(("mailstep-webhook-dispatch", "sqs:SendMessage", queue))
    # the dispatcher's own send to the webhook queue is not
    assert not failure_only(
        ("mailstep-webhook-dispatch", "sqs:SendMessage", queue.replace("-stream-failures", "s"))
    )
    assert not failure_only(("mailstep-api", "sqs:SendMessage", queue))
