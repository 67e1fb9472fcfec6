"""The reputation guardrail in the template (docs/reputation.md): two configuration sets with
reputation metrics, the marketing set's alarms, the pausing function's least-privilege role."""

from __future__ import annotations

from typing import Any

import pytest

from shared.core import specs
from tests.infra.cfn import Synth, as_list, function_by_handler, ref, role_statements, synthesize


def _alarms_on(synth: Synth, metric: str) -> list[dict[str, Any]]:
    return [
        a["Properties"]
        for a in synth.resources("AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("MetricName") == metric
        and any(d["Name"] == "ses:configuration-set" for d in a["Properties"].get("Dimensions", []))
    ]


def test_two_configuration_sets_with_reputation_metrics_and_the_same_event_destination(synth: Synth) -> None:
    sets = synth.resources("AWS::SES::ConfigurationSet")
    assert set(sets) == {specs.CONFIGURATION_SET.id, specs.TRANSACTIONAL_CONFIGURATION_SET.id}
    for resource in sets.values():
        assert resource["Properties"]["ReputationOptions"] == {"ReputationMetricsEnabled": True}
    destinations = synth.resources("AWS::SES::ConfigurationSetEventDestination").values()
    by_set = {
        d["Properties"]["ConfigurationSetName"]["Ref"]: d["Properties"]["EventDestination"]
        for d in destinations
    }
    assert set(by_set) == set(sets)
    marketing, transactional = (
        by_set[specs.CONFIGURATION_SET.id],
        by_set[specs.TRANSACTIONAL_CONFIGURATION_SET.id],
    )
    assert marketing == transactional  # same topic, same event types
    assert marketing["SnsDestination"] == {"TopicARN": ref(specs.SES_EVENTS_TOPIC.id)}


def test_every_sending_function_may_send_through_both_sets(synth: Synth) -> None:
    for spec in specs.FUNCTIONS:
        if not spec.sends_email or spec is specs.INBOUND_FUNCTION:
            continue
        fn_id, fn = function_by_handler(synth, spec.handler)
        env = fn["Properties"]["Environment"]["Variables"]
        assert env["SES_CONFIGURATION_SET"] == ref(specs.CONFIGURATION_SET.id), spec.name
        assert env["SES_TRANSACTIONAL_CONFIGURATION_SET"] == ref(specs.TRANSACTIONAL_CONFIGURATION_SET.id)
        resources = [
            r
            for s in role_statements(synth, fn_id)
            if "ses:SendRawEmail" in as_list(s["Action"])
            for r in as_list(s["Resource"])
        ]
        names = {str(r) for r in resources}
        for set_spec in specs.CONFIGURATION_SETS:
            assert any(set_spec.id in n for n in names), (spec.name, set_spec.id)


@pytest.mark.parametrize(
    ("metric", "threshold"), [("Reputation.BounceRate", 0.04), ("Reputation.ComplaintRate", 0.0008)]
)
def test_the_marketing_set_alarms_notify_the_operator_and_the_guard(
    synth: Synth, metric: str, threshold: float
) -> None:
    (alarm,) = _alarms_on(synth, metric)
    assert alarm["Namespace"] == "AWS/SES"
    assert alarm["Dimensions"] == [
        {"Name": "ses:configuration-set", "Value": ref(specs.CONFIGURATION_SET.id)}
    ]
    assert alarm["Threshold"] == pytest.approx(threshold)
    assert alarm["Statistic"] == "Maximum" and alarm["Period"] == 900 and alarm["EvaluationPeriods"] == 1
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["TreatMissingData"] == "notBreaching"
    actions = alarm["AlarmActions"]
    assert ref(specs.REPUTATION_TOPIC.id) in actions
    assert any(a != ref(specs.REPUTATION_TOPIC.id) and "AlarmTopic" in a["Ref"] for a in actions)


def test_thresholds_come_from_context_and_are_validated(tmp_path_factory: pytest.TempPathFactory) -> None:
    synth = synthesize(
        tmp_path_factory.mktemp("cdk.out"),
        {"mailstep:reputationBounceRatePercent": "2.5", "mailstep:reputationComplaintRatePercent": 0.05},
    )
    (bounce,) = _alarms_on(synth, "Reputation.BounceRate")
    (complaint,) = _alarms_on(synth, "Reputation.ComplaintRate")
    assert bounce["Threshold"] == pytest.approx(0.025)
    assert complaint["Threshold"] == pytest.approx(0.0005)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("reputationBounceRatePercent", 10),
        ("reputationBounceRatePercent", 0),
        ("reputationComplaintRatePercent", 0.5),
    ],
)
def test_a_threshold_at_or_above_ses_pause_level_fails_naming_the_key(
    tmp_path_factory: pytest.TempPathFactory, key: str, value: float
) -> None:
    with pytest.raises(Exception, match=f"mailstep:{key}"):
        synthesize(tmp_path_factory.mktemp("cdk.out"), {f"mailstep:{key}": value})


def test_the_guard_may_pause_only_the_marketing_set(synth: Synth) -> None:
    fn_id, fn = function_by_handler(synth, specs.REPUTATION_FUNCTION.handler)
    statements = role_statements(synth, fn_id)
    ses = [s for s in statements if any(a.startswith("ses:") for a in as_list(s["Action"]))]
    (statement,) = ses
    assert as_list(statement["Action"]) == ["ses:PutConfigurationSetSendingOptions"]
    (resource,) = as_list(statement["Resource"])
    text = str(resource)
    assert "configuration-set/" in text and f"'Ref': '{specs.CONFIGURATION_SET.id}'" in text
    assert specs.TRANSACTIONAL_CONFIGURATION_SET.id not in text
    actions = {a for s in statements for a in as_list(s["Action"])}
    assert actions == {
        "ses:PutConfigurationSetSendingOptions",
        "dynamodb:UpdateItem",
        "dynamodb:Query",
        "sqs:ReceiveMessage",
        "sqs:DeleteMessage",
        "sqs:GetQueueAttributes",
        "logs:CreateLogStream",
        "logs:PutLogEvents",
    }
    env = fn["Properties"]["Environment"]["Variables"]
    assert env["SES_CONFIGURATION_SET"] == ref(specs.CONFIGURATION_SET.id)
    assert "SES_TRANSACTIONAL_CONFIGURATION_SET" not in env


def test_the_reputation_topic_takes_cloudwatch_alarms_and_feeds_the_guard_queue(synth: Synth) -> None:
    policies = [
        p["Properties"]
        for p in synth.resources("AWS::SNS::TopicPolicy").values()
        if ref(specs.REPUTATION_TOPIC.id) in p["Properties"]["Topics"]
    ]
    principals = [
        s["Principal"].get("Service")
        for p in policies
        for s in p["PolicyDocument"]["Statement"]
        if isinstance(s.get("Principal"), dict)
    ]
    assert "cloudwatch.amazonaws.com" in principals
    subscriptions = [
        s["Properties"]
        for s in synth.resources("AWS::SNS::Subscription").values()
        if s["Properties"]["TopicArn"] == ref(specs.REPUTATION_TOPIC.id)
    ]
    assert [s["Protocol"] for s in subscriptions] == ["sqs"]
    fn_id, _ = function_by_handler(synth, specs.REPUTATION_FUNCTION.handler)
    mappings = [
        m["Properties"]
        for m in synth.resources("AWS::Lambda::EventSourceMapping").values()
        if m["Properties"]["FunctionName"] == ref(fn_id)
    ]
    (mapping,) = mappings
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
