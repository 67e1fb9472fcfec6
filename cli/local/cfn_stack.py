"""The local runtime as a CloudFormation stack, so operator commands resolve it like a deployment.

``register_stack`` puts a stack into the emulated CloudFormation under the deployed stack's
name (``shared.core.specs.STACK_NAME``): its Outputs are the stack outputs with local values and
``ListStackResources`` answers with the local resources. ``ops.targets.stack_target``
then reads the local runtime exactly as it reads a deployed stack: one code path for
``--stack Mailstep`` and for ``mailstep dev``.

moto's CloudFormation skips many resource types, so the synthesized template is never
deployed here. The stack is created through the API from a template holding only an
``AWS::CloudFormation::WaitConditionHandle`` (a type moto ignores) and literal Outputs; the
resources are then added to moto's model of the stack. That is this module's one patch of
moto internals (moto is pinned: ``cli.local.hooks.MOTO_VERSION``), and it relies on:

- ``moto.cloudformation.parsing.ResourceMap`` keeps the template's resources in
  ``_resource_json_map`` (iterated by ``Stack.stack_resources``) and the created ones in
  ``_parsed_resources`` (looked up first);
- ``CloudFormationResponse.list_stack_resources`` reads ``logical_resource_id``,
  ``physical_resource_id`` and ``cf_resource_type`` of each resource;
- ``DeleteStack`` calls ``delete(account_id, region_name)`` on each resource.

:func:`self_check` fails loudly when one of these moved, and :func:`register_stack` reads
the stack back through the API before it returns. Requests go through the ``aws`` client
factory the caller gives (the local runtime's); without one, the environment's clients.
"""

from __future__ import annotations

import inspect
import json
import re
import warnings
from dataclasses import dataclass
from typing import Any

from cli.local.provision import LocalResources, all_queues, all_topics
from shared.core import specs
from shared.core.aws import ClientFactory
from shared.sequences.sfn import StepFunctions

# Logical id of the template's one placeholder resource (the stack needs one).
PLACEHOLDER = "LocalRuntime"
PLACEHOLDER_TYPE = "AWS::CloudFormation::WaitConditionHandle"

Resource = tuple[str, str, str]  # (logical id, CloudFormation type, physical id)


class CfnStackDrift(RuntimeError):
    """moto's CloudFormation internals are not where this module expects them."""


@dataclass(frozen=True)
class StackResource:
    """A resource as moto's ListStackResources reads it."""

    logical_resource_id: str
    cf_resource_type: str
    physical_resource_id: str

    def delete(self, account_id: str, region_name: str) -> None:
        """DeleteStack forgets the registration; the local resource itself stays."""


def self_check() -> None:
    """Raise :class:`CfnStackDrift` when the moto internals this module uses moved."""
    import moto
    from moto.cloudformation import parsing
    from moto.cloudformation.models import Stack
    from moto.cloudformation.responses import CloudFormationResponse

    from cli.local.hooks import MOTO_VERSION

    problems = []
    if moto.__version__ != MOTO_VERSION:
        problems.append(f"moto {moto.__version__} installed, the local runtime is built for {MOTO_VERSION}")
    if PLACEHOLDER_TYPE not in getattr(parsing, "NULL_MODELS", ()):
        problems.append(f"moto no longer ignores {PLACEHOLDER_TYPE}")
    init = inspect.getsource(parsing.ResourceMap.__init__)
    if "self._resource_json_map" not in init or "self._parsed_resources" not in init:
        problems.append("ResourceMap no longer keeps _resource_json_map and _parsed_resources")
    if "_parsed_resources" not in inspect.getsource(parsing.ResourceMap.__getitem__):
        problems.append("ResourceMap.__getitem__ no longer looks up _parsed_resources")
    if "resource_map.values()" not in inspect.getsource(Stack.stack_resources.fget):  # type: ignore[attr-defined]
        problems.append("Stack.stack_resources no longer lists the resource map")
    listing = inspect.getsource(CloudFormationResponse.list_stack_resources)
    for attribute in ("logical_resource_id", "physical_resource_id", "cf_resource_type"):
        if attribute not in listing:
            problems.append(f"ListStackResources no longer reads {attribute}")
    if problems:
        raise CfnStackDrift("local CloudFormation stack drifted from moto: " + "; ".join(problems))


def register_stack(
    stack_name: str,
    outputs: dict[str, str],
    resources: list[Resource],
    *,
    aws: ClientFactory | None = None,
) -> None:
    """Create (or replace) ``stack_name`` in the emulated CloudFormation of this process's
    moto with these Outputs (key -> value) and resources (logical id, type, physical id)."""
    from moto.backends import get_backend

    self_check()
    aws = aws or ClientFactory()
    cfn = aws.client("cloudformation")
    live = ("CREATE_COMPLETE", "UPDATE_COMPLETE")
    if any(
        s["StackName"] == stack_name for s in cfn.list_stacks(StackStatusFilter=list(live))["StackSummaries"]
    ):
        cfn.delete_stack(StackName=stack_name)
    template = {
        "Description": "mailstep local runtime (cli/local/cfn_stack.py): outputs and resources are local",
        "Resources": {PLACEHOLDER: {"Type": PLACEHOLDER_TYPE}},
        "Outputs": {key: {"Value": value} for key, value in outputs.items()},
    }
    with warnings.catch_warnings():  # moto warns that it skips the placeholder: that is the point
        warnings.filterwarnings("ignore", message=f".*{PLACEHOLDER_TYPE}", category=UserWarning)
        stack_id = str(cfn.create_stack(StackName=stack_name, TemplateBody=json.dumps(template))["StackId"])
    _, _, _, region, account_id, _ = stack_id.split(":", 5)
    stack = get_backend("cloudformation")[account_id][region].get_stack(stack_id)  # type: ignore[index]
    summaries = [(PLACEHOLDER, PLACEHOLDER_TYPE, f"{stack_name}-{PLACEHOLDER}"), *resources]
    resource_map = stack.resource_map
    for logical_id, resource_type, physical_id in summaries:
        resource_map._resource_json_map[logical_id] = {"Type": resource_type}
        resource_map._parsed_resources[logical_id] = StackResource(logical_id, resource_type, physical_id)
    _verify(stack_name, outputs, summaries, aws)


