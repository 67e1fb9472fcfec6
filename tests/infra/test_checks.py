"""cdk-nag (AwsSolutions) and cfn-lint find nothing unacknowledged in the synthesized stack."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aws_cdk import Validations
from aws_cdk import aws_sqs as sqs
from aws_cdk.assertions import Annotations, Match
from cfnlint.api import ManualArgs, lint

from stacks.mailstep_stack import TEST_CONTEXT, build_app
from tests.infra.cfn import Synth, synthesize

NAG = Match.string_like_regexp("AwsSolutions-.*")
ALL_OPTIONS = {  # every optional capability on
    "mailstep:sesDomain": "mail.example.com",
    "mailstep:fromAddress": "Acme <hello@mail.example.com>",
    "mailstep:mailFromSubdomain": "bounce",
    "mailstep:inboundDomain": "reply.example.com",
    "mailstep:replyForwardTo": "owner@example.com",
    "mailstep:alarmEmail": "ops@example.com",
    "mailstep:signupAllowedOrigins": "https://www.example.com",
}


@pytest.fixture(scope="module")
def full_options(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    return synthesize(tmp_path_factory.mktemp("cdk.out.all"), ALL_OPTIONS)


def test_cdk_nag_reports_no_unacknowledged_finding(synth: Synth) -> None:
    # cdk-nag 3 runs as a CDK validation plugin: any finding (error or warning) fails synthesis
    # and lands in validation-report.json. The session synthesis succeeded; the report is clean.
    report = json.loads((synth.outdir / "validation-report.json").read_text())
    violations = [v for plugin in report["pluginReports"] for v in plugin["violations"]]
    assert violations == []
    annotations = Annotations.from_stack(synth.stack)
    assert annotations.find_error("*", NAG) == []
    assert annotations.find_warning("*", NAG) == []
    assert annotations.find_error("*", Match.any_value()) == []
    assert annotations.find_warning("*", Match.any_value()) == []


def test_cdk_nag_checks_are_live(tmp_path: Path) -> None:
    # Given the app as built for deployment, when a resource breaks an AwsSolutions rule,
    app, stack = build_app(TEST_CONTEXT, outdir=str(tmp_path))
    sqs.Queue(stack, "PlainQueue")  # no SSL enforcement, no DLQ

    # then synthesis fails and the report names the rules.
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    report = json.loads((tmp_path / "validation-report.json").read_text())
    rules = {v["ruleName"] for plugin in report["pluginReports"] for v in plugin["violations"]}
    assert {"AwsSolutions-SQS3", "AwsSolutions-SQS4"} <= rules


def acknowledgments(synth: Synth) -> list[tuple[str, str, str]]:
    """(construct path, rule, reason) for every acknowledged cdk-nag rule in the app."""
    found = []
    for construct in synth.app.node.find_all():
        for entry in construct.node.metadata:
            if entry.type == Validations.ACKNOWLEDGED_RULES_METADATA_KEY:
                for rule, reason in entry.data.items():
                    found.append((construct.node.path, rule.removeprefix("Annotation::"), reason))
    return found


def test_every_acknowledgment_carries_a_real_reason(synth: Synth) -> None:
    found = acknowledgments(synth)

    assert found, "the stack acknowledges known findings (e.g. AwsSolutions-APIG4); none were found"
    for path, rule, reason in found:
        assert rule.startswith("AwsSolutions-"), (path, rule)
        assert len(reason) >= 60 and "todo" not in reason.lower(), (path, rule, reason)


@pytest.mark.parametrize("template", ["default", "all-options"])
def test_cfn_lint_reports_no_errors_and_no_warnings(synth: Synth, full_options: Synth, template: str) -> None:
    chosen = synth if template == "default" else full_options
    matches = lint(json.dumps(chosen.json), config=ManualArgs(regions=["us-east-1", "eu-west-1"]))

    assert [str(m) for m in matches if m.rule.id.startswith("E")] == []
    assert [str(m) for m in matches] == []  # and no warnings either
