"""Production parity of the synthesized stack: what ``cdk deploy`` ships works as the code
expects. Each function's role grants exactly its spec'd actions; every function's settings
validate from the environment the template gives it; services can publish to the topics
they target; SQS event sources outlast their function; state machine names carry the stack
name; the stack owns (or, opted in, leaves alone) the SES identity and outputs its DKIM records.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from shared.core import specs
from shared.core.settings import Settings
from stacks.constructs.engagement import DKIM_RECORDS, dkim_output_keys
from tests.infra.cfn import Synth, as_list, function_by_handler, role_statements, synthesize

ROOT = Path(__file__).resolve().parents[2]
DOMAIN = "mail.example.com"
FULL = {  # every optional capability on
    "mailstep:sesDomain": DOMAIN,
    "mailstep:fromAddress": f"Acme <hello@{DOMAIN}>",
    "mailstep:mailFromSubdomain": "bounce",
    "mailstep:inboundDomain": "reply.example.com",
    "mailstep:replyForwardTo": "owner@example.com",
    "mailstep:alarmEmail": "ops@example.com",
}
STAGING = "MailstepStaging"


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    return synthesize(tmp_path_factory.mktemp("cdk.out.full"), FULL)


@pytest.fixture(scope="module")
def staging(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    return synthesize(tmp_path_factory.mktemp("cdk.out.staging"), {"mailstep:stackName": STAGING})


@pytest.fixture(scope="module")
def existing(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    context = {"mailstep:sesDomain": DOMAIN, "mailstep:useExistingIdentity": "true"}
    return synthesize(tmp_path_factory.mktemp("cdk.out.existing"), context)


# ----- rendering intrinsics ------------------------------------------------------------------------


def render(value: Any) -> str:
    """A CloudFormation value as one string: ``{"Ref": "X"}`` -> ``<X>``, GetAtt -> ``<X.Arn>``."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Ref" in value:
        return f"<{value['Ref']}>"
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        return "<" + ".".join(value["Fn::GetAtt"]) + ">"
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return str(separator).join(render(p) for p in parts)
    raise AssertionError(f"unexpected intrinsic {value!r}")


def _arn(service: str, resource: str) -> str:
    return f"arn:<AWS::Partition>:{service}:<AWS::Region>:<AWS::AccountId>:{resource}"


def expected_arns(synth: Synth, resource: specs.Resource, stack_name: str, domain: str) -> set[str]:
    """How the template spells the ARN(s) of a granted resource."""
    if isinstance(resource, specs.TableSpec | specs.QueueSpec | specs.FailureQueueSpec):
        return {f"<{resource.id}.Arn>"}
    if isinstance(resource, specs.TableIndex):
        return {f"<{resource.table.id}.Arn>/index/{resource.index}"}
    if isinstance(resource, specs.TableStream):
        return {f"<{resource.table.id}.StreamArn>"}
    if isinstance(resource, specs.SecretSpec | specs.TopicSpec):
        return {f"<{resource.id}>"}
    if isinstance(resource, specs.ConfigurationSetSpec):
        return {_arn("ses", f"configuration-set/<{resource.id}>")}
    prefix = specs.state_machine_prefix(stack_name)
    if resource == specs.SES_IDENTITY:  # every identity, for From addresses on the domain
        return {_arn("ses", "identity/*")}
    if resource == specs.SEQUENCE_MACHINES:
        return {_arn("states", f"stateMachine:{prefix}*")}
    if resource == specs.SEQUENCE_EXECUTIONS:
        return {_arn("states", f"execution:{prefix}*:*")}
    if resource == specs.WEBHOOK_SECRETS:  # the endpoints' secrets, by this deployment's name prefix
        return {_arn("secretsmanager", f"secret:{specs.WEBHOOK_SECRET_PREFIX}/<{specs.MAIN_TABLE.id}>/*")}
    if resource == specs.INBOUND_OBJECTS:
        (bucket,) = synth.resources("AWS::S3::Bucket")
        return {f"<{bucket}.Arn>/inbound/*"}
    if resource == specs.SEQUENCE_SCHEDULES:  # the callback Tasks' schedules, in the stack's group
        return {_arn("scheduler", f"schedule/{specs.schedule_group_name(stack_name)}/*")}
    if resource == specs.SCHEDULER_ROLE:  # the one role EventBridge Scheduler assumes
        (role,) = [
            logical_id
            for logical_id, r in synth.resources("AWS::IAM::Role").items()
            if r["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"]["Service"]
            == "scheduler.amazonaws.com"
        ]
        return {f"<{role}.Arn>"}
    raise AssertionError(f"no ARN rule for {resource!r}")


