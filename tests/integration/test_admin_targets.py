"""Target selection by stack name (CloudFormation outputs and resources, on moto) and the
doctor checks against a deployed-stack target."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from botocore.stub import Stubber

from shared import doctor, specs
from shared.aws import client
from shared.errors import InvalidInput
from shared.provision import LocalResources
from shared.targets import STACK, StackNotFound, stack_target

REGION = "us-east-1"


def template(resources: LocalResources, *, outputs: bool = True) -> str:
    body: dict[str, Any] = {
        "Resources": {
            "WorkDlq": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": "t-work-dlq"}},
            "Work": {
                "Type": "AWS::SQS::Queue",
                "Properties": {
                    "QueueName": "t-work",
                    "RedrivePolicy": {
                        "deadLetterTargetArn": {"Fn::GetAtt": ["WorkDlq", "Arn"]},
                        "maxReceiveCount": 5,
                    },
                },
            },
        }
    }
    if outputs:
        body["Outputs"] = {f"{t.id}Name": {"Value": resources.tables[t.setting]} for t in specs.TABLES} | {
            specs.API_URL_OUTPUT: {"Value": "https://api.example.com"}
        }
    return json.dumps(body)


@pytest.fixture
def stack(resources: LocalResources) -> Iterator[str]:
    cfn = client("cloudformation")
    cfn.create_stack(StackName="MailstepTest", TemplateBody=template(resources))
    yield "MailstepTest"
    cfn.delete_stack(StackName="MailstepTest")


def test_stack_target_reads_settings_from_outputs_and_resources(
    stack: str, resources: LocalResources
) -> None:
    target = stack_target(stack, REGION)

    assert target.kind == STACK and target.label == f"stack {stack} ({REGION})"
    assert target.settings.table_name == resources.tables["table_name"]
    assert target.settings.events_table_name == resources.tables["events_table_name"]
    assert target.api_url == "https://api.example.com"
    assert target.settings.state_machine_arn_prefix.endswith(f":stateMachine:{specs.STATE_MACHINE_PREFIX}")
    assert sorted(url.rsplit("/", 1)[1] for url in target.resources["queues"]) == ["t-work", "t-work-dlq"]
    assert target.resources["alarms"] == ()  # (moto's CloudFormation skips alarms: see the doctor test)


def test_unknown_or_foreign_stack_is_refused(resources: LocalResources) -> None:
    with pytest.raises(StackNotFound):
        stack_target("NoSuchStack", REGION)
    cfn = client("cloudformation")
    cfn.create_stack(StackName="Foreign", TemplateBody=template(resources, outputs=False))
    try:
        with pytest.raises(InvalidInput, match="mailstep deployment"):
            stack_target("Foreign", REGION)
    finally:
        cfn.delete_stack(StackName="Foreign")


def checks_by_name(report: doctor.Report) -> dict[str, doctor.Check]:
    return {c.name: c for c in report.checks}


def account(production: bool, sent: float = 10.0) -> dict[str, Any]:
    return {
        "ProductionAccessEnabled": production,
        "SendingEnabled": True,
        "EnforcementStatus": "HEALTHY",
        "SendQuota": {"Max24HourSend": 50000.0, "MaxSendRate": 14.0, "SentLast24Hours": sent},
    }


def run_doctor(target: Any, answer: dict[str, Any], identity: dict[str, Any] | None = None) -> doctor.Report:
    """SES answers stubbed (moto has no GetAccount): the identity lookup, then the account."""
    with Stubber(client("sesv2")) as stub:
        if identity is None:  # the domain, then the address: both unknown
            for _ in range(2):
                stub.add_client_error("get_email_identity", "NotFoundException", http_status_code=404)
        else:
            stub.add_response("get_email_identity", identity, {"EmailIdentity": "example.com"})
        stub.add_response("get_account", answer)
        return doctor.run(target)


def test_doctor_on_a_stack_reports_each_check_with_hints(stack: str) -> None:
    sqs = client("sqs")
    target = stack_target(stack, REGION)
    assert checks_by_name(run_doctor(target, account(True)))["alarms"].status == "fail"  # none
    cloudwatch = client("cloudwatch")
    cloudwatch.put_metric_alarm(
        AlarmName="t-dlq-not-empty",
        MetricName="ApproximateNumberOfMessagesVisible",
        Namespace="AWS/SQS",
        Statistic="Maximum",
        Period=60,
        EvaluationPeriods=1,
        Threshold=0,
        ComparisonOperator="GreaterThanThreshold",
    )
    target = replace(target, resources={**target.resources, "alarms": ("t-dlq-not-empty",)})

    report = run_doctor(target, account(production=False))
    checks = checks_by_name(report)

    assert not report.ok
    assert checks["ses-identity"].status == "fail" and "create-email-identity" in checks["ses-identity"].hint
    assert checks["ses-production"].status == "fail" and "sandbox" in checks["ses-production"].detail
    assert checks["ses-quota"].status == "pass" and "14/s" in checks["ses-quota"].detail
    assert checks["configuration-set"].status == "fail"  # the test stack has none
    assert checks["alarms"].status == "pass"
    assert checks["dlqs"].status == "pass"

    cloudwatch.set_alarm_state(AlarmName="t-dlq-not-empty", StateValue="ALARM", StateReason="test")
    firing = checks_by_name(run_doctor(target, account(True)))["alarms"]
    assert firing.status == "fail" and "t-dlq-not-empty" in firing.detail

    dlq = sqs.get_queue_url(QueueName="t-work-dlq")["QueueUrl"]
    sqs.send_message(QueueUrl=dlq, MessageBody="{}")
    identity = {
        "IdentityType": "DOMAIN",
        "VerifiedForSendingStatus": True,
        "DkimAttributes": {"Status": "PENDING", "SigningEnabled": True},
    }
    report = run_doctor(target, account(production=True, sent=49000.0), identity)
    checks = checks_by_name(report)

    assert checks["ses-identity"].status == "pass"
    assert checks["ses-dkim"].status == "fail" and "PENDING" in checks["ses-dkim"].detail
    assert checks["ses-production"].status == "pass"
    assert checks["ses-quota"].status == "fail"  # 98 % of the daily quota used
    assert checks["dlqs"].status == "fail" and "t-work-dlq: 1" in checks["dlqs"].detail
    cloudwatch.delete_alarms(AlarmNames=["t-dlq-not-empty"])