def _verify(stack_name: str, outputs: dict[str, str], summaries: list[Resource], aws: ClientFactory) -> None:
    cfn = aws.client("cloudformation")
    described = cfn.describe_stacks(StackName=stack_name)["Stacks"][0].get("Outputs", [])
    listed: set[Resource] = set()
    paginator = cfn.get_paginator("list_stack_resources")
    for page in paginator.paginate(StackName=stack_name):
        listed |= {
            (r["LogicalResourceId"], r["ResourceType"], r["PhysicalResourceId"])
            for r in page["StackResourceSummaries"]
        }
    if {o["OutputKey"]: o["OutputValue"] for o in described} != outputs or listed != set(summaries):
        raise CfnStackDrift(f"stack {stack_name} reads back differently than it was registered")


def _logical_id(*parts: str) -> str:
    return "".join(p[:1].upper() + p[1:] for part in parts for p in re.split(r"[^A-Za-z0-9]+", part) if p)


def local_stack_resources(
    resources: LocalResources, stack_name: str = specs.STACK_NAME, *, aws: ClientFactory | None = None
) -> list[Resource]:
    """The local runtime's resources as the stack's: tables, secrets, queues with their DLQs,
    topics, configuration sets, functions and the state machines (the sequences', named
    ``specs.state_machine_prefix(stack_name)`` + id, and the broadcast schedule)."""
    from shared.broadcasts.schedule import STATE_MACHINE_NAME

    aws = aws or ClientFactory()
    found: list[Resource] = [
        (spec.id, "AWS::DynamoDB::Table", resources.tables[spec.setting]) for spec in specs.TABLES
    ]
    secrets = aws.client("secretsmanager")
    found += [
        (spec.id, "AWS::SecretsManager::Secret", secrets.describe_secret(SecretId=name)["ARN"])
        for spec in specs.SECRETS
        if (name := resources.secrets.get(spec.setting))
    ]
    for queue_spec in all_queues():
        queue = resources.queues.get(queue_spec.id)
        if queue is not None:
            found.append((queue_spec.id, "AWS::SQS::Queue", queue.url))
            found.append((f"{queue_spec.id}Dlq", "AWS::SQS::Queue", queue.dlq_url))
    found += [
        (topic.id, "AWS::SNS::Topic", resources.topics[topic.id])
        for topic in all_topics()
        if topic.id in resources.topics
    ]
    found += [
        (config.id, "AWS::SES::ConfigurationSet", resources.configuration_sets[config.setting])
        for config in specs.CONFIGURATION_SETS
        if config.setting in resources.configuration_sets
    ]
    found += [
        (_logical_id(name, "Function"), "AWS::Lambda::Function", function.name)
        for name, function in resources.functions.items()
    ]
    prefix = specs.state_machine_prefix(stack_name)
    found += [
        (_logical_id(machine["name"]), "AWS::StepFunctions::StateMachine", machine["stateMachineArn"])
        for machine in _state_machines(aws)
        if machine["name"].startswith(prefix) or machine["name"] == STATE_MACHINE_NAME
    ]
    return found


def _state_machines(aws: ClientFactory) -> list[dict[str, Any]]:
    paginator = aws.client("stepfunctions").get_paginator("list_state_machines")
    return [m for page in paginator.paginate() for m in page["stateMachines"]]


def local_outputs(
    resources: LocalResources,
    stack_name: str = specs.STACK_NAME,
    *,
    api_url: str,
    region: str,
    account_id: str,
    aws: ClientFactory | None = None,
) -> dict[str, str]:
    """The stack outputs (``specs.stack_outputs()`` keys and ``specs.API_URL_OUTPUT``) with the
    values of the local resources. Deploys the broadcast schedule state machine (in the cloud
    the stack owns it; ``cli.local.provision`` creates none)."""
    from cli.local.provision import LOCAL_ROLE_NAME
    from shared.broadcasts.schedule import ensure_local_state_machine

    aws = aws or ClientFactory()
    queues = {
        spec.setting: resources.queues[spec.id].url for spec in all_queues() if spec.id in resources.queues
    }
    control = queues[specs.BROADCAST_CONTROL_QUEUE.setting]
    role = aws.client("iam").get_role(RoleName=LOCAL_ROLE_NAME)["Role"]["Arn"]
    values = {
        **resources.tables,
        **resources.secrets,
        **queues,
        **{
            topic.setting: resources.topics[topic.id]
            for topic in all_topics()
            if topic.id in resources.topics
        },
        "broadcast_schedule_arn": ensure_local_state_machine(
            control, role, StepFunctions(aws.client("stepfunctions"))
        ),
        "state_machine_arn_prefix": (
            f"arn:aws:states:{region}:{account_id}:stateMachine:{specs.state_machine_prefix(stack_name)}"
        ),
    }
    fields = specs.stack_outputs()
    missing = sorted(key for key, setting in fields.items() if not values.get(setting))
    if missing:
        raise RuntimeError(f"the local runtime has no value for the stack output(s) {', '.join(missing)}")
    return {key: values[setting] for key, setting in fields.items()} | {specs.API_URL_OUTPUT: api_url}
