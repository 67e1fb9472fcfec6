"""The broadcasts construct: the --at state machine, DLQ alarms and the broadcast specs."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Match, Template

from shared.broadcasts.schedule import START_STATE, WAIT_STATE, definition
from shared.core import specs
from stacks.constructs.broadcasts import SCHEDULE_OUTPUT
from stacks.mailstep_stack import TEST_CONTEXT, build_app


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    """The app's stack: the broadcasts construct as the stack composes it."""
    _, stack = build_app(TEST_CONTEXT, outdir=str(tmp_path_factory.mktemp("cdk.out")))
    return Template.from_stack(stack)


def _definition(template: Template) -> dict[str, Any]:
    (machine,) = [
        m
        for key, m in template.find_resources("AWS::StepFunctions::StateMachine").items()
        if key.startswith("BroadcastsSchedule")
    ]
    parts = machine["Properties"]["DefinitionString"]["Fn::Join"][1]
    text = "".join(p if isinstance(p, str) else "<token>" for p in parts)
    return dict(json.loads(text))


def test_schedule_waits_on_the_send_time_then_sends_the_first_resolve_message(template: Template) -> None:
    asl = _definition(template)
    local = definition("<token>")
    assert asl["StartAt"] == local["StartAt"] == WAIT_STATE
    assert asl["States"][WAIT_STATE] == local["States"][WAIT_STATE]
    start = asl["States"][START_STATE]
    assert start["Resource"].endswith(":states:::sqs:sendMessage")
    assert start["Parameters"]["MessageBody.$"] == "$.message"
    assert start["Retry"][0]["ErrorEquals"] == ["States.ALL"] and start.get("End") is True
    template.has_resource_properties(
        "AWS::StepFunctions::StateMachine",
        {
            "StateMachineType": "STANDARD",
            "TracingConfiguration": {"Enabled": True},
            "LoggingConfiguration": Match.object_like({"Level": "ALL"}),
        },
    )


def test_schedule_may_only_send_to_the_control_queue(template: Template) -> None:
    policies = template.find_resources("AWS::IAM::Policy")
    statements = [
        s
        for p in policies.values()
        if any(r["Ref"].startswith("BroadcastsScheduleRole") for r in p["Properties"]["Roles"])
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    send = [s for s in statements if "sqs:SendMessage" in s["Action"]]
    assert len(send) == 1
    assert send[0]["Resource"] == {"Fn::GetAtt": [specs.BROADCAST_CONTROL_QUEUE.id, "Arn"]}


def test_both_broadcast_dead_letter_queues_have_an_alarm(template: Template) -> None:
    alarms = template.find_resources("AWS::CloudWatch::Alarm")
    by_queue = {
        a["Properties"]["Dimensions"][0]["Value"]["Fn::GetAtt"][0]: a
        for a in alarms.values()
        if a["Properties"].get("Namespace") == "AWS/SQS"
    }
    for queue in (specs.BROADCAST_QUEUE, specs.BROADCAST_CONTROL_QUEUE):
        alarm = by_queue[f"{queue.id}DeadLetters"]
        assert alarm["Properties"]["Threshold"] == 0
        assert alarm["Properties"]["ComparisonOperator"] == "GreaterThanThreshold"
    template.has_output(SCHEDULE_OUTPUT, {"Value": {"Ref": Match.string_like_regexp("Schedule")}})


def test_broadcast_workers_have_their_own_queue_and_a_visibility_of_6x_their_timeout() -> None:
    worker, resolver = specs.BROADCAST_WORKER_FUNCTION, specs.BROADCAST_RESOLVER_FUNCTION
    assert worker.event_sources[0].queue is specs.BROADCAST_QUEUE is not specs.SEND_QUEUE
    assert specs.BROADCAST_QUEUE.visibility_timeout_s >= 6 * worker.timeout_s
    assert specs.BROADCAST_CONTROL_QUEUE.visibility_timeout_s >= 6 * resolver.timeout_s
    assert worker.event_sources[0].max_concurrency is not None  # bounded: the rate is shared anyway
    assert set(resolver.send_queues) == {specs.BROADCAST_QUEUE, specs.BROADCAST_CONTROL_QUEUE}


@pytest.mark.parametrize(("rate", "workers"), [(None, 3), (200, 12), (1000, 60)])
def test_broadcast_workers_get_a_full_vcpu_and_a_concurrency_sized_by_the_accounts_rate(
    tmp_path_factory: pytest.TempPathFactory, rate: int | None, workers: int
) -> None:
    context = {**TEST_CONTEXT, **({"mailstep:sesMaxSendRate": rate} if rate else {})}
    _, stack = build_app(context, outdir=str(tmp_path_factory.mktemp("cdk.out")))
    template = Template.from_stack(stack)
    (fn_id,) = [
        k
        for k, f in template.find_resources("AWS::Lambda::Function").items()
        if f["Properties"]["Handler"] == specs.BROADCAST_WORKER_FUNCTION.handler
    ]
    assert template.find_resources("AWS::Lambda::Function")[fn_id]["Properties"]["MemorySize"] == 1769
    (mapping,) = [
        m
        for m in template.find_resources("AWS::Lambda::EventSourceMapping").values()
        if m["Properties"]["FunctionName"] == {"Ref": fn_id}
    ]
    assert mapping["Properties"]["ScalingConfig"]["MaximumConcurrency"] == workers
