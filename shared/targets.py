"""Where the operator commands act: a deployed stack (by name) or the local runtime.

A deployed stack is found by its name through CloudFormation: ``describe_stacks`` gives
the outputs, and ``shared.specs.stack_outputs()`` says which Settings field each output
carries, so the CLI and the MCP server rebuild exactly the settings the Lambdas get from
their environment. ``list_stack_resources`` finds what the outputs do not name (queues and
their DLQs, the SES configuration set, alarms) for ``mailstep doctor``.

The local runtime's settings come from its ``runtime.json`` and the local names in the
specs (the local runtime provisions from the same specs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from shared import specs
from shared.aws import client as aws_client
from shared.errors import InvalidInput, NotFound
from shared.settings import Settings

LOCAL, STACK = "local", "stack"


class StackNotFound(NotFound):
    pass


@dataclass(frozen=True)
class Target:
    """A resolved target: its settings plus the resource names doctor and executions need."""

    kind: str  # LOCAL | STACK
    name: str  # the stack name, or the local runtime's state folder
    region: str
    settings: Settings
    api_url: str = ""
    # Physical resources by kind: "queues" (URLs), "configuration_sets", "alarms" (names),
    # "state_machines" (ARNs), "functions" (names). Empty lists mean "none found".
    resources: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"local runtime ({self.name})" if self.kind == LOCAL else f"stack {self.name} ({self.region})"


def _settings_from(values: Mapping[str, str], origin: str) -> Settings:
    missing = [spec.setting for spec in specs.TABLES if not values.get(spec.setting)]
    if missing:
        raise InvalidInput(f"{origin} does not name {', '.join(missing)}: is it a mailstep deployment?")
    return Settings.model_validate(dict(values))


def stack_outputs(stack_name: str) -> dict[str, str]:
    """The raw CloudFormation outputs of ``stack_name`` (output key -> value)."""
    try:
        stacks = aws_client("cloudformation").describe_stacks(StackName=stack_name)["Stacks"]
    except ClientError as exc:
        if exc.response["Error"]["Code"] == "ValidationError":
            raise StackNotFound(f"stack {stack_name!r} not found in this account and region") from None
        raise
    if not stacks:
        raise StackNotFound(f"stack {stack_name!r} not found in this account and region")
    return {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}


RESOURCE_TYPES = {
    "AWS::SQS::Queue": "queues",
    "AWS::SES::ConfigurationSet": "configuration_sets",
    "AWS::CloudWatch::Alarm": "alarms",
    "AWS::StepFunctions::StateMachine": "state_machines",
    "AWS::Lambda::Function": "functions",
}


def stack_resources(stack_name: str) -> dict[str, tuple[str, ...]]:
    """Physical ids of the stack's queues, configuration sets, alarms and state machines."""
    found: dict[str, list[str]] = {kind: [] for kind in RESOURCE_TYPES.values()}
    cfn = aws_client("cloudformation")
    token: str | None = None
    while True:
        page = cfn.list_stack_resources(StackName=stack_name, **({"NextToken": token} if token else {}))
        for resource in page.get("StackResourceSummaries", []):
            kind = RESOURCE_TYPES.get(resource.get("ResourceType", ""))
            if kind and resource.get("PhysicalResourceId"):
                found[kind].append(resource["PhysicalResourceId"])
        token = page.get("NextToken")
        if not token:
            return {k: tuple(v) for k, v in found.items()}


def state_machine_arn_prefix(region: str) -> str:
    """``arn:aws:states:<region>:<account>:stateMachine:<STATE_MACHINE_PREFIX>``."""
    account = aws_client("sts").get_caller_identity()["Account"]
    return f"arn:aws:states:{region}:{account}:stateMachine:{specs.STATE_MACHINE_PREFIX}"


