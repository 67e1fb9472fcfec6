"""The synthesized stack has the properties DESIGN.md promises (storage, API, functions, IAM)."""

from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Match

from shared.core import specs
from tests.infra.cfn import (
    Synth,
    arn,
    as_list,
    dump,
    function_by_handler,
    ref,
    role_statements,
    route_target_function,
    statements_for,
)

# Every role's statements are checked against the spec'd grants in test_grants.py.


@pytest.mark.parametrize("table_id", ["MainTable", "EventsTable"])
def test_tables_are_on_demand_pitr_ttl_encrypted_and_retained(synth: Synth, table_id: str) -> None:
    table = synth.json["Resources"][table_id]
    props = table["Properties"]

    assert props["KeySchema"] == [
        {"AttributeName": "PK", "KeyType": "HASH"},
        {"AttributeName": "SK", "KeyType": "RANGE"},
    ]
    assert {"AttributeName": "PK", "AttributeType": "S"} in props["AttributeDefinitions"]
    assert {"AttributeName": "SK", "AttributeType": "S"} in props["AttributeDefinitions"]
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert props["TimeToLiveSpecification"] == {"AttributeName": "ttl", "Enabled": True}
    # SSEEnabled without a key: the AWS-managed KMS key (aws/dynamodb).
    assert props["SSESpecification"] == {"SSEEnabled": True}
    assert table["DeletionPolicy"] == "Retain"
    assert table["UpdateReplacePolicy"] == "Retain"


def test_main_table_has_no_gsis(synth: Synth) -> None:
    assert "GlobalSecondaryIndexes" not in synth.json["Resources"]["MainTable"]["Properties"]


def test_events_table_has_template_sequence_and_hygiene_indexes(synth: Synth) -> None:
    props = synth.json["Resources"]["EventsTable"]["Properties"]
    indexes = {g["IndexName"]: g for g in props["GlobalSecondaryIndexes"]}

    assert set(indexes) == {
        "TemplateIndex",
        "SequenceIndex",
        "HygieneIndex",
    }  # list hygiene: test_hygiene_infra.py
    assert indexes["TemplateIndex"]["KeySchema"] == [
        {"AttributeName": "template_key", "KeyType": "HASH"},
        {"AttributeName": "SK", "KeyType": "RANGE"},
    ]
    assert indexes["SequenceIndex"]["KeySchema"] == [
        {"AttributeName": "source_key", "KeyType": "HASH"},
        {"AttributeName": "SK", "KeyType": "RANGE"},
    ]
    assert all(g["Projection"] == {"ProjectionType": "ALL"} for g in indexes.values())
    for attribute in ("template_key", "source_key"):
        assert {"AttributeName": attribute, "AttributeType": "S"} in props["AttributeDefinitions"]


def test_post_v1_events_route_invokes_the_api_function(synth: Synth) -> None:
    api_fn_id, _ = function_by_handler(synth, "functions.api.handler.handler")

    assert route_target_function(synth, "POST /v1/events") == api_fn_id
    # API Gateway may invoke the function for exactly this route.
    synth.template.has_resource_properties(
        "AWS::Lambda::Permission",
        {
            "Action": "lambda:InvokeFunction",
            "FunctionName": arn(api_fn_id),
            "Principal": "apigateway.amazonaws.com",
            "SourceArn": Match.object_like(
                {"Fn::Join": ["", Match.array_with([Match.string_like_regexp(r"/\*/\*/v1/events$")])]}
            ),
        },
    )


def test_routes_have_no_api_gateway_authorizer_and_no_catch_all(synth: Synth) -> None:
    route_keys = [r["Properties"]["RouteKey"] for r in synth.resources("AWS::ApiGatewayV2::Route").values()]

    assert "$default" not in route_keys and not any("{proxy+}" in k for k in route_keys)
    assert all(
        r["Properties"].get("AuthorizationType", "NONE") == "NONE"
        for r in synth.resources("AWS::ApiGatewayV2::Route").values()
    )


class _Any:
    def __eq__(self, other: object) -> bool:
        return True


ANY_VALUE = _Any()


