"""The ``branch`` Task of a step-mail condition, through the sequence step Lambda's handler on
moto: ``{not: {opened: {step: welcome}}}`` sends the nudge unless a person opened the mail the
welcome step sent in this execution. Opens that do not count: a machine's (MPP), one of the same
step's mail in another execution, one of a mail of the same template from another source. The
Task delivered twice (a Lambda retry) sends one nudge at most."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from botocore.exceptions import ClientError

from local_aws.apigw import LambdaContext
from shared.core import clock
from shared.core.aws import client
from shared.sequences.compiler import compile_sequence
from shared.sequences.model import Sequence
from shared.sequences.schedules import SEND_TASK_SUCCESS_TARGET, at_expression, schedule_name
from shared.sequences.steps import send_once_step
from shared.store.subscribers import SubscriberStore
from tests.integration.conftest import handler_module

SEQUENCE = "nudge"
EMAIL = "ada@example.com"
EXECUTION = f"arn:aws:states:us-east-1:123456789012:execution:mailstep-seq-{SEQUENCE}:{SEQUENCE}-{'a' * 40}"
SCHEDULE_GROUP = "test-callbacks"
SCHEDULER_ROLE = "arn:aws:iam::123456789012:role/test-scheduler"
OTHER_EXECUTION = EXECUTION.replace("a" * 40, "b" * 40)
WELCOME, NUDGE = "onboarding/welcome", "onboarding/tips"

# what the subscriber's events hold -> whether the nudge goes
CASES: dict[str, tuple[list[dict[str, Any]], bool]] = {
    "a person opened this execution's welcome": (
        [{"source": SEQUENCE, "step": send_once_step("S1", EXECUTION)}],
        False,
    ),
    "no open": ([], True),
    "only Apple's proxy opened it": (
        [{"source": SEQUENCE, "step": send_once_step("S1", EXECUTION), "machine": "mpp"}],
        True,
    ),
    "a person opened the welcome of an earlier execution": (
        [{"source": SEQUENCE, "step": send_once_step("S1", OTHER_EXECUTION)}],
        True,
    ),
    "a person opened a broadcast of the same template": ([{"source": "b-spring", "step": "b-spring"}], True),
    "a person clicked, did not open": (
        [{"source": SEQUENCE, "step": send_once_step("S1", EXECUTION), "type": "click"}],
        True,
    ),
}


def branch_payload() -> dict[str, Any]:
    """The ``branch`` Task's parameters as the compiler writes them, filled as Step Functions does."""
    sequence = Sequence.model_validate(
        {
            "id": SEQUENCE,
            "trigger": "go",
            "steps": [
                {"send": WELCOME, "name": "welcome", "subject": "Welcome"},
                {"wait": "2d"},
                {
                    "if": {"not": {"opened": {"step": "welcome"}}},
                    "then": [{"send": NUDGE, "subject": "Nudge"}],
                },
                {"wait": "1d"},  # the branch Task is not the last: it does not end the execution
                {"send": WELCOME, "subject": "Later"},
            ],
        }
    )
    # a callback Task (the branch and the wait after it): its payload is the function's Payload
    params = compile_sequence(sequence)["States"]["S3_branch"]["Parameters"]["Payload"]
    filled = {k.removesuffix(".$"): v for k, v in params.items()}
    return {**filled, "email": EMAIL, "execution": EXECUTION, "data": {}, "token": "task-token"}