def from_address_condition(domain: str) -> dict[str, Any]:
    """The condition of the sending grant: From addresses on the sending domain only."""
    return {"StringLike": {"ses:FromAddress": [f"*@{domain}", f"*@*.{domain}"]}}


def granted_pairs(synth: Synth, fn_id: str, domain: str = "example.com") -> set[tuple[str, str]]:
    """(action, rendered resource) for every Allow of a function's role, its log group excepted.
    The one conditioned statement is the sending grant, scoped to ``domain``'s From addresses."""
    pairs = set()
    for statement in role_statements(synth, fn_id):
        assert statement["Effect"] == "Allow" and "NotAction" not in statement
        actions = as_list(statement["Action"])
        if "Condition" in statement:
            assert set(actions) == set(specs.SES_SEND_ACTIONS), statement
            assert [render(r) for r in as_list(statement["Resource"])] == [_arn("ses", "identity/*")]
            assert statement["Condition"] == from_address_condition(domain)
        if set(actions) == {"logs:CreateLogStream", "logs:PutLogEvents"}:
            continue  # the function's own log group (test_stack.py checks its scope)
        pairs |= {(a, render(r)) for a in actions for r in as_list(statement["Resource"])}
    return pairs


def spec_pairs(
    synth: Synth, spec: specs.FunctionSpec, settings: dict[str, str], stack_name: str, domain: str
):
    return {
        (action, arn)
        for grant in specs.all_grants(spec, settings)
        for action in grant.actions
        for arn in expected_arns(synth, grant.resource, stack_name, domain)
    }


# ----- 8. least privilege: each role grants exactly its spec ------------------------------------


@pytest.mark.parametrize("fn_spec", specs.FUNCTIONS, ids=lambda f: f.name)
def test_each_role_grants_exactly_the_specced_actions(
    synth: Synth, full: Synth, fn_spec: specs.FunctionSpec
) -> None:
    # Default deployment: no domain (any identity), replies off (no bucket, no forwarding).
    fn_id, _ = function_by_handler(synth, fn_spec.handler)
    granted = granted_pairs(synth, fn_id)
    without_inbound = [g for g in specs.all_grants(fn_spec, {}) if g.resource != specs.INBOUND_OBJECTS]
    expected = {
        (a, arn)
        for g in without_inbound
        for a in g.actions
        for arn in expected_arns(synth, g.resource, specs.STACK_NAME, "")
    }
    assert granted == expected

    # Every capability on: the domain identity, the inbound bucket, reply forwarding.
    fn_id, _ = function_by_handler(full, fn_spec.handler)
    settings = {"reply_forward_to": FULL["mailstep:replyForwardTo"]}
    assert granted_pairs(full, fn_id, DOMAIN) == spec_pairs(full, fn_spec, settings, specs.STACK_NAME, DOMAIN)


def test_no_role_holds_broad_actions_or_index_wildcards(full: Synth) -> None:
    for fn_spec in specs.FUNCTIONS:
        fn_id, _ = function_by_handler(full, fn_spec.handler)
        for action, resource in granted_pairs(full, fn_id, DOMAIN):
            assert "*" not in action, (fn_spec.name, action)
            assert not resource.endswith("/index/*"), (fn_spec.name, resource)
            assert action not in {
                "dynamodb:BatchWriteItem",
                "sqs:ChangeMessageVisibility",
            }


def test_reply_forwarding_alone_grants_the_inbound_function_ses(synth: Synth, full: Synth) -> None:
    def ses_actions(s: Synth) -> set[str]:
        fn_id, _ = function_by_handler(s, specs.INBOUND_FUNCTION.handler)
        return {
            a
            for a, _ in granted_pairs(s, fn_id, DOMAIN if s is full else "example.com")
            if a.startswith("ses:")
        }

    assert ses_actions(synth) == set()
    assert ses_actions(full) == {"ses:SendEmail", "ses:SendRawEmail"}


