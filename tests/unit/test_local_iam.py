"""The local runtime's IAM check: which (action, resource) a request is, and how a role's
identity-based policy decides it (explicit Deny wins, then Allow, else the implicit deny)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from local_aws.bootstrap import Guard, RolePolicy, requests_for

ACCOUNT, REGION = "123456789012", "us-east-1"
MAIN = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/mailstep-main"
EVENTS = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/mailstep-events"


def requests(prefix: str, operation: str, **params: object) -> list[tuple[str, str]]:
    return requests_for(prefix, operation, dict(params), REGION, ACCOUNT)


def test_a_transaction_is_authorized_item_by_item() -> None:
    items = [
        {"Put": {"TableName": "mailstep-main", "Item": {}}},
        {"Update": {"TableName": "mailstep-events", "Key": {}}},
        {"ConditionCheck": {"TableName": "mailstep-main", "Key": {}}},
        {"Delete": {"TableName": "mailstep-main", "Key": {}}},
    ]
    assert requests("dynamodb", "TransactWriteItems", TransactItems=items) == [
        ("dynamodb:PutItem", MAIN),
        ("dynamodb:UpdateItem", EVENTS),
        ("dynamodb:ConditionCheckItem", MAIN),
        ("dynamodb:DeleteItem", MAIN),
    ]


def test_a_schedule_is_authorized_on_its_group_and_name_and_passes_its_target_role() -> None:
    role = f"arn:aws:iam::{ACCOUNT}:role/scheduler"
    schedule = f"arn:aws:scheduler:{REGION}:{ACCOUNT}:schedule/mailstep-sequences/S1-abc"
    for operation in ("CreateSchedule", "UpdateSchedule"):
        found = requests(
            "scheduler", operation, GroupName="mailstep-sequences", Name="S1-abc", Target={"RoleArn": role}
        )
        assert found == [(f"scheduler:{operation}", schedule), ("iam:PassRole", role)]
    assert requests("scheduler", "DeleteSchedule", GroupName="mailstep-sequences", Name="S1-abc") == [
        ("scheduler:DeleteSchedule", schedule)
    ]
    default = f"arn:aws:scheduler:{REGION}:{ACCOUNT}:schedule/default/x"
    assert requests("scheduler", "GetSchedule", Name="x") == [("scheduler:GetSchedule", default)]
    # a grant on the group's schedules and on the role allows exactly that
    policy = RolePolicy(
        [
            {
                "Effect": "Allow",
                "Action": ["scheduler:CreateSchedule"],
                "Resource": f"arn:aws:scheduler:{REGION}:{ACCOUNT}:schedule/mailstep-sequences/*",
            },
            {"Effect": "Allow", "Action": "iam:PassRole", "Resource": role},
        ]
    )
    assert all(
        policy.decide(action, resource)
        for action, resource in [("scheduler:CreateSchedule", schedule), ("iam:PassRole", role)]
    )
    assert not policy.decide("scheduler:CreateSchedule", default)
    assert not policy.decide("iam:PassRole", f"arn:aws:iam::{ACCOUNT}:role/other")


def test_index_queries_batches_queues_and_secrets_name_their_resources() -> None:
    assert requests("dynamodb", "Query", TableName="mailstep-events", IndexName="TemplateIndex") == [
        ("dynamodb:Query", f"{EVENTS}/index/TemplateIndex")
    ]
    assert requests("dynamodb", "BatchGetItem", RequestItems={"mailstep-main": {}}) == [
        ("dynamodb:BatchGetItem", MAIN)
    ]
    url = f"http://127.0.0.1:4566/{ACCOUNT}/mailstep-send"
    assert requests("sqs", "SendMessageBatch", QueueUrl=url) == [
        ("sqs:SendMessage", f"arn:aws:sqs:{REGION}:{ACCOUNT}:mailstep-send")
    ]
    assert requests("states", "StopExecution", executionArn="arn:x") == [("states:StopExecution", "arn:x")]
    assert requests("s3", "GetObject", Bucket="b", Key="inbound/abc") == [
        ("s3:GetObject", "arn:aws:s3:::b/inbound/abc")
    ]
    assert requests("sqs", "ListQueues") == [("sqs:ListQueues", "*")]


IDENTITY = f"arn:aws:ses:{REGION}:{ACCOUNT}:identity"
CONFIGURATION_SET = f"arn:aws:ses:{REGION}:{ACCOUNT}:configuration-set/mailstep"
ACME = f"{IDENTITY}/acme.test|{IDENTITY}/hello@acme.test"
RAW = {"Raw": {"Data": b"From: Acme <hello@acme.test>\r\nTo: ann@example.com\r\n\r\nhi"}}
SIMPLE = {"Simple": {"Subject": {"Data": "s"}, "Body": {"Text": {"Data": "b"}}}}


def test_a_raw_v2_send_is_authorized_as_send_raw_email_on_the_identity_and_the_configuration_set() -> None:
    # Given an SES v2 SendEmail with raw content (how mailstep sends)
    found = requests(
        "ses",
        "SendEmail",
        FromEmailAddress="Acme <hello@acme.test>",
        Destination={"ToAddresses": ["ann@example.com"]},
        Content=RAW,
        ConfigurationSetName="mailstep",
    )
    # then it needs ses:SendRawEmail (what AWS names when it refuses), and ses:SendEmail as well
    # (the stricter reading), on the sender's identity and the configuration set.
    assert found == [
        ("ses:SendRawEmail", ACME),
        ("ses:SendRawEmail", CONFIGURATION_SET),
        ("ses:SendEmail", ACME),
        ("ses:SendEmail", CONFIGURATION_SET),
    ]


def test_simple_content_and_v1_raw_sends_need_their_own_action() -> None:
    simple = requests("ses", "SendEmail", FromEmailAddress="hello@acme.test", Content=SIMPLE)
    assert simple == [("ses:SendEmail", ACME)]
    v1 = requests("ses", "SendRawEmail", Source="hello@acme.test", RawMessage={"Data": b"x"})
    assert v1 == [("ses:SendRawEmail", ACME)]
    # without FromEmailAddress, SES takes the sender from the raw message's From header
    from_header = requests("ses", "SendEmail", Content=RAW)
    assert from_header[0] == ("ses:SendRawEmail", ACME)


def test_in_the_sandbox_a_send_is_authorized_on_each_recipient_identity_too() -> None:
    params = {
        "FromEmailAddress": "hello@acme.test",
        "Destination": {"ToAddresses": ["Ann <ann@example.com>"], "BccAddresses": ["bo@b.test"]},
        "Content": SIMPLE,
    }
    assert requests_for("ses", "SendEmail", params, REGION, ACCOUNT, ses_sandbox=True) == [
        ("ses:SendEmail", ACME),
        ("ses:SendEmail", f"{IDENTITY}/example.com|{IDENTITY}/ann@example.com"),
        ("ses:SendEmail", f"{IDENTITY}/b.test|{IDENTITY}/bo@b.test"),
    ]


def test_the_from_address_condition_scopes_a_grant_on_every_identity() -> None:
    # Given the template's grant: every identity, for From addresses on the sending domain
    statement = {
        "Effect": "Allow",
        "Action": ["ses:SendEmail", "ses:SendRawEmail"],
        "Resource": f"{IDENTITY}/*",
        "Condition": {"StringLike": {"ses:FromAddress": ["*@acme.test", "*@*.acme.test"]}},
    }

    def guard() -> Guard:
        return Guard(
            policy=RolePolicy([statement]),
            region=REGION,
            account=ACCOUNT,
            role_arn=f"arn:aws:iam::{ACCOUNT}:role/r",
            function_name="f",
            ses_sandbox=True,
        )

    ok = {"FromEmailAddress": "A <news@mail.acme.test>", "Destination": {"ToAddresses": ["x@y.test"]}}
    assert guard().authorize("ses", "SendEmail", {**ok, "Content": RAW}) is None
    other = {**ok, "FromEmailAddress": "hello@evil.test", "Content": RAW}
    assert guard().authorize("ses", "SendEmail", other) == ("ses:SendRawEmail", f"{IDENTITY}/evil.test")


def test_allow_with_wildcards_explicit_deny_wins_and_anything_else_is_denied() -> None:
    policy = RolePolicy(
        [
            {
                "Effect": "Allow",
                "Action": ["dynamodb:Get*", "dynamodb:PutItem"],
                "Resource": [MAIN, f"{EVENTS}*"],
            },
            {"Effect": "Deny", "Action": "dynamodb:PutItem", "Resource": f"{EVENTS}/index/*"},
        ]
    )
    assert policy.decide("dynamodb:GetItem", MAIN)
    assert policy.decide("DynamoDB:getitem", MAIN)  # actions are case-insensitive
    assert policy.decide("dynamodb:PutItem", EVENTS)
    assert not policy.decide("dynamodb:PutItem", f"{EVENTS}/index/TemplateIndex")  # explicit deny
    assert not policy.decide("dynamodb:Scan", MAIN)  # implicit deny
    assert not policy.decide("dynamodb:GetItem", MAIN.upper())  # resources are case-sensitive


def test_an_allow_whose_condition_cannot_be_shown_to_hold_grants_nothing() -> None:
    conditional = {
        "Effect": "Allow",
        "Action": "sns:Publish",
        "Resource": "*",
        "Condition": {"StringEquals": {"aws:SourceAccount": ACCOUNT}},
    }
    assert not RolePolicy([conditional]).decide("sns:Publish", "arn:t")
    assert RolePolicy([conditional], {"aws:sourceaccount": ACCOUNT}).decide("sns:Publish", "arn:t")


def test_the_guard_records_every_pair_and_names_the_first_denied() -> None:
    guard = Guard(
        policy=RolePolicy([{"Effect": "Allow", "Action": "dynamodb:PutItem", "Resource": MAIN}]),
        region=REGION,
        account=ACCOUNT,
        role_arn=f"arn:aws:iam::{ACCOUNT}:role/r",
        function_name="f",
    )
    items = [{"Put": {"TableName": "mailstep-main"}}, {"Update": {"TableName": "mailstep-main"}}]
    assert guard.authorize("dynamodb", "TransactWriteItems", {"TransactItems": items}) == (
        "dynamodb:UpdateItem",
        MAIN,
    )
    assert [c["allowed"] for c in guard.calls] == [True, False]


def test_the_guard_s_own_cpu_time_is_taken_apart_from_the_function_s(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a guard installed on botocore whose policy decisions take 50 ms of CPU each
    import boto3
    from botocore.client import BaseClient
    from botocore.stub import Stubber

    monkeypatch.setattr(BaseClient, "_make_api_call", BaseClient._make_api_call)  # restored after
    guard = Guard(
        policy=RolePolicy([{"Effect": "Allow", "Action": "dynamodb:*", "Resource": "*"}]),
        region=REGION,
        account=ACCOUNT,
        role_arn=f"arn:aws:iam::{ACCOUNT}:role/r",
        function_name="f",
    )
    decide = guard.authorize

    def slow(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        while time.thread_time() - started < 0.05:
            pass
        return decide(*args, **kwargs)

    monkeypatch.setattr(guard, "authorize", slow)
    guard.install()
    ddb = boto3.client("dynamodb", region_name=REGION, aws_access_key_id="k", aws_secret_access_key="s")
    with Stubber(ddb) as stub:
        stub.add_response("get_item", {}, {"TableName": "t", "Key": {"PK": {"S": "a"}}})
        stub.add_response("get_item", {}, {"TableName": "t", "Key": {"PK": {"S": "a"}}})

        # When the function makes two requests
        ddb.get_item(TableName="t", Key={"PK": {"S": "a"}})
        ddb.get_item(TableName="t", Key={"PK": {"S": "a"}})

    # Then the guard's 100 ms are its own (left out of the invocation's cpu_s), counted once
    assert 0.1 <= guard.take_overhead() < 0.2
    assert guard.take_overhead() == 0.0