def stack_target(stack_name: str, region: str) -> Target:
    outputs = stack_outputs(stack_name)
    fields = specs.stack_outputs()
    values = {fields[k]: v for k, v in outputs.items() if k in fields}
    values["state_machine_arn_prefix"] = state_machine_arn_prefix(region)
    values.setdefault("broadcast_schedule_arn", broadcast_schedule_arn())
    settings = _settings_from(values, f"stack {stack_name!r}")
    return Target(
        kind=STACK,
        name=stack_name,
        region=region,
        settings=settings,
        api_url=outputs.get(specs.API_URL_OUTPUT, ""),
        resources=stack_resources(stack_name),
    )


def local_queue_settings() -> dict[str, str]:
    """Settings field -> URL of every spec'd queue of the local runtime (by local name)."""
    from shared.provision import all_queues

    sqs = aws_client("sqs")
    found = {}
    for spec in all_queues():
        try:
            found[spec.setting] = str(sqs.get_queue_url(QueueName=spec.local_name)["QueueUrl"])
        except ClientError:
            continue
    return found


def broadcast_schedule_arn() -> str:
    """The broadcast schedule state machine's ARN when one is deployed under its name, else ''."""
    from shared.broadcasts.schedule import STATE_MACHINE_NAME

    return next(
        (arn for arn in _state_machines(STATE_MACHINE_NAME) if arn.endswith(f":{STATE_MACHINE_NAME}")), ""
    )


def local_resources() -> dict[str, tuple[str, ...]]:
    """The local runtime's queues (with DLQs), configuration sets and state machines, by the
    local names in the specs (``shared.provision`` creates them from the same specs)."""
    from shared.provision import all_queues

    sqs = aws_client("sqs")
    queues: list[str] = []
    for spec in all_queues():
        for name in (spec.local_name, _dlq_name(spec.local_name)):
            try:
                queues.append(sqs.get_queue_url(QueueName=name)["QueueUrl"])
            except ClientError:
                continue
    machines = _state_machines(specs.STATE_MACHINE_PREFIX)
    return {
        "queues": tuple(queues),
        "configuration_sets": tuple(c.local_name for c in specs.CONFIGURATION_SETS),
        "alarms": (),
        "state_machines": tuple(machines),
        "functions": (),
    }


def _dlq_name(name: str) -> str:
    from shared.provision import DLQ_SUFFIX

    fifo = name.endswith(".fifo")
    return f"{name.removesuffix('.fifo')}{DLQ_SUFFIX}" + (".fifo" if fifo else "")


def _state_machines(prefix: str) -> list[str]:
    sfn = aws_client("stepfunctions")
    found: list[str] = []
    token: str | None = None
    while True:
        page = sfn.list_state_machines(**({"nextToken": token} if token else {}))
        found += [m["stateMachineArn"] for m in page["stateMachines"] if m["name"].startswith(prefix)]
        token = page.get("nextToken")
        if not token:
            return found


def local_target(state: Mapping[str, Any], state_dir: str) -> Target:
    """The target of a running local runtime described by its ``runtime.json``."""
    region = str(state["region"])
    values: dict[str, str] = dict(state.get("tables", {}))
    values |= {s.setting: s.local_name for s in specs.SECRETS}
    values |= {c.setting: c.local_name for c in specs.CONFIGURATION_SETS}
    values |= local_queue_settings()
    values["state_machine_arn_prefix"] = state_machine_arn_prefix(region)
    values["broadcast_schedule_arn"] = broadcast_schedule_arn()
    return Target(
        kind=LOCAL,
        name=state_dir,
        region=region,
        settings=_settings_from(values, f"the local runtime in {state_dir}"),
        api_url=str(state.get("api_url", "")),
        resources=local_resources(),
    )


def sequence_state_machines() -> dict[str, str]:
    """Sequence id -> state machine ARN of the machines named ``STATE_MACHINE_PREFIX + id``
    (listed live: the local runtime deploys sequences after it started)."""
    arns = _state_machines(specs.STATE_MACHINE_PREFIX)
    marker = f":stateMachine:{specs.STATE_MACHINE_PREFIX}"
    return {arn.split(marker, 1)[1]: arn for arn in arns if marker in arn}