def cdk_grant_send_email_actions() -> set[str]:
    """What AWS CDK's own EmailIdentity.grantSendEmail grants a role (it encodes what SES checks)."""
    from aws_cdk import App, Stack
    from aws_cdk import aws_iam as iam
    from aws_cdk import aws_ses as ses
    from aws_cdk.assertions import Template

    stack = Stack(App(), "GrantProbe")
    role = iam.Role(stack, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    ses.EmailIdentity.from_email_identity_name(stack, "Identity", DOMAIN).grant_send_email(role)
    (policy,) = Template.from_stack(stack).find_resources("AWS::IAM::Policy").values()
    return {a for st in policy["Properties"]["PolicyDocument"]["Statement"] for a in as_list(st["Action"])}


@pytest.mark.parametrize("fn_spec", [f for f in specs.FUNCTIONS if f.sends_email], ids=lambda f: f.name)
def test_every_sending_role_holds_at_least_what_cdk_grant_send_email_gives(
    full: Synth, fn_spec: specs.FunctionSpec
) -> None:
    cdk_actions = cdk_grant_send_email_actions()
    assert "ses:SendRawEmail" in cdk_actions  # CDK grants the raw send: SES v2 raw content needs it
    fn_id, _ = function_by_handler(full, fn_spec.handler)
    granted = granted_pairs(full, fn_id, DOMAIN)
    identity = _arn("ses", "identity/*")
    configuration_set = _arn("ses", f"configuration-set/<{specs.CONFIGURATION_SET.id}>")
    assert cdk_actions <= {a for a, r in granted if r == identity}
    assert cdk_actions <= {a for a, r in granted if r == configuration_set}


def test_granted_actions_name_actions_by_resource_kind() -> None:
    granted = specs.granted_actions(specs.SEQUENCE_CLEANUP_FUNCTION)
    assert granted == {
        "dynamodb:DeleteItem": frozenset({"table/MainTable"}),
        "dynamodb:UpdateItem": frozenset({"table/MainTable"}),
        # the Lambda service sends a failed asynchronous invocation's record with the role
        "sqs:SendMessage": frozenset({"queue/SequenceCleanupFailures"}),
    }
    sender = specs.granted_actions(specs.SENDER_FUNCTION)
    assert sender["ses:SendEmail"] == {
        "identity",
        "configuration-set/ConfigurationSet",
        "configuration-set/TransactionalConfigurationSet",
    }
    assert sender["ses:SendRawEmail"] == sender["ses:SendEmail"]
    assert sender["sqs:ReceiveMessage"] == {"queue/SendQueue"}
    inbound = specs.granted_actions(specs.INBOUND_FUNCTION, {})
    assert "ses:SendEmail" not in inbound and "s3:GetObject" in inbound


# ----- 2. settings validate from the template's environment ------------------------------------


PLACEHOLDER = "https://placeholder.example/value"  # any token: a name, an ARN, a URL


@pytest.mark.parametrize("fn_spec", specs.FUNCTIONS, ids=lambda f: f.name)
def test_settings_validate_from_the_environment_the_template_gives(
    synth: Synth, full: Synth, fn_spec: specs.FunctionSpec
) -> None:
    known = set(specs.ENV.values())
    for template in (synth, full):
        _, fn = function_by_handler(template, fn_spec.handler)
        variables = fn["Properties"]["Environment"]["Variables"]
        env = {k: v if isinstance(v, str) else PLACEHOLDER for k, v in variables.items()}
        assert {k for k in env if not k.startswith("POWERTOOLS_")} <= known
        settings = Settings.from_env(env)  # what the handler does at import
        for table in fn_spec.read_write_tables:
            assert getattr(settings, table.setting) == PLACEHOLDER
        if specs.EVENTS_TABLE not in fn_spec.read_write_tables:
            assert settings.events_table_name == ""  # not granted: not named


# ----- 4. services may publish to the topics they target -----------------------------------------


def _condition_keys(statement: dict[str, Any]) -> set[str]:
    return {k.lower() for block in statement.get("Condition", {}).values() for k in block}


def _allows(statement: dict[str, Any], principal: str, action: str) -> bool:
    return (
        statement["Effect"] == "Allow"
        and statement.get("Principal") == {"Service": principal}
        and action in as_list(statement["Action"])
    )


def publish_problems(template: dict[str, Any]) -> list[str]:
    """Every topic a service publishes to allows that service (scoped), every subscribed queue
    allows its topic, and the inbound bucket lets SES put mail; the problems found."""
    resources = template["Resources"]
    return _topic_problems(resources) + _queue_problems(resources) + _bucket_problems(resources)


def _of(resources: dict[str, Any], cfn_type: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in resources.items() if r["Type"] == cfn_type}


def _publishers(resources: dict[str, Any]) -> set[tuple[str, str]]:
    """(topic logical id, service principal) of every topic a service is pointed at."""
    targets: set[tuple[str, str]] = set()
    for d in _of(resources, "AWS::SES::ConfigurationSetEventDestination").values():
        sns = d["Properties"]["EventDestination"].get("SnsDestination")
        if sns:
            targets.add((sns["TopicARN"]["Ref"], "ses.amazonaws.com"))
    for rule in _of(resources, "AWS::SES::ReceiptRule").values():
        for action in rule["Properties"]["Rule"]["Actions"]:
            for kind in ("S3Action", "SNSAction"):
                if "TopicArn" in action.get(kind, {}):
                    targets.add((action[kind]["TopicArn"]["Ref"], "ses.amazonaws.com"))
    for alarm in _of(resources, "AWS::CloudWatch::Alarm").values():
        for action in alarm["Properties"].get("AlarmActions", []):
            targets.add((action["Ref"], "cloudwatch.amazonaws.com"))
    return targets


def _topic_problems(resources: dict[str, Any]) -> list[str]:
    problems = []
    policies = _of(resources, "AWS::SNS::TopicPolicy").values()
    for topic, principal in sorted(_publishers(resources)):
        statements = [
            s
            for p in policies
            if {"Ref": topic} in p["Properties"]["Topics"]
            for s in p["Properties"]["PolicyDocument"]["Statement"]
        ]
        allowed = [s for s in statements if _allows(s, principal, "sns:Publish")]
        if not any({"aws:sourceaccount", "aws:sourcearn"} & _condition_keys(s) for s in allowed):
            problems.append(f"topic {topic}: no scoped Allow sns:Publish for {principal}")
    return problems


def _queue_problems(resources: dict[str, Any]) -> list[str]:
    problems = []
    queue_policies = _of(resources, "AWS::SQS::QueuePolicy").values()
    for sub in _of(resources, "AWS::SNS::Subscription").values():
        if sub["Properties"]["Protocol"] != "sqs":
            continue
        queue, topic = sub["Properties"]["Endpoint"]["Fn::GetAtt"][0], sub["Properties"]["TopicArn"]
        allowed = [
            s
            for p in queue_policies
            if {"Ref": queue} in p["Properties"]["Queues"]
            for s in p["Properties"]["PolicyDocument"]["Statement"]
            if _allows(s, "sns.amazonaws.com", "sqs:SendMessage")
            and any(block.get("aws:SourceArn") == topic for block in s.get("Condition", {}).values())
        ]
        if not allowed:
            problems.append(f"queue {queue}: no Allow sqs:SendMessage for its topic {topic['Ref']}")
    return problems


def _bucket_problems(resources: dict[str, Any]) -> list[str]:
    problems = []
    for bucket in _of(resources, "AWS::S3::Bucket"):
        statements = [
            s
            for p in _of(resources, "AWS::S3::BucketPolicy").values()
            if p["Properties"]["Bucket"] == {"Ref": bucket}
            for s in p["Properties"]["PolicyDocument"]["Statement"]
        ]
        if not any(
            _allows(s, "ses.amazonaws.com", "s3:PutObject") and _condition_keys(s) for s in statements
        ):
            problems.append(f"bucket {bucket}: SES may not put received mail")
    return problems


def test_every_service_may_publish_where_it_is_pointed(full: Synth) -> None:
    assert {r["Type"] for r in full.json["Resources"].values()} >= {
        "AWS::SES::ReceiptRule",
        "AWS::CloudWatch::Alarm",
        "AWS::SES::ConfigurationSetEventDestination",
        "AWS::S3::Bucket",
    }
    assert publish_problems(full.json) == []


def _without_allow(template: dict[str, Any], cfn_type: str, principal: str) -> dict[str, Any]:
    changed = copy.deepcopy(template)
    for resource in changed["Resources"].values():
        if resource["Type"] == cfn_type:
            document = resource["Properties"]["PolicyDocument"]
            document["Statement"] = [
                s for s in document["Statement"] if s.get("Principal") != {"Service": principal}
            ]
    return changed


@pytest.mark.parametrize(
    ("cfn_type", "principal", "problem"),
    [
        ("AWS::SNS::TopicPolicy", "cloudwatch.amazonaws.com", "AlarmTopic"),
        ("AWS::SNS::TopicPolicy", "ses.amazonaws.com", "InboundTopic"),
        ("AWS::SNS::TopicPolicy", "ses.amazonaws.com", "SesEventsTopic"),
        ("AWS::SQS::QueuePolicy", "sns.amazonaws.com", "queue EngagementQueue"),
        ("AWS::S3::BucketPolicy", "ses.amazonaws.com", "SES may not put"),
    ],
)
def test_the_publish_check_fails_when_an_allow_is_removed(
    full: Synth, cfn_type: str, principal: str, problem: str
) -> None:
    problems = publish_problems(_without_allow(full.json, cfn_type, principal))
    assert any(problem in p for p in problems), problems


def test_the_alarm_and_inbound_topics_are_scoped_to_this_account(full: Synth) -> None:
    by_topic = {
        p["Properties"]["Topics"][0]["Ref"]: p["Properties"]["PolicyDocument"]["Statement"]
        for p in full.resources("AWS::SNS::TopicPolicy").values()
    }
    (alarm_topic,) = [t for t in by_topic if t.startswith("AlarmsAlarmTopic")]
    (allow,) = [s for s in by_topic[alarm_topic] if s["Effect"] == "Allow"]
    assert allow["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    assert render(allow["Condition"]["ArnLike"]["aws:SourceArn"]) == _arn("cloudwatch", "alarm:*")
    (allow,) = [s for s in by_topic[specs.INBOUND_TOPIC.id] if s["Effect"] == "Allow"]
    (rule_set,) = full.resources("AWS::SES::ReceiptRuleSet")
    assert render(allow["Condition"]["ArnLike"]["aws:SourceArn"]) == _arn(
        "ses", f"receipt-rule-set/<{rule_set}>:receipt-rule/*"
    )


# ----- 5. SQS event sources outlast their function --------------------------------------------------


@pytest.mark.parametrize("which", ["synth", "full"])
def test_event_source_queues_hide_messages_for_6x_the_function_timeout(
    which: str, request: pytest.FixtureRequest
) -> None:
    template: Synth = request.getfixturevalue(which)
    resources = template.json["Resources"]
    # SQS mappings (a stream mapping's source is a table's StreamArn: test_spec_agreement.py)
    mappings = [
        m
        for m in template.resources("AWS::Lambda::EventSourceMapping").values()
        if m["Properties"]["EventSourceArn"]["Fn::GetAtt"][1] == "Arn"
    ]
    assert len(mappings) == sum(len(f.event_sources) for f in specs.FUNCTIONS)
    for mapping in mappings:
        queue = resources[mapping["Properties"]["EventSourceArn"]["Fn::GetAtt"][0]]["Properties"]
        function = resources[mapping["Properties"]["FunctionName"]["Ref"]]["Properties"]
        assert queue["VisibilityTimeout"] >= 6 * function["Timeout"], mapping


def test_a_visibility_below_6x_fails_synthesis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    short = specs.QueueSpec(
        id="ShortQueue", local_name="short", setting="send_queue_url", visibility_timeout_s=300
    )
    fn = specs.FunctionSpec(
        name="short-worker",
        handler="functions.sender.handler.handler",
        description="x",
        timeout_s=60,
        event_sources=(specs.EventSourceSpec(queue=short),),
    )
    monkeypatch.setattr(specs, "QUEUES", (*specs.QUEUES, short))
    monkeypatch.setattr(specs, "FUNCTIONS", (*specs.FUNCTIONS, fn))
    with pytest.raises(ValueError, match=r"less than 6x the timeout of function 'short-worker' \(60s\)"):
        synthesize(tmp_path)


# ----- 7. state machine names carry the stack name ------------------------------------------------


def _sequence_machines(synth: Synth) -> list[str]:
    return [
        m["Properties"]["StateMachineName"]
        for k, m in synth.resources("AWS::StepFunctions::StateMachine").items()
        if k.startswith("Sequences")
    ]


def test_state_machine_names_start_with_the_stack_name(synth: Synth, staging: Synth) -> None:
    default, other = _sequence_machines(synth), _sequence_machines(staging)
    assert default and all(n.startswith(f"{specs.STACK_NAME}-seq-") for n in default)
    assert specs.STATE_MACHINE_PREFIX == f"{specs.STACK_NAME}-seq-" == specs.state_machine_prefix("Mailstep")
    assert other and all(n.startswith(f"{STAGING}-seq-") for n in other)
    assert not set(default) & set(other)
    assert staging.stack.stack_name == STAGING


def test_the_prefix_reaches_outputs_environment_grants_and_the_cleanup_rule(staging: Synth) -> None:
    expected = _arn("states", f"stateMachine:{STAGING}-seq-")
    output = staging.json["Outputs"][specs.STATE_MACHINE_ARN_PREFIX_OUTPUT]["Value"]
    assert render(output) == expected
    assert specs.stack_outputs()[specs.STATE_MACHINE_ARN_PREFIX_OUTPUT] == "state_machine_arn_prefix"
    (rule,) = [
        r for r in staging.resources("AWS::Events::Rule").values() if "EventPattern" in r["Properties"]
    ]
    assert render(rule["Properties"]["EventPattern"]["detail"]["stateMachineArn"][0]["prefix"]) == expected
    controllers = [f for f in specs.FUNCTIONS if f.controls_sequences]
    assert {f.name for f in controllers} == {
        "api",
        "unsubscribe",
        "engagement",
        "inbound",
        "signup",
        "hygiene",
    }
    for fn_spec in specs.FUNCTIONS:
        fn_id, fn = function_by_handler(staging, fn_spec.handler)
        variable = fn["Properties"]["Environment"]["Variables"].get("STATE_MACHINE_ARN_PREFIX")
        assert (render(variable) if variable else None) == (expected if fn_spec in controllers else None)
        for _, resource in granted_pairs(staging, fn_id):
            if ":states:" in resource:
                assert f":{STAGING}-seq-*" in resource


# ----- 3. the SES identity: owned by the stack, or left alone on request ---------------------------


def test_the_stack_owns_the_identity_and_outputs_its_dkim_records(full: Synth) -> None:
    (identity_id, identity) = next(iter(full.resources("AWS::SES::EmailIdentity").items()))
    assert identity["Properties"]["EmailIdentity"] == DOMAIN
    outputs = full.json["Outputs"]
    for index in range(1, DKIM_RECORDS + 1):
        name_key, value_key = dkim_output_keys(index)
        assert outputs[name_key]["Value"] == {"Fn::GetAtt": [identity_id, f"DkimDNSTokenName{index}"]}
        assert outputs[value_key]["Value"] == {"Fn::GetAtt": [identity_id, f"DkimDNSTokenValue{index}"]}


def test_an_existing_identity_is_left_alone_and_still_scopes_sending(synth: Synth, existing: Synth) -> None:
    for template in (synth, existing):
        assert template.resources("AWS::SES::EmailIdentity") == {}
        assert not [k for k in template.json["Outputs"] if k.startswith("DkimRecord")]
    fn_id, _ = function_by_handler(existing, specs.SENDER_FUNCTION.handler)
    identities = {r for a, r in granted_pairs(existing, fn_id, DOMAIN) if "identity/" in r}
    assert identities == {_arn("ses", "identity/*")}  # with From addresses on DOMAIN only


def test_docs_describe_the_first_deploy_in_order() -> None:
    deploy = (ROOT / "docs" / "deploy.md").read_text()
    steps = [
        "make bootstrap  ",
        "make deploy  ",
        "DkimRecord1Name",
        "sandbox",
        "curl",
        "mailstep broadcast send --stack",
        "make destroy  ",
    ]
    positions = [deploy.find(step) for step in steps]
    assert -1 not in positions, dict(zip(steps, positions, strict=True))
    assert positions == sorted(positions)
    config = (ROOT / "docs" / "configuration.md").read_text()
    assert "aws_xray_sdk" in config and json.dumps("mailstep:useExistingIdentity")[1:-1] in config


# ----- 6. reply forwarding reaches the inbound function only -------------------------------------


def test_reply_forward_to_reaches_the_inbound_function_only(synth: Synth, full: Synth) -> None:
    for fn_spec in specs.FUNCTIONS:
        _, fn = function_by_handler(full, fn_spec.handler)
        variable = fn["Properties"]["Environment"]["Variables"].get("REPLY_FORWARD_TO")
        expected = FULL["mailstep:replyForwardTo"] if fn_spec is specs.INBOUND_FUNCTION else None
        assert variable == expected, fn_spec.name
    _, inbound = function_by_handler(synth, specs.INBOUND_FUNCTION.handler)
    assert "REPLY_FORWARD_TO" not in inbound["Properties"]["Environment"]["Variables"]
