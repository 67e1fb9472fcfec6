"""The Sequences construct: one logged, least-privilege state machine per YAML file, the
cleanup rule; machine names carry the stack name; invalid YAML or a name over the Step
Functions limit fails synthesis with a message that says what to change."""

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

from shared.core import specs
from shared.sending.rendering import TEMPLATES_DIR
from shared.sequences import SEQUENCES_DIR
from shared.sequences.compiler import STEP_FUNCTION_PLACEHOLDER, SUBSTITUTION_KEY, definition_json
from shared.sequences.loader import SequenceInvalid
from shared.sequences.structure import structural_problems
from shared.sequences.validate import require_catalog
from stacks.constructs.sequences import Sequences, StateMachineNameTooLong


def _fn(stack: Stack, name: str) -> lambda_.Function:
    return lambda_.Function(
        stack,
        name,
        runtime=lambda_.Runtime.PYTHON_3_12,
        handler="index.handler",
        code=lambda_.Code.from_inline("def handler(e, c):\n    return {}\n"),
    )


STACK = "SeqTest"


def _build(app: App, sequences_dir: Path = SEQUENCES_DIR, stack_name: str = STACK) -> Stack:
    stack = Stack(app, stack_name, env={"account": "111111111111", "region": "eu-west-1"})
    step, cleanup = _fn(stack, "Step"), _fn(stack, "Cleanup")
    Sequences(stack, "Sequences", step_function=step, cleanup_function=cleanup, sequences_dir=sequences_dir)
    return stack


def _synth(sequences_dir: Path = SEQUENCES_DIR, stack_name: str = STACK) -> tuple[Template, Stack]:
    stack = _build(App(), sequences_dir, stack_name)
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
        props = by_name[f"{specs.state_machine_prefix(STACK)}{sequence.id}"]
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


def test_cleanup_rule_matches_only_this_stacks_machines(synth: tuple[Template, Stack]) -> None:
    template, _ = synth
    (rule,) = template.find_resources("AWS::Events::Rule").values()
    prefix = json.dumps(rule["Properties"]["EventPattern"]["detail"]["stateMachineArn"][0]["prefix"])
    assert prefix.endswith(f':stateMachine:{STACK}-seq-"]]}}')


def test_a_state_machine_name_over_80_characters_fails_synthesis() -> None:
    longest = max(len(s.id) for s in require_catalog(SEQUENCES_DIR))
    too_long = "S" * (specs.STATE_MACHINE_NAME_MAX - longest - len("-seq-") + 1)
    with pytest.raises(StateMachineNameTooLong, match=r"Step Functions allows 80: shorten the stack name"):
        _synth(stack_name=too_long)
    fits = too_long[:-1]
    template, _ = _synth(stack_name=fits)
    names = [m["Properties"]["StateMachineName"] for m in _machines(template).values()]
    assert max(len(n) for n in names) == specs.STATE_MACHINE_NAME_MAX


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
        f"SeqTest/{n}/{r}" for n in ("Step", "Cleanup") for r in ("Resource", "ServiceRole/Resource")
    }
