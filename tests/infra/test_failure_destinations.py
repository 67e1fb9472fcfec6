"""Every asynchronous edge of the stack keeps what it cannot process, and an alarm says so
(docs/operations.md, "What could not be processed"); replies stop the deploy in a region where
SES does not receive email, and the reply domain has its own identity (docs/engagement.md).

The walk reads the synthesized template, not the specs: a mapping or rule target added later
without a place for its failures fails here.

- an SQS-sourced event source mapping: its queue has a RedrivePolicy (a dead-letter queue);
- a DynamoDB-stream-sourced mapping: ``DestinationConfig.OnFailure`` names an SQS queue;
- an EventBridge rule target: ``DeadLetterConfig`` names an SQS queue (events EventBridge could
  not deliver) and, for a Lambda target, the function's ``AWS::Lambda::EventInvokeConfig`` has an
  on-failure destination (invocations that failed after Lambda's retries);
- each of those queues has an alarm on ApproximateNumberOfMessagesVisible above 0.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from shared.core import specs
from stacks.constructs.engagement import RECEIVING_REGION_RULE, SES_RECEIVING_REGIONS
from tests.infra.cfn import Synth, synthesize
from tests.infra.test_parity import FULL

Template = dict[str, Any]


def _queue(template: Template, value: Any) -> str | None:
    """The logical id of the SQS queue ``value`` points at (GetAtt Arn), else None."""
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        logical_id, attribute = value["Fn::GetAtt"]
        resource = template["Resources"].get(logical_id, {})
        if attribute == "Arn" and resource.get("Type") == "AWS::SQS::Queue":
            return str(logical_id)
    return None


def _alarmed_queues(template: Template) -> set[str]:
    found = set()
    for resource in template["Resources"].values():
        properties = resource["Properties"] if resource["Type"] == "AWS::CloudWatch::Alarm" else {}
        if properties.get("MetricName") != "ApproximateNumberOfMessagesVisible":
            continue
        if properties.get("Threshold") != 0 or properties.get("ComparisonOperator") != "GreaterThanThreshold":
            continue
        for dimension in properties.get("Dimensions", []):
            value = dimension.get("Value")
            if dimension.get("Name") == "QueueName" and isinstance(value, dict) and "Fn::GetAtt" in value:
                found.add(value["Fn::GetAtt"][0])
    return found


def _on_failure_queue(template: Template, properties: dict[str, Any]) -> str | None:
    """The SQS queue that ``DestinationConfig.OnFailure`` of ``properties`` names, else None."""
    destination = ((properties.get("DestinationConfig") or {}).get("OnFailure") or {}).get("Destination")
    return _queue(template, destination)


def unkept(template: Template) -> list[str]:
    """What an asynchronous edge of ``template`` could lose: every problem found, named."""
    resources = template["Resources"]
    problems: list[str] = []
    keepers: dict[str, str] = {}  # queue logical id -> what it keeps

    def kept(queue: str | None, what: str, problem: str) -> None:
        """``queue`` keeps ``what``; without a queue, ``problem``."""
        if queue is None:
            problems.append(problem)
        else:
            keepers[queue] = what

    for logical_id, resource in resources.items():
        if resource["Type"] != "AWS::Lambda::EventSourceMapping":
            continue
        properties = resource["Properties"]
        source = properties["EventSourceArn"]
        attribute = source.get("Fn::GetAtt", [None, None])[1] if isinstance(source, dict) else None
        queue = _queue(template, source)
        if queue is not None:
            redrive = resources[queue]["Properties"].get("RedrivePolicy") or {}
            kept(
                _queue(template, redrive.get("deadLetterTargetArn")),
                f"dead letters of {queue}",
                f"{logical_id}: its queue {queue} has no dead-letter queue (RedrivePolicy)",
            )
        elif attribute == "StreamArn":
            kept(
                _on_failure_queue(template, properties),
                f"on-failure records of {logical_id}",
                f"{logical_id}: a stream source without an SQS on-failure destination",
            )
        else:
            problems.append(f"{logical_id}: an event source this check does not know: {source}")
    invoke_configs = {
        r["Properties"]["FunctionName"].get("Ref"): r["Properties"]
        for r in resources.values()
        if r["Type"] == "AWS::Lambda::EventInvokeConfig"
    }
    for logical_id, resource in resources.items():
        if resource["Type"] != "AWS::Events::Rule":
            continue
        for target in resource["Properties"].get("Targets", []):
            name = f"{logical_id} target {target.get('Id')}"
            kept(
                _queue(template, (target.get("DeadLetterConfig") or {}).get("Arn")),
                f"undelivered events of {name}",
                f"{name}: no dead-letter queue (DeadLetterConfig)",
            )
            arn = target.get("Arn")
            function = arn["Fn::GetAtt"][0] if isinstance(arn, dict) and "Fn::GetAtt" in arn else None
            if function is not None and resources[function]["Type"] == "AWS::Lambda::Function":
                kept(
                    _on_failure_queue(template, invoke_configs.get(function) or {}),
                    f"failed asynchronous invocations of {function}",
                    f"{name}: function {function} has no on-failure destination",
                )
    alarmed = _alarmed_queues(template)
    problems += [
        f"{queue} ({what}) has no alarm" for queue, what in sorted(keepers.items()) if queue not in alarmed
    ]
    return problems


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    return synthesize(tmp_path_factory.mktemp("cdk.out.failures"), FULL)


def test_every_asynchronous_edge_keeps_what_it_cannot_process(synth: Synth, full: Synth) -> None:
    for template in (synth.json, full.json):
        assert unkept(template) == []
    # the walk saw every kind: SQS, stream and rule edges are all in the template
    kinds = {r["Type"] for r in full.json["Resources"].values()}
    assert {"AWS::Lambda::EventSourceMapping", "AWS::Events::Rule", "AWS::Lambda::EventInvokeConfig"} <= kinds


def _first(template: Template, cfn_type: str, where: Any = lambda r: True) -> dict[str, Any]:
    return next(r for r in template["Resources"].values() if r["Type"] == cfn_type and where(r))


def _stream(resource: dict[str, Any]) -> bool:
    return "StartingPosition" in resource["Properties"]


def _sqs_mapping(resource: dict[str, Any]) -> bool:
    return not _stream(resource)


def _drop_stream_destination(template: Template) -> None:
    del _first(template, "AWS::Lambda::EventSourceMapping", _stream)["Properties"]["DestinationConfig"]


def _drop_rule_dead_letters(template: Template) -> None:
    del _first(template, "AWS::Events::Rule")["Properties"]["Targets"][0]["DeadLetterConfig"]


def _drop_invoke_config(template: Template) -> None:
    (logical_id,) = [
        k for k, r in template["Resources"].items() if r["Type"] == "AWS::Lambda::EventInvokeConfig"
    ][:1]
    del template["Resources"][logical_id]


def _drop_redrive(template: Template) -> None:
    mapping = _first(template, "AWS::Lambda::EventSourceMapping", _sqs_mapping)
    queue = mapping["Properties"]["EventSourceArn"]["Fn::GetAtt"][0]
    del template["Resources"][queue]["Properties"]["RedrivePolicy"]


def _drop_failure_alarm(template: Template) -> None:
    queue = specs.WEBHOOK_STREAM_FAILURES.id
    for logical_id in [
        k
        for k, r in template["Resources"].items()
        if r["Type"] == "AWS::CloudWatch::Alarm"
        and any(
            d.get("Value") == {"Fn::GetAtt": [queue, "QueueName"]}
            for d in r["Properties"].get("Dimensions", [])
        )
    ]:
        del template["Resources"][logical_id]


@pytest.mark.parametrize(
    "remove",
    [
        _drop_stream_destination,
        _drop_rule_dead_letters,
        _drop_invoke_config,
        _drop_redrive,
        _drop_failure_alarm,
    ],
    ids=lambda f: f.__name__.removeprefix("_"),
)
def test_the_walk_fails_when_a_place_for_failures_is_removed(synth: Synth, remove: Any) -> None:
    template = copy.deepcopy(synth.json)
    remove(template)
    assert unkept(template), f"the walk found nothing after {remove.__name__}"


def test_the_stream_failure_queue_is_the_dispatchers_only_extra_grant(synth: Synth) -> None:
    # the role may send the on-failure record (sqs:SendMessage on the queue, nothing else)
    assert specs.failure_grants(specs.WEBHOOK_DISPATCH_FUNCTION) == [
        specs.Grant(specs.WEBHOOK_STREAM_FAILURES, specs.ON_FAILURE_ACTIONS)
    ]
    assert specs.ON_FAILURE_ACTIONS == ("sqs:SendMessage",)


# ----- B. replies: the receiving region and the reply domain's identity ------------------------


def test_replies_stop_the_deploy_outside_the_ses_receiving_regions(synth: Synth, full: Synth) -> None:
    # Given replies on, the template holds a rule that asserts the region is a receiving one
    rule = full.json["Rules"][RECEIVING_REGION_RULE]
    (assertion,) = rule["Assertions"]
    assert assertion["Assert"] == {"Fn::Contains": [list(SES_RECEIVING_REGIONS), {"Ref": "AWS::Region"}]}
    for region in SES_RECEIVING_REGIONS:  # the message names every supported region
        assert region in assertion["AssertDescription"]
    assert "mailstep:inboundDomain" in assertion["AssertDescription"]
    # Given replies off, no such rule: the stack deploys anywhere SES sends
    assert RECEIVING_REGION_RULE not in synth.json.get("Rules", {})


def _identities(s: Synth) -> set[str]:
    return {r["Properties"]["EmailIdentity"] for r in s.resources("AWS::SES::EmailIdentity").values()}


def test_the_reply_domain_gets_its_own_identity_and_dkim_outputs(full: Synth) -> None:
    assert _identities(full) == {FULL["mailstep:sesDomain"], FULL["mailstep:inboundDomain"]}
    for index in (1, 2, 3):
        assert {f"InboundDkimRecord{index}Name", f"InboundDkimRecord{index}Value"} <= set(
            full.json["Outputs"]
        )


@pytest.mark.parametrize(
    ("context", "identities"),
    [
        # replies to the sending domain: its identity serves both
        ({"mailstep:inboundDomain": FULL["mailstep:sesDomain"]}, {FULL["mailstep:sesDomain"]}),
        # the account's identities: the stack makes none (verify the reply domain yourself)
        (
            {
                "mailstep:inboundDomain": FULL["mailstep:inboundDomain"],
                "mailstep:useExistingIdentity": "true",
            },
            set(),
        ),
    ],
    ids=["same-domain", "existing-identities"],
)
def test_no_second_identity_when_the_domain_has_one_or_identities_are_the_accounts(
    tmp_path_factory: pytest.TempPathFactory, context: dict[str, str], identities: set[str]
) -> None:
    skipped = ("mailstep:inboundDomain", "mailstep:mailFromSubdomain")
    base = {k: v for k, v in FULL.items() if k not in skipped}
    s = synthesize(tmp_path_factory.mktemp("cdk.out.identity"), {**base, **context})
    assert _identities(s) == identities
    assert RECEIVING_REGION_RULE in s.json["Rules"]  # the region rule holds either way
