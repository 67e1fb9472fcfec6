"""Target selection by stack name (CloudFormation outputs and resources, on moto), the local
runtime's registration as a stack (local_aws.cfn_stack) and the doctor checks against a
deployed-stack target."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from botocore.stub import Stubber

from local_aws import cfn_stack
from local_aws.provision import LocalResources
from ops import doctor
from ops.targets import LOCAL, STACK, StackNotFound, local_target, sequence_state_machines, stack_target
from shared.core import specs
from shared.core.aws import client
from shared.core.errors import InvalidInput

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
    # (no StateMachineArnPrefix output: computed from the stack's name)
    assert target.settings.state_machine_arn_prefix == (
        f"arn:aws:states:{REGION}:123456789012:stateMachine:{specs.state_machine_prefix(stack)}"
    )
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


def local_outputs(resources: LocalResources) -> dict[str, str]:
    """Every stack output, with made-up local values (the tables are real)."""
    values = {field: f"local-{field}" for field in specs.stack_outputs().values()}
    values |= resources.tables
    values["state_machine_arn_prefix"] = "arn:aws:states:us-east-1:123456789012:stateMachine:Local-seq-"
    outputs = {key: values[field] for key, field in specs.stack_outputs().items()}
    return outputs | {specs.API_URL_OUTPUT: "https://127.0.0.1:9443"}


@pytest.fixture
def registered(resources: LocalResources) -> Iterator[list[cfn_stack.Resource]]:
    sqs = client("sqs")
    urls = [sqs.create_queue(QueueName=name)["QueueUrl"] for name in ("r-work", "r-work-dlq")]
    found = [
        ("WorkQueue", "AWS::SQS::Queue", urls[0]),
        ("WorkQueueDlq", "AWS::SQS::Queue", urls[1]),
        ("ConfigurationSet", "AWS::SES::ConfigurationSet", "r-config"),
        ("SenderFunction", "AWS::Lambda::Function", "r-sender"),
        ("MainTable", "AWS::DynamoDB::Table", resources.tables["table_name"]),
    ]
    cfn_stack.register_stack("LocalTest", local_outputs(resources), found)
    yield found
    client("cloudformation").delete_stack(StackName="LocalTest")
    for url in urls:
        sqs.delete_queue(QueueUrl=url)


def test_the_local_runtime_registers_as_a_stack_that_resolves_like_a_deployed_one(
    registered: list[cfn_stack.Resource], resources: LocalResources
) -> None:
    # Given the local runtime's outputs and resources registered under a stack name
    # When the stack is resolved by that name, exactly as a deployed stack is
    target = stack_target("LocalTest", REGION)

    # Then the settings come from the outputs, the resources from ListStackResources
    assert target.kind == STACK and target.api_url == "https://127.0.0.1:9443"
    assert target.settings.table_name == resources.tables["table_name"]
    assert target.settings.broadcast_queue_url == "local-broadcast_queue_url"
    assert target.settings.broadcast_schedule_arn == "local-broadcast_schedule_arn"
    assert target.settings.state_machine_arn_prefix.endswith(":stateMachine:Local-seq-")  # the output
    # each configuration set is named by its output (marketing and transactional, docs/reputation.md)
    assert target.settings.configuration_set == "local-configuration_set"
    assert target.settings.transactional_configuration_set == "local-transactional_configuration_set"
    assert sorted(u.rsplit("/", 1)[1] for u in target.resources["queues"]) == ["r-work", "r-work-dlq"]
    assert target.resources["functions"] == ("r-sender",)
    listed = client("cloudformation").list_stack_resources(StackName="LocalTest")["StackResourceSummaries"]
    assert {(r["LogicalResourceId"], r["ResourceType"], r["PhysicalResourceId"]) for r in listed} >= set(
        registered
    )


def test_registering_again_replaces_the_stack(registered: list[cfn_stack.Resource], resources) -> None:
    outputs = local_outputs(resources) | {specs.API_URL_OUTPUT: "https://127.0.0.1:9444"}

    cfn_stack.register_stack("LocalTest", outputs, registered[:1])

    target = stack_target("LocalTest", REGION)
    assert target.api_url == "https://127.0.0.1:9444"
    assert len(target.resources["queues"]) == 1 and target.resources["functions"] == ()
    assert [s["StackName"] for s in client("cloudformation").describe_stacks()["Stacks"]].count(
        "LocalTest"
    ) == 1


def test_local_target_is_the_registered_default_stack_labelled_local(resources: LocalResources) -> None:
    cfn_stack.register_stack(specs.STACK_NAME, local_outputs(resources), [])
    try:
        target = local_target("/tmp/dev-state", REGION)
        as_stack = stack_target(specs.STACK_NAME, REGION)
    finally:
        client("cloudformation").delete_stack(StackName=specs.STACK_NAME)

    assert target.kind == LOCAL and target.label == "local runtime (/tmp/dev-state)"
    assert (target.settings, target.resources) == (as_stack.settings, as_stack.resources)  # one resolution
    assert target.settings.table_name == resources.tables["table_name"]


def test_the_moto_internals_the_registration_uses_are_where_it_expects_them() -> None:
    cfn_stack.self_check()


def test_sequence_state_machines_are_the_targets_by_its_arn_prefix(aws: None) -> None:
    sfn = client("stepfunctions")
    role = "arn:aws:iam::123456789012:role/r-sfn"
    definition = json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}})
    arns = [
        sfn.create_state_machine(name=name, definition=definition, roleArn=role)["stateMachineArn"]
        for name in ("Blue-seq-welcome", "Blue-seq-nurture", "Green-seq-welcome")
    ]
    try:
        blue = sequence_state_machines("arn:aws:states:us-east-1:123456789012:stateMachine:Blue-seq-")
        green = sequence_state_machines("arn:aws:states:us-east-1:123456789012:stateMachine:Green-seq-")
    finally:
        for arn in arns:
            sfn.delete_state_machine(stateMachineArn=arn)

    assert blue == {"welcome": arns[0], "nurture": arns[1]}
    assert green == {"welcome": arns[2]}


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
