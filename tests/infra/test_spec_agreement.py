"""The synthesized template and ``shared.core.specs`` agree, and a spec added later is picked up
by the stack with no CDK change (checked on a second synthesis with extra specs)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from shared.core import specs
from tests.infra.cfn import (
    Synth,
    arn,
    as_list,
    function_by_handler,
    ref,
    role_statements,
    route_target_function,
    statements_for,
    synthesize,
)


def event_topics() -> list[specs.TopicSpec]:
    return list(dict.fromkeys([*specs.TOPICS, *(c.event_topic for c in specs.CONFIGURATION_SETS)]))


def assert_agrees_with_specs(synth: Synth) -> None:
    resources = synth.json["Resources"]

    # Tables: keys, GSIs, TTL; nothing unspecced.
    assert set(synth.resources("AWS::DynamoDB::Table")) == {t.id for t in specs.TABLES}
    for table in specs.TABLES:
        props = resources[table.id]["Properties"]
        assert [k["AttributeName"] for k in props["KeySchema"]] == [table.partition_key, table.sort_key]
        assert props["TimeToLiveSpecification"]["AttributeName"] == table.ttl_attribute
        indexes = {
            g["IndexName"]: [k["AttributeName"] for k in g["KeySchema"]]
            for g in props.get("GlobalSecondaryIndexes", [])
        }
        assert indexes == {g.name: [g.partition_key, g.sort_key] for g in table.gsis}

    # Secrets.
    assert set(synth.resources("AWS::SecretsManager::Secret")) == {s.id for s in specs.SECRETS}

    # Queues: each with its dead-letter queue, and the failure queues; nothing unspecced.
    queue_ids = {q.id for q in specs.QUEUES} | {f"{q.id}DeadLetters" for q in specs.QUEUES}
    queue_ids |= {q.id for q in specs.FAILURE_QUEUES}
    assert set(synth.resources("AWS::SQS::Queue")) == queue_ids
    for queue in specs.QUEUES:
        props = resources[queue.id]["Properties"]
        assert props["VisibilityTimeout"] == queue.visibility_timeout_s
        assert props["RedrivePolicy"] == {
            "deadLetterTargetArn": arn(f"{queue.id}DeadLetters"),
            "maxReceiveCount": queue.max_receives,
        }
        for queue_id in (queue.id, f"{queue.id}DeadLetters"):
            assert resources[queue_id]["Properties"]["SqsManagedSseEnabled"] is True
            assert _denies_insecure_transport(synth, queue_id)
    for failures in specs.FAILURE_QUEUES:  # kept 14 days, encrypted, SSL only; nothing consumes them
        props = resources[failures.id]["Properties"]
        assert props["MessageRetentionPeriod"] == 14 * 24 * 3600 and "RedrivePolicy" not in props
        assert props["SqsManagedSseEnabled"] is True
        assert _denies_insecure_transport(synth, failures.id)

    # Topics and subscriptions.
    # (The alarms' notification topic is operational, deploy-only: it is not a runtime resource.)
    topics = {k for k in synth.resources("AWS::SNS::Topic") if not k.startswith("AlarmsAlarmTopic")}
    assert topics == {t.id for t in event_topics()}
    assert len(synth.resources("AWS::SNS::Topic")) == len(topics) + 1
    subscriptions = sorted(
        (
            s["Properties"]["TopicArn"]["Ref"],
            s["Properties"]["Endpoint"]["Fn::GetAtt"][0],
            s["Properties"].get("RawMessageDelivery", False),
        )
        for s in synth.resources("AWS::SNS::Subscription").values()
    )
    assert subscriptions == sorted(
        (s.topic.id, s.queue.id, s.raw_message_delivery) for s in specs.SUBSCRIPTIONS
    )

    # SES configuration sets publish the specced events to their topic.
    assert set(synth.resources("AWS::SES::ConfigurationSet")) == {c.id for c in specs.CONFIGURATION_SETS}
    destinations = synth.resources("AWS::SES::ConfigurationSetEventDestination").values()
    for config_set in specs.CONFIGURATION_SETS:
        (destination,) = [
            d for d in destinations if d["Properties"]["ConfigurationSetName"] == ref(config_set.id)
        ]
        event_destination = destination["Properties"]["EventDestination"]
        assert event_destination["SnsDestination"] == {"TopicARN": ref(config_set.event_topic.id)}
        assert len(event_destination["MatchingEventTypes"]) == len(config_set.event_types)

    # Functions: one per spec, with the specced handler, memory, timeout and event sources.
    functions = synth.resources("AWS::Lambda::Function")
    assert sorted(f["Properties"]["Handler"] for f in functions.values()) == sorted(
        f.handler for f in specs.FUNCTIONS
    )
    mappings = list(synth.resources("AWS::Lambda::EventSourceMapping").values())
    assert len(mappings) == sum(len(f.event_sources) + len(f.stream_sources) for f in specs.FUNCTIONS)
    for fn_spec in specs.FUNCTIONS:
        fn_id, fn = function_by_handler(synth, fn_spec.handler)
        assert fn["Properties"]["MemorySize"] == fn_spec.memory_mb
        assert fn["Properties"]["Timeout"] == fn_spec.timeout_s
        assert fn["Properties"].get("ReservedConcurrentExecutions") == fn_spec.reserved_concurrency
        for source in fn_spec.event_sources:
            (mapping,) = [
                m
                for m in mappings
                if m["Properties"]["FunctionName"] == ref(fn_id)
                and m["Properties"]["EventSourceArn"] == arn(source.queue.id)
            ]
            assert mapping["Properties"]["BatchSize"] == source.batch_size
            assert mapping["Properties"]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
            scaling = mapping["Properties"].get("ScalingConfig", {}).get("MaximumConcurrency")
            assert scaling == source.max_concurrency
        for stream in fn_spec.stream_sources:
            (mapping,) = [
                m
                for m in mappings
                if m["Properties"]["FunctionName"] == ref(fn_id)
                and m["Properties"]["EventSourceArn"] == {"Fn::GetAtt": [stream.table.id, "StreamArn"]}
            ]
            props = mapping["Properties"]
            assert props["BatchSize"] == stream.batch_size
            assert props["StartingPosition"] == "TRIM_HORIZON"
            assert props["BisectBatchOnFunctionError"] is stream.bisect
            assert props["MaximumRetryAttempts"] == stream.retry_attempts
            assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
            patterns = [json.loads(f["Pattern"]) for f in props["FilterCriteria"]["Filters"]]
            assert patterns == [dict(f) for f in stream.filters]

    # Routes: exactly the specced ones, each to its function.
    route_keys = sorted(
        r["Properties"]["RouteKey"] for r in synth.resources("AWS::ApiGatewayV2::Route").values()
    )
    assert route_keys == sorted(f"{route.method} {route.path}" for route, _ in specs.routes())

    # Outputs: one per specced resource (plus the DKIM records of an identity the stack creates).
    outputs = {k for k in synth.json["Outputs"] if not k.startswith("DkimRecord")}
    assert outputs == {specs.API_URL_OUTPUT, *specs.stack_outputs()}


def _denies_insecure_transport(synth: Synth, queue_id: str) -> bool:
    for policy in synth.resources("AWS::SQS::QueuePolicy").values():
        if ref(queue_id) in policy["Properties"]["Queues"]:
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                if statement["Effect"] == "Deny" and statement["Condition"] == {
                    "Bool": {"aws:SecureTransport": "false"}
                }:
                    return True
    return False


def test_template_agrees_with_specs(synth: Synth) -> None:
    assert_agrees_with_specs(synth)


# -- a later capability adds specs; the stack picks them up ------------------------------------------

EXTRA_QUEUE = specs.QueueSpec(
    id="ExampleQueue",
    local_name="mailstep-example",
    setting="example_queue_url",
    visibility_timeout_s=360,  # 6x the example worker's timeout
    max_receives=3,
)
EXTRA_TOPIC = specs.TopicSpec(id="ExampleTopic", local_name="mailstep-example", setting="example_topic_arn")
EXTRA_FUNCTION = specs.FunctionSpec(
    name="example-worker",
    handler="functions.example_worker.handler.handler",
    description="Example consumer",
    memory_mb=256,
    timeout_s=60,
    grants=(
        specs.Grant(specs.MAIN_TABLE, ("dynamodb:GetItem",)),
        specs.Grant(EXTRA_QUEUE, ("sqs:SendMessage",)),
        specs.Grant(EXTRA_TOPIC, ("sns:Publish",)),
    ),
    routes=(specs.RouteSpec("GET", "/v1/example/{id}"),),
    event_sources=(specs.EventSourceSpec(queue=EXTRA_QUEUE, batch_size=5, max_concurrency=3),),
    reserved_concurrency=4,
)
CONTEXT = {
    "mailstep:dataTtlDays": "30",  # CLI -c values arrive as strings
    "mailstep:logRetentionDays": 30,
    "mailstep:sesDomain": "mail.example.com",
    "mailstep:fromAddress": "Acme <hello@mail.example.com>",
    "mailstep:apiThrottleRate": 10,
    "mailstep:apiThrottleBurst": 20,
}


@contextmanager
def extra_specs() -> Iterator[None]:
    """specs as they would read after a capability adds a queue, a topic and a consumer."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(specs, "QUEUES", (*specs.QUEUES, EXTRA_QUEUE))
        mp.setattr(specs, "TOPICS", (*specs.TOPICS, EXTRA_TOPIC))
        subscription = specs.SubscriptionSpec(EXTRA_TOPIC, EXTRA_QUEUE, raw_message_delivery=True)
        mp.setattr(specs, "SUBSCRIPTIONS", (*specs.SUBSCRIPTIONS, subscription))
        mp.setattr(specs, "FUNCTIONS", (*specs.FUNCTIONS, EXTRA_FUNCTION))
        mp.setitem(specs.ENV, "example_queue_url", "EXAMPLE_QUEUE_URL")
        mp.setitem(specs.ENV, "example_topic_arn", "EXAMPLE_TOPIC_ARN")
        yield


