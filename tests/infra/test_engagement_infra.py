"""Engagement infrastructure: configuration set -> SNS -> SQS (+DLQ) -> function, the SES
identity, the inbound receipt rule and every alarm (with cdk-nag passing)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Match, Template

from shared.core import specs
from stacks.mailstep_stack import TEST_CONTEXT, build_app
from tests.infra.cfn import arn, function_by_handler

CONTEXT = {
    "mailstep:sesDomain": "acme.test",
    "mailstep:fromAddress": "Acme <hello@acme.test>",
    "mailstep:alarmEmail": "ops@acme.test",
    "mailstep:mailFromSubdomain": "mail",
    "mailstep:inboundDomain": "in.acme.test",
}


class Built:
    def __init__(self, template: Template) -> None:
        self.template = template
        self.json = template.to_json()

    def resources(self, cfn_type: str, under: str = "") -> dict[str, dict[str, Any]]:
        return {
            k: r
            for k, r in self.json["Resources"].items()
            if r["Type"] == cfn_type and k.startswith(under)  # logical ids start with the construct path
        }

    def one(self, cfn_type: str, under: str = "") -> tuple[str, dict[str, Any]]:
        found = self.resources(cfn_type, under)
        assert len(found) == 1, f"{cfn_type} under {under!r}: {sorted(found)}"
        return next(iter(found.items()))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The app's stack with a domain, a MAIL FROM subdomain, inbound replies and alarm email."""
    app, stack = build_app(
        {**TEST_CONTEXT, **CONTEXT},
        outdir=str(tmp_path_factory.mktemp("cdk.out")),
    )
    app.synth()  # cdk-nag findings fail here
    return Built(Template.from_stack(stack))


def test_each_configuration_set_publishes_every_event_type_to_the_ses_events_topic(built: Built) -> None:
    destinations = built.resources("AWS::SES::ConfigurationSetEventDestination")
    # marketing and transactional mail (docs/reputation.md): one destination each, the same topic
    assert len(destinations) == len(specs.CONFIGURATION_SETS) == 2
    for spec in specs.CONFIGURATION_SETS:
        config_set = built.json["Resources"][spec.id]
        assert config_set["Properties"]["ReputationOptions"] == {"ReputationMetricsEnabled": True}
        (props,) = [
            d["Properties"]
            for d in destinations.values()
            if d["Properties"]["ConfigurationSetName"] == {"Ref": spec.id}
        ]
        event = props["EventDestination"]
        assert event["Enabled"] is True
        assert event["SnsDestination"] == {"TopicARN": {"Ref": specs.SES_EVENTS_TOPIC.id}}
        camel = {
            "".join(w.capitalize() if i else w.lower() for i, w in enumerate(t.split("_")))
            for t in spec.event_types
        }  # RENDERING_FAILURE -> renderingFailure
        assert set(event["MatchingEventTypes"]) == camel
        assert {"bounce", "complaint", "delivery", "open", "click"} <= camel


def test_ses_events_topic_feeds_the_engagement_queue_with_the_sns_envelope(built: Built) -> None:
    built.template.has_resource_properties(
        "AWS::SNS::Subscription",
        {
            "Protocol": "sqs",
            "TopicArn": {"Ref": specs.SES_EVENTS_TOPIC.id},
            "Endpoint": arn(specs.ENGAGEMENT_QUEUE.id),
            "RawMessageDelivery": False,
        },
    )
    # the topic may send to the queue (queue policy)
    policies = built.resources("AWS::SQS::QueuePolicy")
    assert any({"Ref": specs.ENGAGEMENT_QUEUE.id} in p["Properties"]["Queues"] for p in policies.values())


@pytest.mark.parametrize("queue", [specs.ENGAGEMENT_QUEUE, specs.INBOUND_QUEUE], ids=lambda q: q.id)
def test_queues_redrive_to_their_dead_letter_queue(built: Built, queue: specs.QueueSpec) -> None:
    props = built.json["Resources"][queue.id]["Properties"]
    assert props["RedrivePolicy"] == {
        "deadLetterTargetArn": arn(f"{queue.id}DeadLetters"),
        "maxReceiveCount": queue.max_receives,
    }
    assert props["VisibilityTimeout"] >= 60


@pytest.mark.parametrize(
    ("fn", "queue"),
    [(specs.ENGAGEMENT_FUNCTION, specs.ENGAGEMENT_QUEUE), (specs.INBOUND_FUNCTION, specs.INBOUND_QUEUE)],
    ids=["engagement", "inbound"],
)
def test_functions_consume_their_queue_with_partial_batch_responses(
    built: Built, fn: specs.FunctionSpec, queue: specs.QueueSpec
) -> None:
    fn_id, _ = function_by_handler(built, fn.handler)  # type: ignore[arg-type]
    built.template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {
            "FunctionName": {"Ref": fn_id},
            "EventSourceArn": arn(queue.id),
            "FunctionResponseTypes": ["ReportBatchItemFailures"],
        },
    )


def test_domain_identity_has_easy_dkim_the_configuration_set_and_mail_from(built: Built) -> None:
    # the sending domain's identity (the reply domain, another one, has its own: InboundIdentity)
    (_, identity) = built.one("AWS::SES::EmailIdentity", "EngagementDomainIdentity")
    props = identity["Properties"]
    assert props["EmailIdentity"] == "acme.test"
    assert props["DkimAttributes"] == {"SigningEnabled": True}
    assert props["ConfigurationSetAttributes"] == {
        "ConfigurationSetName": {"Ref": specs.CONFIGURATION_SET.id}
    }
    assert props["MailFromAttributes"] == {
        "MailFromDomain": "mail.acme.test",
        "BehaviorOnMxFailure": "USE_DEFAULT_VALUE",
    }
    assert "DkimSigningAttributes" not in props  # Easy DKIM, not BYODKIM