def test_api_function_runtime_handler_and_environment(synth: Synth) -> None:
    _, fn = function_by_handler(synth, "functions.api.handler.handler")
    props = fn["Properties"]

    assert props["Runtime"] == "python3.12"
    assert props["Architectures"] == ["x86_64"]
    assert props["Timeout"] == specs.API_FUNCTION.timeout_s
    assert props["MemorySize"] == specs.API_FUNCTION.memory_mb
    assert props["Environment"]["Variables"] == {
        "POWERTOOLS_SERVICE_NAME": "mailstep",
        "POWERTOOLS_METRICS_NAMESPACE": "Mailstep",
        "POWERTOOLS_LOG_LEVEL": "INFO",
        "DATA_TTL_DAYS": "180",
        "TABLE_NAME": ref("MainTable"),
        "EVENTS_TABLE_NAME": ref("EventsTable"),
        "API_KEY_SECRET": ref("ApiKeySecret"),
        "STATE_MACHINE_ARN_PREFIX": ANY_VALUE,
    }
    # The events API starts and stops sequences: it knows every state machine's ARN prefix.
    prefix = props["Environment"]["Variables"]["STATE_MACHINE_ARN_PREFIX"]
    assert dump(prefix).endswith(f':stateMachine:{specs.STATE_MACHINE_PREFIX}"]]}}')


def test_all_functions_share_one_code_asset(synth: Synth) -> None:
    keys = {dump(f["Properties"]["Code"]) for f in synth.resources("AWS::Lambda::Function").values()}

    assert len(keys) == 1
    assets = [
        a for a in (synth.outdir / "Mailstep.assets.json").read_text().split('"displayName"') if "Code" in a
    ]
    assert len(assets) == 1


def test_every_function_logs_to_its_own_group_with_retention(synth: Synth) -> None:
    groups = synth.resources("AWS::Logs::LogGroup")
    functions = synth.resources("AWS::Lambda::Function")

    used = [f["Properties"]["LoggingConfig"]["LogGroup"]["Ref"] for f in functions.values()]
    assert len(set(used)) == len(functions)
    assert set(used) <= set(groups)
    assert all(g["Properties"]["RetentionInDays"] == 90 for g in groups.values())


def test_stage_has_access_logging_and_throttling(synth: Synth) -> None:
    (stage,) = synth.resources("AWS::ApiGatewayV2::Stage").values()
    props = stage["Properties"]

    assert props["StageName"] == "$default"
    assert props["AutoDeploy"] is True
    assert props["DefaultRouteSettings"] == {"ThrottlingBurstLimit": 100, "ThrottlingRateLimit": 50}
    log_group = props["AccessLogSettings"]["DestinationArn"]["Fn::GetAtt"][0]
    assert synth.json["Resources"][log_group]["Type"] == "AWS::Logs::LogGroup"
    access_log = json.loads(props["AccessLogSettings"]["Format"])
    assert access_log["requestId"] == "$context.requestId"
    assert access_log["routeKey"] == "$context.routeKey"  # the HTTP API variable
    # no REST API variable (empty in an HTTP API), and no path (it carries link tokens)
    assert not {"$context.resourcePath", "$context.path"} & set(access_log.values())


# -- IAM: least privilege --------------------------------------------------------------------------


def test_no_iam_statement_has_a_wildcard_action_or_resource(synth: Synth) -> None:
    for fn_spec in specs.FUNCTIONS:
        fn_id, _ = function_by_handler(synth, fn_spec.handler)
        for statement in role_statements(synth, fn_id):
            assert statement["Effect"] == "Allow"
            assert not any("*" in action for action in as_list(statement["Action"])), statement
            assert "*" not in as_list(statement["Resource"]), statement


