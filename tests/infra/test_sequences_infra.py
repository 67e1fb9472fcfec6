"""The Sequences construct: one logged, least-privilege state machine per YAML file, the
cleanup rule, controller grants; invalid YAML fails synthesis with the validator's message."""

from __future__ import annotations

import os

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

import contextlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Stack, Validations
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Match, Template
from cdk_nag import AwsSolutionsChecks

from shared import specs
from shared.rendering import TEMPLATES_DIR
from shared.sequences import SEQUENCES_DIR
from shared.sequences.compiler import STEP_FUNCTION_PLACEHOLDER, SUBSTITUTION_KEY, definition_json
from shared.sequences.loader import SequenceInvalid
from shared.sequences.structure import structural_problems
from shared.sequences.validate import require_catalog
from stacks.constructs.sequences import Sequences


def _fn(stack: Stack, name: str) -> lambda_.Function:
    return lambda_.Function(
        stack,
        name,
        runtime=lambda_.Runtime.PYTHON_3_12,
        handler="index.handler",
        code=lambda_.Code.from_inline("def handler(e, c):\n    return {}\n"),
    )


def _build(app: App, sequences_dir: Path = SEQUENCES_DIR) -> Stack:
    stack = Stack(app, "SeqTest", env={"account": "111111111111", "region": "eu-west-1"})
    step, cleanup, api = _fn(stack, "Step"), _fn(stack, "Cleanup"), _fn(stack, "Api")
    Sequences(
        stack,
        "Sequences",
        step_function=step,
        cleanup_function=cleanup,
        controllers=[api],
        sequences_dir=sequences_dir,
    )
    return stack


def _synth(sequences_dir: Path = SEQUENCES_DIR) -> tuple[Template, Stack]:
    stack = _build(App(), sequences_dir)
    return Template.from_stack(stack), stack


@pytest.fixture(scope="module")
def synth() -> tuple[Template, Stack]:
    return _synth()


def _machines(template: Template) -> dict[str, dict[str, Any]]:
    return template.find_resources("AWS::StepFunctions::StateMachine")


def test_one_state_machine_per_yaml_file_with_the_compiled_definition(synth: tuple[Template, Stack]) -> None:
    template, _ = synth
    catalog = require_catalog(SEQUENCES_DIR)
    machines = _machines(template)
    assert len(machines) == len(catalog) >= 2
    by_name = {m["Properties"]["StateMachineName"]: m["Properties"] for m in machines.values()}
    for sequence in catalog:
        props = by_name[f"{specs.STATE_MACHINE_PREFIX}{sequence.id}"]
        assert props["DefinitionString"] == definition_json(sequence)
        assert STEP_FUNCTION_PLACEHOLDER in props["DefinitionString"]
        assert props["DefinitionSubstitutions"] == {
            SUBSTITUTION_KEY: {"Fn::GetAtt": [Match.any_value(), "Arn"]}
        } or (list(props["DefinitionSubstitutions"]) == [SUBSTITUTION_KEY])
        assert props["StateMachineType"] == "STANDARD"
        assert props["LoggingConfiguration"]["Level"] == "ALL"
        assert props["LoggingConfiguration"]["IncludeExecutionData"] is False
        assert props["TracingConfiguration"] == {"Enabled": True}
        assert structural_problems(json.loads(props["DefinitionString"])) == []


def test_machine_roles_may_invoke_only_the_step_function(synth: tuple[Template, Stack]) -> None:
    template, stack = synth
    step_id = next(k for k in template.find_resources("AWS::Lambda::Function") if k.startswith("Step"))
    roles = template.find_resources(
        "AWS::IAM::Role",
        {
            "Properties": {
                "AssumeRolePolicyDocument": Match.object_like(
                    {"Statement": [Match.object_like({"Principal": {"Service": "states.amazonaws.com"}})]}
                )
            }
        },
    )
    assert len(roles) == len(_machines(template))
    policies = template.find_resources("AWS::IAM::Policy")
    invokes = []
    for policy in policies.values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            if any(a.startswith("lambda:") for a in actions):
                invokes.append((actions, statement["Resource"]))
                assert actions == "lambda:InvokeFunction" or actions == ["lambda:InvokeFunction"]
                assert statement["Resource"] == {"Fn::GetAtt": [step_id, "Arn"]}
            assert "states:*" not in actions and "*" not in actions
    assert len(invokes) == len(_machines(template))