@pytest.fixture(scope="module")
def extended(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    with extra_specs():
        return synthesize(tmp_path_factory.mktemp("cdk.out.extended"), CONTEXT)


def test_added_specs_appear_in_the_template(extended: Synth) -> None:
    with extra_specs():
        assert_agrees_with_specs(extended)
    assert {"ExampleQueue", "ExampleQueueDeadLetters", "ExampleTopic"} <= set(extended.json["Resources"])
    assert {"ExampleQueueUrl", "ExampleTopicArn"} <= set(extended.json["Outputs"])


def test_added_function_gets_env_grants_and_route(extended: Synth) -> None:
    fn_id, fn = function_by_handler(extended, EXTRA_FUNCTION.handler)
    variables = fn["Properties"]["Environment"]["Variables"]
    statements = role_statements(extended, fn_id)

    assert variables["EXAMPLE_QUEUE_URL"] == ref("ExampleQueue")
    assert variables["EXAMPLE_TOPIC_ARN"] == ref("ExampleTopic")
    assert variables["TABLE_NAME"] == ref("MainTable")
    assert "EVENTS_TABLE_NAME" not in variables
    assert fn["Properties"]["ReservedConcurrentExecutions"] == 4
    send = [s for s in statements_for(statements, "sqs") if "sqs:SendMessage" in as_list(s["Action"])]
    assert [s["Resource"] for s in send] == [arn("ExampleQueue")]
    publish = statements_for(statements, "sns")
    assert [(s["Action"], s["Resource"]) for s in publish] == [("sns:Publish", ref("ExampleTopic"))]
    assert not {"ses:SendEmail", "ses:SendRawEmail"} & {a for s in statements for a in as_list(s["Action"])}
    assert route_target_function(extended, "GET /v1/example/{id}") == fn_id


def test_context_reaches_the_template(extended: Synth) -> None:
    for fn_spec in specs.FUNCTIONS:
        _, fn = function_by_handler(extended, fn_spec.handler)
        assert fn["Properties"]["Environment"]["Variables"]["DATA_TTL_DAYS"] == "30"
    assert all(
        g["Properties"]["RetentionInDays"] == 30 for g in extended.resources("AWS::Logs::LogGroup").values()
    )
    (stage,) = extended.resources("AWS::ApiGatewayV2::Stage").values()
    assert stage["Properties"]["DefaultRouteSettings"] == {
        "ThrottlingBurstLimit": 20,
        "ThrottlingRateLimit": 10,
    }


def test_senders_are_scoped_to_the_configured_domain(extended: Synth) -> None:
    # (the inbound function sends only when reply forwarding is configured, not here)
    for fn_spec in (f for f in specs.FUNCTIONS if "ses:SendRawEmail" in specs.granted_actions(f, {})):
        fn_id, fn = function_by_handler(extended, fn_spec.handler)
        statements = statements_for(role_statements(extended, fn_id), "ses")
        assert {a for s in statements for a in as_list(s["Action"])} == {"ses:SendEmail", "ses:SendRawEmail"}
        # every identity (a sandbox send is authorized on the recipient's too), From on the domain only
        (identity,) = [s for s in statements if ":identity/" in str(s["Resource"])]
        assert identity["Condition"] == {
            "StringLike": {"ses:FromAddress": ["*@mail.example.com", "*@*.mail.example.com"]}
        }
        assert "configuration-set/" in str([s["Resource"] for s in statements])
        assert fn["Properties"]["Environment"]["Variables"]["DEFAULT_FROM"] == "Acme <hello@mail.example.com>"
