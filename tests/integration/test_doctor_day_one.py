"""``mailstep doctor`` on a new AWS account (docs/deploy.md, "Day one on a new AWS account"):
the sending identity still pending or verified, the SES sandbox, a Lambda concurrency limit
below what the stack's mappings need, and replies' inbound identity and receipt rule set.

Everything runs against moto, a stack target resolved through CloudFormation as for a deployed
stack. Three answers moto cannot give are given at their boundary only: the identity's
verification state (moto never verifies: the test sets it on moto's identity, as SES does once
it sees the DNS records), SES v2 GetAccount (botocore's Stubber, as in test_admin_targets.py)
and ``lambda:GetAccountSettings`` (moto does not implement it: ``doctor.check_concurrency`` and
``doctor.run`` take the answer as a parameter).
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from botocore.stub import Stubber
from moto.core import DEFAULT_ACCOUNT_ID
from moto.ses.models import ses_backends

from local_aws.provision import LocalResources
from ops import doctor
from ops.targets import Target, stack_target
from shared.core import specs
from shared.core.aws import client

REGION = "us-east-1"
DOMAIN = "dayone.test"
TOKENS = ["tok1", "tok2", "tok3"]


def identity_state(name: str, *, verified: bool, dkim: str) -> None:
    """What SES reports once it has (or has not yet) seen the identity's DKIM records."""
    identity = ses_backends[DEFAULT_ACCOUNT_ID][REGION].email_identities[name]
    identity.verified_for_sending_status = verified
    identity.dkim_attributes = {"Status": dkim, "SigningEnabled": True, "Tokens": TOKENS}


@pytest.fixture
def identity(resources: LocalResources) -> Iterator[str]:
    ses = client("sesv2")
    ses.create_email_identity(EmailIdentity=DOMAIN)
    yield DOMAIN
    ses.delete_email_identity(EmailIdentity=DOMAIN)