def test_cleanup_rule_targets_ended_executions_of_these_machines(synth: tuple[Template, Stack]) -> None:
    template, _ = synth
    rules = template.find_resources("AWS::Events::Rule")
    assert len(rules) == 1
    rule = next(iter(rules.values()))["Properties"]
    pattern = rule["EventPattern"]
    assert pattern["source"] == ["aws.states"]
    assert pattern["detail"]["status"] == ["FAILED", "TIMED_OUT", "ABORTED"]
    assert "prefix" in pattern["detail"]["stateMachineArn"][0]
    cleanup_id = next(k for k in template.find_resources("AWS::Lambda::Function") if k.startswith("Cleanup"))
    assert rule["Targets"][0]["Arn"] == {"Fn::GetAtt": [cleanup_id, "Arn"]}
    template.has_resource_properties(
        "AWS::Lambda::Permission", {"Principal": "events.amazonaws.com", "Action": "lambda:InvokeFunction"}
    )


def test_controllers_get_the_arn_prefix_and_scoped_states_permissions(synth: tuple[Template, Stack]) -> None:
    template, _ = synth
    api = next(v for k, v in template.find_resources("AWS::Lambda::Function").items() if k.startswith("Api"))
    env = api["Properties"]["Environment"]["Variables"]
    prefix = json.dumps(env["STATE_MACHINE_ARN_PREFIX"])
    assert "stateMachine:mailstep-seq-" in prefix
    statements = [
        s
        for p in template.find_resources("AWS::IAM::Policy").values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if any(
            str(a).startswith("states:")
            for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])
        )
    ]
    actions = sorted(
        a for s in statements for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])
    )
    assert actions == ["states:DescribeExecution", "states:StartExecution", "states:StopExecution"]
    for statement in statements:
        assert "mailstep-seq-" in json.dumps(statement["Resource"])


def test_invalid_yaml_fails_synthesis_with_the_validator_message(tmp_path: Path) -> None:
    folder = tmp_path / "sequences"
    shutil.copytree(SEQUENCES_DIR, folder)
    (folder / "broken.yaml").write_text("trigger: go\nsteps:\n  - wait: soon\n")
    with pytest.raises(SequenceInvalid) as raised:
        _synth(folder)
    assert "sequences/broken.yaml:3: steps[0]: wait: bad duration 'soon'" in str(raised.value)


def test_templates_dir_default_is_the_project_templates() -> None:
    assert (TEMPLATES_DIR / "onboarding" / "welcome.md").is_file()


def test_cdk_nag_finds_nothing_in_the_sequences_construct(tmp_path: Path) -> None:
    app = App(outdir=str(tmp_path))
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    _build(app)
    with contextlib.suppress(RuntimeError):  # the bare test functions have their own findings
        app.synth()
    report = json.loads((tmp_path / "validation-report.json").read_text())
    violations = [v for plugin in report["pluginReports"] for v in plugin["violations"]]
    paths = {c["constructPath"] for v in violations for c in v["violatingConstructs"]}
    assert not [p for p in paths if p.startswith("SeqTest/Sequences")], paths
    assert not [
        v["ruleName"]
        for v in violations
        if v["ruleName"].startswith(("AwsSolutions-IAM5", "AwsSolutions-SF"))
    ]
    # the findings that remain belong to the inline test functions only
    assert paths <= {
        f"SeqTest/{n}/{r}" for n in ("Step", "Cleanup", "Api") for r in ("Resource", "ServiceRole/Resource")
    }