def step_function(resources: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The sequence step Lambda's handler module, with its callback schedules' settings."""
    settings = {
        "DEFAULT_FROM": "Acme <hello@acme.test>",
        "PUBLIC_BASE_URL": "https://api.acme.test",
        "SEQUENCE_SCHEDULE_GROUP": SCHEDULE_GROUP,
        "SEQUENCE_SCHEDULER_ROLE_ARN": SCHEDULER_ROLE,
    }
    module = handler_module("sequence_step", {**resources.env(), **settings}, monkeypatch)
    with contextlib.suppress(ClientError):
        client("scheduler").create_schedule_group(Name=SCHEDULE_GROUP)
    return module


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_nudge_goes_unless_a_person_opened_this_execution_s_welcome(
    case: str, store: SubscriberStore, resources: Any, outbox: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    events, nudged = CASES[case]
    module = step_function(resources, monkeypatch)
    # Given a subscriber in the sequence (the EXEC pair), the welcome sent, and these events
    store.upsert(EMAIL)
    store.put_execution(EMAIL, SEQUENCE, EXECUTION)
    for event in events:
        fields = {k: v for k, v in event.items() if k != "type"}
        store.add_event(
            EMAIL, event.get("type", "open"), at=clock.utc_now(), ttl_days=30, template=WELCOME, **fields
        )
    # When the branch Task runs, and runs again (a retried invocation)
    first = module.handler(branch_payload(), LambdaContext("sequence-step"))
    retried = {**branch_payload(), "token": "task-token-of-the-retry"}  # a retried Task: a new token
    second = module.handler(retried, LambdaContext("sequence-step"))
    # Then the condition is as the case says, and at most one nudge went out
    assert first["ok"] is second["ok"] is nudged  # ok: the condition (not opened) held
    assert len(outbox) == (1 if nudged else 0)
    assert second.get("outcome") in (None, "skipped:already_sent"), second
    # ... and the wait after it is one schedule, at the wake-up, updated by the second run
    schedule = client("scheduler").get_schedule(GroupName=SCHEDULE_GROUP, Name=schedule_name("S3", EXECUTION))
    assert schedule["ScheduleExpression"] == at_expression(clock.parse_iso(second["wake"]))
    assert schedule["ActionAfterCompletion"] == "DELETE" and schedule["FlexibleTimeWindow"] == {"Mode": "OFF"}
    target = schedule["Target"]
    assert (target["Arn"], target["RoleArn"]) == (SEND_TASK_SUCCESS_TARGET, SCHEDULER_ROLE)
    request = json.loads(target["Input"])
    assert request["TaskToken"] == "task-token-of-the-retry"
    assert json.loads(request["Output"]) == second  # the Task's result, handed back at the wake-up
    assert [s["Name"] for s in client("scheduler").list_schedules(GroupName=SCHEDULE_GROUP)["Schedules"]] == [
        schedule_name("S3", EXECUTION)
    ]


def test_a_task_retried_after_its_schedule_was_lost_sends_nothing_more_and_schedules_again(
    store: SubscriberStore, resources: Any, outbox: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The callback Task's timeout (shared.sequences.compiler.RETRY_CALLBACK_TIMEOUT): its schedule
    is gone, Step Functions tries the Task again with a new token."""
    module = step_function(resources, monkeypatch)
    scheduler = client("scheduler")
    store.upsert(EMAIL)
    store.put_execution(EMAIL, SEQUENCE, EXECUTION)
    # Given the branch Task sent its nudge and its schedule was then lost
    first = module.handler(branch_payload(), LambdaContext("sequence-step"))
    assert first["outcome"] == "sent" and len(outbox) == 1
    name = schedule_name("S3", EXECUTION)
    scheduler.delete_schedule(GroupName=SCHEDULE_GROUP, Name=name)
    # When the Task times out and is tried again with a new token
    retried = module.handler({**branch_payload(), "token": "token-after-the-timeout"}, LambdaContext("s"))
    # Then no second nudge, and a new schedule hands the new token back after the wait
    assert retried["outcome"] == "skipped:already_sent" and len(outbox) == 1
    schedule = scheduler.get_schedule(GroupName=SCHEDULE_GROUP, Name=name)
    assert schedule["ScheduleExpression"] == at_expression(clock.parse_iso(retried["wake"]))
    assert json.loads(schedule["Target"]["Input"])["TaskToken"] == "token-after-the-timeout"