def test_roles_have_no_managed_policies(synth: Synth) -> None:
    services = []
    for role in synth.resources("AWS::IAM::Role").values():
        assert "ManagedPolicyArns" not in role["Properties"]
        (statement,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        assert statement["Action"] == "sts:AssumeRole" and statement["Effect"] == "Allow"
        services.append(statement["Principal"]["Service"])
    # One role per function, one per sequence state machine, and the one EventBridge Scheduler
    # resumes callback Tasks with; nothing else assumes a role.
    assert services.count("lambda.amazonaws.com") == len(specs.FUNCTIONS)
    assert services.count("scheduler.amazonaws.com") == 1
    assert set(services) <= {"lambda.amazonaws.com", "states.amazonaws.com", "scheduler.amazonaws.com"}


def test_the_scheduler_role_may_only_resume_this_stacks_sequences(synth: Synth) -> None:
    """EventBridge Scheduler's role: trusted by the service for this account only, allowed
    SendTaskSuccess on the sequence state machines (name prefix) and nothing else."""
    roles = {
        logical_id: role
        for logical_id, role in synth.resources("AWS::IAM::Role").items()
        if role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"]["Service"]
        == "scheduler.amazonaws.com"
    }
    ((logical_id, role),) = roles.items()
    (trust,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Condition"] == {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}
    statements = [
        statement
        for policy in synth.resources("AWS::IAM::Policy").values()
        if {"Ref": logical_id} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]
    (statement,) = statements
    assert statement["Action"] == "states:SendTaskSuccess" and statement["Effect"] == "Allow"
    resource = json.dumps(statement["Resource"])
    assert f":stateMachine:{specs.state_machine_prefix(specs.STACK_NAME)}*" in resource
    (group,) = synth.resources("AWS::Scheduler::ScheduleGroup").values()
    assert group["Properties"]["Name"] == specs.schedule_group_name(specs.STACK_NAME)


@pytest.mark.parametrize("fn_spec", specs.FUNCTIONS, ids=lambda f: f.name)
def test_secret_grants_cover_exactly_the_specced_secrets(synth: Synth, fn_spec: specs.FunctionSpec) -> None:
    fn_id, fn = function_by_handler(synth, fn_spec.handler)
    statements = statements_for(role_statements(synth, fn_id), "secretsmanager")

    granted = sorted(dump(r) for s in statements for r in as_list(s["Resource"]))
    # the stack's own secrets by reference; the webhook endpoints' secrets (made by the operator)
    # by this deployment's name prefix only
    endpoint_secrets = [
        {
            "Fn::Join": [
                "",
                [
                    "arn:",
                    {"Ref": "AWS::Partition"},
                    ":secretsmanager:",
                    {"Ref": "AWS::Region"},
                    ":",
                    {"Ref": "AWS::AccountId"},
                    f":secret:{specs.WEBHOOK_SECRET_PREFIX}/",
                    ref(specs.MAIN_TABLE.id),
                    "/*",
                ],
            ]
        }
        for g in fn_spec.grants
        if g.resource == specs.WEBHOOK_SECRETS
    ]
    assert granted == sorted([*(dump(ref(s.id)) for s in fn_spec.read_secrets), *map(dump, endpoint_secrets)])
    assert {a for s in statements for a in as_list(s["Action"])} <= {"secretsmanager:GetSecretValue"}
    # The function is told where its secrets are, and about no other secret.
    variables = fn["Properties"]["Environment"]["Variables"]
    secret_vars = {k: v for k, v in variables.items() if k in {specs.ENV[s.setting] for s in specs.SECRETS}}
    assert secret_vars == {specs.ENV[s.setting]: ref(s.id) for s in fn_spec.read_secrets}


def test_log_grants_are_scoped_to_the_functions_own_group(synth: Synth) -> None:
    for fn_id, fn in synth.resources("AWS::Lambda::Function").items():
        statements = statements_for(role_statements(synth, fn_id), "logs")
        group = fn["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
        assert statements == [
            {
                "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
                "Effect": "Allow",
                "Resource": arn(group),
            }
        ]


def test_outputs_name_every_specced_resource(synth: Synth) -> None:
    outputs = synth.json["Outputs"]

    assert set(outputs) == {specs.API_URL_OUTPUT, *specs.stack_outputs()}
    assert outputs["ApiUrl"]["Value"]["Fn::GetAtt"][1] == "ApiEndpoint"
    assert outputs["MainTableName"]["Value"] == ref("MainTable")
    assert outputs["EventsTableName"]["Value"] == ref("EventsTable")
    assert outputs["ApiKeySecretArn"]["Value"] == ref("ApiKeySecret")