def test_inbound_rule_stores_mail_in_s3_and_notifies_the_inbound_topic(built: Built) -> None:
    (_, rule) = built.one("AWS::SES::ReceiptRule", "Engagement")
    props = rule["Properties"]["Rule"]
    assert props["Recipients"] == ["in.acme.test"] and props["ScanEnabled"] is True
    (action,) = props["Actions"]
    assert action["S3Action"]["TopicArn"] == {"Ref": specs.INBOUND_TOPIC.id}
    assert action["S3Action"]["ObjectKeyPrefix"] == "inbound/"
    bucket_id, bucket = built.one("AWS::S3::Bucket", "Engagement")
    assert bucket["DeletionPolicy"] == "Retain"
    assert action["S3Action"]["BucketName"] == {"Ref": bucket_id}
    # SES checks it may publish and write when the rule is created: the rule waits for both policies
    topic_policies = [
        k
        for k, r in built.resources("AWS::SNS::TopicPolicy").items()
        if {"Ref": specs.INBOUND_TOPIC.id} in r["Properties"]["Topics"]
    ]
    (bucket_policy, _) = built.one("AWS::S3::BucketPolicy", "Engagement")
    assert len(topic_policies) == 1
    assert {topic_policies[0], bucket_policy} <= set(rule.get("DependsOn", []))
    built.template.has_resource_properties(
        "AWS::S3::BucketPolicy",
        {
            "Bucket": {"Ref": bucket_id},
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {"Principal": {"Service": "ses.amazonaws.com"}, "Action": "s3:PutObject"}
                        )
                    ]
                )
            },
        },
    )


def _alarm(built: Built, name: str) -> dict[str, Any]:
    found = [
        r["Properties"]
        for k, r in built.resources("AWS::CloudWatch::Alarm", "Alarms").items()
        if k.startswith(f"Alarms{name}Alarm")
    ]
    assert len(found) == 1, name
    return found[0]


def _notifies_the_alarm_topic(built: Built, props: dict[str, Any]) -> None:
    topic_id, _ = built.one("AWS::SNS::Topic", "Alarms")
    assert props["AlarmActions"] == [{"Ref": topic_id}]
    assert props["ComparisonOperator"] == "GreaterThanThreshold"
    assert props["TreatMissingData"] == "notBreaching"


@pytest.mark.parametrize(
    ("name", "metric", "threshold"),
    [("BounceRate", "Reputation.BounceRate", 0.05), ("ComplaintRate", "Reputation.ComplaintRate", 0.001)],
)
def test_reputation_alarms(built: Built, name: str, metric: str, threshold: float) -> None:
    props = _alarm(built, name)
    assert (props["Namespace"], props["MetricName"], props["Threshold"]) == ("AWS/SES", metric, threshold)
    _notifies_the_alarm_topic(built, props)


@pytest.mark.parametrize(
    "queue", [specs.SEND_QUEUE, specs.ENGAGEMENT_QUEUE, specs.INBOUND_QUEUE], ids=lambda q: q.id
)
def test_every_dead_letter_queue_alarms_when_not_empty(built: Built, queue: specs.QueueSpec) -> None:
    props = _alarm(built, f"{queue.id}DeadLetters")
    assert (props["Namespace"], props["MetricName"]) == ("AWS/SQS", "ApproximateNumberOfMessagesVisible")
    assert props["Dimensions"] == [
        {"Name": "QueueName", "Value": {"Fn::GetAtt": [f"{queue.id}DeadLetters", "QueueName"]}}
    ]
    assert props["Threshold"] == 0
    _notifies_the_alarm_topic(built, props)


def test_failed_sequence_executions_alarm(built: Built) -> None:
    props = _alarm(built, "SequenceFailures")
    assert (props["Namespace"], props["MetricName"], props["Statistic"]) == (
        "Mailstep",
        "SequenceStep_fail",
        "Sum",
    )
    assert props["Dimensions"] == [{"Name": "service", "Value": "mailstep"}]
    _notifies_the_alarm_topic(built, props)


def test_alarm_topic_mails_the_configured_address(built: Built) -> None:
    topic_id, _ = built.one("AWS::SNS::Topic", "Alarms")
    built.template.has_resource_properties(
        "AWS::SNS::Subscription",
        {"Protocol": "email", "Endpoint": "ops@acme.test", "TopicArn": {"Ref": topic_id}},
    )


def test_every_state_machine_gets_a_failure_alarm_when_watched(built: Built) -> None:
    machines = built.resources("AWS::StepFunctions::StateMachine", "Sequences")
    assert len(machines) == len(list((Path(__file__).parents[2] / "sequences").glob("*.yaml")))
    alarms = [a for k, a in built.resources("AWS::CloudWatch::Alarm", "Alarms").items() if "Sequence" in k]
    per_machine = [a["Properties"] for a in alarms if "Metrics" in a["Properties"]]
    assert len(per_machine) == len(machines)
    for props in per_machine:
        names = {m.get("MetricStat", {}).get("Metric", {}).get("MetricName") for m in props["Metrics"]}
        assert {"ExecutionsFailed", "ExecutionsTimedOut"} <= names


def test_docs_describe_what_the_alarms_watch() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "engagement.md").read_text()
    for word in ("Reputation.BounceRate", "Reputation.ComplaintRate", "dead-letter", "SequenceStep_fail"):
        assert word in docs