@pytest.fixture
def target(resources: LocalResources) -> Iterator[Target]:
    """A stack target (outputs: the tables), no resources yet: each test adds its own."""
    cfn = client("cloudformation")
    outputs = {f"{t.id}Name": {"Value": resources.tables[t.setting]} for t in specs.TABLES}
    body = {
        "Resources": {"Queue": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": "dayone-q"}}},
        "Outputs": outputs,
    }
    cfn.create_stack(StackName="DayOne", TemplateBody=json.dumps(body))
    yield stack_target("DayOne", REGION)
    cfn.delete_stack(StackName="DayOne")


def by_name(checks: list[doctor.Check] | tuple[doctor.Check, ...]) -> dict[str, doctor.Check]:
    return {c.name: c for c in checks}


# ----- the sending identity --------------------------------------------------------------------
def test_a_pending_identity_warns_with_the_records_and_what_happens_meanwhile(
    target: Target, identity: str
) -> None:
    # Given the stack created the domain identity and its DKIM records are not published yet
    identity_state(identity, verified=False, dkim="PENDING")

    checks = by_name(doctor.check_identity(target, f"News <news@{identity}>"))

    # Then both checks warn (they do not fail the report): what to publish, and that mail waits
    assert checks["ses-identity"].status == doctor.WARN
    assert "VerifiedForSendingStatus false, DKIM PENDING" in checks["ses-identity"].detail
    assert "mail is held, not lost" in checks["ses-identity"].hint
    assert "status `held` (reason identity_unverified)" in checks["ses-identity"].hint
    assert "72 hours" in checks["ses-identity"].hint
    assert checks["ses-dkim"].status == doctor.WARN
    for token in TOKENS:
        assert f"{token}._domainkey.{identity} CNAME {token}.dkim.amazonses.com" in checks["ses-dkim"].hint


def test_a_verified_identity_passes_and_a_failed_one_fails(target: Target, identity: str) -> None:
    identity_state(identity, verified=True, dkim="SUCCESS")
    verified = by_name(doctor.check_identity(target, f"news@{identity}"))
    assert verified["ses-identity"].status == verified["ses-dkim"].status == doctor.PASS
    assert "VerifiedForSendingStatus true, DKIM SUCCESS" in verified["ses-identity"].detail

    # SES stops looking after 72 hours without the records: that needs the operator
    identity_state(identity, verified=False, dkim="FAILED")
    failed = by_name(doctor.check_identity(target, f"news@{identity}"))
    assert failed["ses-identity"].status == failed["ses-dkim"].status == doctor.FAIL
    assert "tok1._domainkey" in failed["ses-dkim"].hint


# ----- the SES account -------------------------------------------------------------------------
def ses_account(production: bool) -> dict[str, Any]:
    return {
        "ProductionAccessEnabled": production,
        "SendingEnabled": True,
        "EnforcementStatus": "HEALTHY",
        "SendQuota": {"Max24HourSend": 200.0, "MaxSendRate": 1.0, "SentLast24Hours": 3.0},
    }


def test_the_sandbox_says_what_it_allows_and_how_to_leave_it(target: Target) -> None:
    with Stubber(client("sesv2")) as stub:  # moto has no GetAccount
        stub.add_response("get_account", ses_account(production=False))
        checks = by_name(doctor.check_account(target))

    sandbox = checks["ses-production"]
    assert sandbox.status == doctor.FAIL
    assert "only to verified addresses" in sandbox.detail and "200 messages in 24 hours" in sandbox.detail
    assert "put-account-details --production-access-enabled" in sandbox.hint
    assert checks["ses-quota"].detail == "MaxSendRate 1/s, SentLast24Hours 3 of Max24HourSend 200"


# ----- Lambda concurrency ----------------------------------------------------------------------
def zipped() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("handler.py", "def handler(event, context):\n    return None\n")
    return buffer.getvalue()


@pytest.fixture
def functions(target: Target) -> Iterator[Target]:
    """Functions and mappings shaped like mailstep's: 12 capped SQS concurrency (2 + 2 + 3 + 5),
    one uncapped SQS mapping, two stream mappings, one function without a mapping; and
    another stack's capped mapping, which must not count."""
    iam, lam, sqs, ddb = client("iam"), client("lambda"), client("sqs"), client("dynamodb")
    role = iam.create_role(RoleName="dayone-role", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    names = ["d1-sender", "d1-control", "d1-worker", "d1-webhooks", "d1-engagement", "d1-api", "other-fn"]
    for name in names:
        lam.create_function(
            FunctionName=name,
            Runtime="python3.12",
            Role=role,
            Handler="handler.handler",
            Code={"ZipFile": zipped()},
        )
    created: list[str] = []
    capped = {"d1-sender": 2, "d1-control": 2, "d1-worker": 3, "d1-webhooks": 5, "other-fn": 50}
    for name, maximum in [*capped.items(), ("d1-engagement", 0)]:
        url = sqs.create_queue(QueueName=f"{name}-q")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        scaling = {"ScalingConfig": {"MaximumConcurrency": maximum}} if maximum else {}
        mapping = lam.create_event_source_mapping(EventSourceArn=arn, FunctionName=name, **scaling)
        created.append(mapping["UUID"])
    for table in ("d1-main", "d1-events"):
        stream = ddb.create_table(
            TableName=table,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
            StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
        )["TableDescription"]["LatestStreamArn"]
        mapping = lam.create_event_source_mapping(
            EventSourceArn=stream, FunctionName="d1-webhooks", StartingPosition="TRIM_HORIZON"
        )
        created.append(mapping["UUID"])
    yield replace(target, resources={**target.resources, "functions": tuple(names[:-1])})
    for uuid in created:
        lam.delete_event_source_mapping(UUID=uuid)
    for name in names:
        lam.delete_function(FunctionName=name)
    for name in [*capped, "d1-engagement"]:
        sqs.delete_queue(QueueUrl=sqs.get_queue_url(QueueName=f"{name}-q")["QueueUrl"])
    for table in ("d1-main", "d1-events"):
        ddb.delete_table(TableName=table)
    iam.delete_role(RoleName="dayone-role")


def limits(concurrent: int, unreserved: int | None = None) -> dict[str, Any]:
    """A GetAccountSettings answer."""
    unreserved = concurrent if unreserved is None else unreserved
    return {
        "AccountLimit": {"ConcurrentExecutions": concurrent, "UnreservedConcurrentExecutions": unreserved}
    }


def test_the_stack_needs_its_capped_mappings_plus_a_margin(functions: Target) -> None:
    need = doctor.concurrency_needed(functions)

    assert need.capped == {"d1-sender": 2, "d1-control": 2, "d1-worker": 3, "d1-webhooks": 5}
    assert (need.uncapped_sqs, need.streams, need.unmapped) == (1, 2, 1)
    assert need.total == 12 + doctor.UNCAPPED_SQS_FLOOR + 2 + 1


def test_a_new_accounts_low_concurrency_warns_with_the_quota_request(functions: Target) -> None:
    # Given a new account's limit of 10, below the 12 the capped SQS mappings alone may use
    low = doctor.check_concurrency(functions, lambda: limits(10))

    assert low.status == doctor.WARN
    assert "ConcurrentExecutions 10, UnreservedConcurrentExecutions 10" in low.detail
    assert "the stack needs at least 17" in low.detail and "12 for the capped SQS mappings" in low.detail
    assert "--quota-code L-B99A9384 --desired-value 1000" in low.hint

    # the default 1,000 is plenty; reserved concurrency is reported, the stack's counted as its own
    client("lambda").put_function_concurrency(FunctionName="d1-api", ReservedConcurrentExecutions=5)
    fine = doctor.check_concurrency(functions, lambda: limits(1000, unreserved=900))
    assert fine.status == doctor.PASS
    assert "100 reserved in the account (this stack: d1-api 5)" in fine.detail
    # a pool left small by other functions' reservations warns too
    assert doctor.check_concurrency(functions, lambda: limits(1000, unreserved=10)).status == doctor.WARN


def test_an_endpoint_without_get_account_settings_skips_the_check(functions: Target) -> None:
    # moto (and so the local runtime) does not implement lambda:GetAccountSettings
    check = doctor.check_concurrency(functions)

    assert check.status == doctor.SKIP and "does not answer GetAccountSettings" in check.detail


# ----- replies -----------------------------------------------------------------------------------
@pytest.fixture
def rule_set(target: Target) -> Iterator[Target]:
    ses = client("ses")
    ses.create_receipt_rule_set(RuleSetName="dayone-rules")
    ses.create_receipt_rule(
        RuleSetName="dayone-rules",
        Rule={"Name": "replies", "Enabled": True, "Recipients": [f"reply.{DOMAIN}"], "Actions": []},
    )
    yield replace(target, resources={**target.resources, "receipt_rule_sets": ("dayone-rules",)})
    ses.set_active_receipt_rule_set()  # none active
    ses.delete_receipt_rule_set(RuleSetName="dayone-rules")


def test_replies_need_the_inbound_identity_and_the_active_rule_set(rule_set: Target) -> None:
    # Given replies on, before anything was verified or activated
    before = by_name(doctor.check_inbound(rule_set))

    assert before["inbound-identity"].status == doctor.FAIL
    assert f"create-email-identity --email-identity reply.{DOMAIN}" in before["inbound-identity"].hint
    assert before["receipt-rule-set"].status == doctor.FAIL
    assert "no rule set is active" in before["receipt-rule-set"].detail
    assert "set-active-receipt-rule-set --rule-set-name dayone-rules" in before["receipt-rule-set"].hint

    # When the inbound domain's identity is created and pending, then verified, and the set activated
    inbound = f"reply.{DOMAIN}"
    client("sesv2").create_email_identity(EmailIdentity=inbound)
    try:
        identity_state(inbound, verified=False, dkim="PENDING")
        assert by_name(doctor.check_inbound(rule_set))["inbound-identity"].status == doctor.WARN
        identity_state(inbound, verified=True, dkim="SUCCESS")
        client("ses").set_active_receipt_rule_set(RuleSetName="dayone-rules")
        after = by_name(doctor.check_inbound(rule_set))
    finally:
        client("sesv2").delete_email_identity(EmailIdentity=inbound)

    assert after["inbound-identity"].status == after["receipt-rule-set"].status == doctor.PASS


def test_replies_off_skips_the_inbound_checks(target: Target) -> None:
    checks = by_name(doctor.check_inbound(target))

    assert checks["inbound-identity"].status == checks["receipt-rule-set"].status == doctor.SKIP


# ----- the whole report --------------------------------------------------------------------------
def test_day_one_report_warns_without_failing_on_what_only_takes_time(
    functions: Target, identity: str
) -> None:
    identity_state(identity, verified=False, dkim="PENDING")
    answer = {**ses_account(production=True), "SendQuota": {"Max24HourSend": 50000.0, "MaxSendRate": 14.0}}
    functions = replace(
        functions, settings=functions.settings.model_copy(update={"default_from": f"n@{identity}"})
    )
    # moto's answer for the identity, replayed: a Stubber answers every call of the client
    pending = client("sesv2").get_email_identity(EmailIdentity=identity)
    pending.pop("ResponseMetadata")
    with Stubber(client("sesv2")) as stub:  # GetAccount: moto has none
        stub.add_response("get_email_identity", dict(pending), {"EmailIdentity": identity})
        stub.add_response("get_account", answer)
        report = doctor.run(functions, lambda_account_settings=lambda: limits(10))
    checks = by_name(report.checks)

    assert checks["ses-identity"].status == checks["ses-dkim"].status == doctor.WARN
    assert checks["lambda-concurrency"].status == doctor.WARN
    assert checks["inbound-identity"].status == checks["receipt-rule-set"].status == doctor.SKIP
    names = [c.name for c in report.checks]
    assert names[-3:] == ["lambda-concurrency", "inbound-identity", "receipt-rule-set"]
