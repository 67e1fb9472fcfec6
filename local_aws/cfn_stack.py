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
moto internals (moto is pinned: ``local_aws.hooks.MOTO_VERSION``), and it relies on:

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
import warnings
from dataclasses import dataclass

from shared.core.aws import ClientFactory

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

    from local_aws.hooks import MOTO_VERSION

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
        "Description": "mailstep local runtime (local_aws/cfn_stack.py): outputs and resources are local",
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
