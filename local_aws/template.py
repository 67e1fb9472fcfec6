"""The synthesized template, resolved to the local runtime's resources.

CloudFormation would turn the template's intrinsics (``Ref``, ``Fn::GetAtt``, ``Fn::Join``,
``Fn::Sub``, ...) into the physical names and ARNs of what it created. The local runtime
creates the same resources from the same specs, so :class:`LocalTemplate` resolves those
intrinsics against them: a function's handler, memory, timeout and environment, its role
policy, its SQS event source mappings and the stack outputs are read from the template, never
rebuilt from the specs.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

PSEUDO = (
    "AWS::Region",
    "AWS::AccountId",
    "AWS::Partition",
    "AWS::URLSuffix",
    "AWS::StackName",
    "AWS::StackId",
)


class UnresolvedReference(KeyError):
    """The template refers to something the local runtime did not create."""


@dataclass(frozen=True)
class FunctionConfig:
    """One ``AWS::Lambda::Function`` of the template, resolved."""

    logical_id: str
    handler: str
    runtime: str
    memory_mb: int
    timeout_s: int
    environment: dict[str, str]
    role_arn: str
    policy: list[dict[str, Any]]  # the statements of every policy attached to its role
    reserved_concurrency: int | None = None


@dataclass(frozen=True)
class EventSourceMapping:
    logical_id: str
    function_logical_id: str
    queue_arn: str
    batch_size: int
    max_concurrency: int | None
    max_batching_window_s: int
    report_batch_item_failures: bool
    # DynamoDB stream sources: where to start, the filter criteria, retries and bisection
    starting_position: str | None = None
    filter_criteria: dict[str, Any] | None = None
    max_retry_attempts: int | None = None
    bisect_batch_on_error: bool = False
    on_failure: str | None = None  # DestinationConfig.OnFailure.Destination (an SQS queue ARN)


@dataclass(frozen=True)
class AsyncInvokeConfig:
    """One ``AWS::Lambda::EventInvokeConfig``: Lambda's retries of a failed asynchronous
    invocation and where the invocation record goes when they are spent."""

    function_logical_id: str
    retry_attempts: int
    on_failure: str | None


@dataclass
class LocalTemplate:
    """``template`` + the local physical values: ``physical[logical id][attribute]`` where the
    attribute ``Ref`` is what ``{"Ref": id}`` gives."""

    template: dict[str, Any]
    region: str
    account: str
    stack_name: str
    physical: dict[str, dict[str, str]] = field(default_factory=dict)
    # The value of a reference nothing was bound to (tests: a placeholder); None: an error.
    fallback: Callable[[str, str], str] | None = None

    @property
    def resources(self) -> dict[str, dict[str, Any]]:
        return dict(self.template.get("Resources", {}))

    def of_type(self, cfn_type: str) -> dict[str, dict[str, Any]]:
        return {k: r for k, r in self.resources.items() if r["Type"] == cfn_type}

    def bind(self, logical_id: str, **attributes: str) -> None:
        self.physical.setdefault(logical_id, {}).update(attributes)

    # ----- intrinsics ------------------------------------------------------------------------
    def _pseudo(self, name: str) -> str:
        return {
            "AWS::Region": self.region,
            "AWS::AccountId": self.account,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackName": self.stack_name,
            "AWS::StackId": f"arn:aws:cloudformation:{self.region}:{self.account}:"
            f"stack/{self.stack_name}/local",
        }[name]

    def _attribute(self, logical_id: str, attribute: str) -> str:
        if logical_id in PSEUDO:
            return self._pseudo(logical_id)
        try:
            return self.physical[logical_id][attribute]
        except KeyError:
            if self.fallback is not None and logical_id in self.resources:
                return self.fallback(logical_id, attribute)
            cfn_type = self.resources.get(logical_id, {}).get("Type", "unknown")
            raise UnresolvedReference(
                f"{attribute} of {logical_id} ({cfn_type}) has no local value"
            ) from None

    def resolve(self, value: Any) -> Any:
        """Resolve every intrinsic in ``value`` (recursively)."""
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Ref":
                return self._attribute(arg, "Ref")
            if key == "Fn::GetAtt":
                logical_id, attribute = arg if isinstance(arg, list) else arg.split(".", 1)
                return self._attribute(logical_id, attribute)
            if key == "Fn::Join":
                separator, parts = arg
                return str(separator).join(str(self.resolve(p)) for p in parts)
            if key == "Fn::Select":
                index, items = arg
                return self.resolve(items)[int(self.resolve(index))]
            if key == "Fn::Split":
                separator, text = arg
                return str(self.resolve(text)).split(separator)
            if key == "Fn::Sub":
                return self._sub(arg)
        return {k: self.resolve(v) for k, v in value.items()}

    def _sub(self, arg: Any) -> str:
        text, variables = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])
        values = {k: str(self.resolve(v)) for k, v in variables.items()}

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name in values:
                return values[name]
            logical_id, _, attribute = name.partition(".")
            return self._attribute(logical_id, attribute or "Ref")

        return re.sub(r"\$\{([^}!][^}]*)\}", replace, text)

    # ----- what the runtime reads --------------------------------------------------------------
    def role_policy(self, role_logical_id: str) -> list[dict[str, Any]]:
        """Statements of the role's inline policies and of every AWS::IAM::Policy attached to it."""
        role = self.resources[role_logical_id]["Properties"]
        statements: list[dict[str, Any]] = []
        for policy in role.get("Policies", []):
            statements += _statements(self.resolve(policy["PolicyDocument"]))
        for policy in self.of_type("AWS::IAM::Policy").values():
            properties = policy["Properties"]
            if {"Ref": role_logical_id} in properties.get("Roles", []):
                statements += _statements(self.resolve(properties["PolicyDocument"]))
        if role.get("ManagedPolicyArns"):
            raise UnresolvedReference(f"role {role_logical_id} uses managed policies, not evaluated locally")
        return statements

    def functions(self) -> dict[str, FunctionConfig]:
        """Handler string -> the function's resolved configuration."""
        found: dict[str, FunctionConfig] = {}
        for logical_id, resource in self.of_type("AWS::Lambda::Function").items():
            properties = resource["Properties"]
            role = properties["Role"]["Fn::GetAtt"][0]
            found[properties["Handler"]] = FunctionConfig(
                logical_id=logical_id,
                handler=properties["Handler"],
                runtime=properties["Runtime"],
                memory_mb=int(properties.get("MemorySize", 128)),
                timeout_s=int(properties.get("Timeout", 3)),
                environment={
                    k: str(v)
                    for k, v in self.resolve(properties.get("Environment", {}).get("Variables", {})).items()
                },
                role_arn=self._attribute(role, "Arn"),
                policy=self.role_policy(role),
                reserved_concurrency=properties.get("ReservedConcurrentExecutions"),
            )
        return found

    def event_source_mappings(self) -> list[EventSourceMapping]:
        found = []
        for logical_id, resource in self.of_type("AWS::Lambda::EventSourceMapping").items():
            properties = resource["Properties"]
            function = properties["FunctionName"]
            found.append(
                EventSourceMapping(
                    logical_id=logical_id,
                    function_logical_id=function["Ref"] if isinstance(function, dict) else str(function),
                    queue_arn=str(self.resolve(properties["EventSourceArn"])),
                    batch_size=int(properties.get("BatchSize", 10)),
                    max_concurrency=(properties.get("ScalingConfig") or {}).get("MaximumConcurrency"),
                    max_batching_window_s=int(properties.get("MaximumBatchingWindowInSeconds", 0)),
                    report_batch_item_failures="ReportBatchItemFailures"
                    in properties.get("FunctionResponseTypes", []),
                    starting_position=properties.get("StartingPosition"),
                    filter_criteria=properties.get("FilterCriteria"),
                    max_retry_attempts=properties.get("MaximumRetryAttempts"),
                    bisect_batch_on_error=bool(properties.get("BisectBatchOnFunctionError", False)),
                    on_failure=self._on_failure(properties),
                )
            )
        return found

    def _on_failure(self, properties: dict[str, Any]) -> str | None:
        destination = ((properties.get("DestinationConfig") or {}).get("OnFailure") or {}).get("Destination")
        return str(self.resolve(destination)) if destination else None

    def async_invoke_configs(self) -> dict[str, AsyncInvokeConfig]:
        """Function logical id -> its asynchronous invocation configuration (Lambda's default,
        2 retries and no destination, for a function without one)."""
        found = {}
        for resource in self.of_type("AWS::Lambda::EventInvokeConfig").values():
            properties = resource["Properties"]
            function = properties["FunctionName"]
            logical_id = function["Ref"] if isinstance(function, dict) else str(function)
            found[logical_id] = AsyncInvokeConfig(
                function_logical_id=logical_id,
                retry_attempts=int(properties.get("MaximumRetryAttempts", 2)),
                on_failure=self._on_failure(properties),
            )
        return found

    def outputs(self) -> dict[str, str]:
        """Output key -> value, for the outputs whose references resolve locally."""
        found = {}
        for key, output in self.template.get("Outputs", {}).items():
            try:
                found[key] = str(self.resolve(output["Value"]))
            except UnresolvedReference:
                continue
        return found

    def stack_resources(self) -> list[tuple[str, str, str]]:
        """(logical id, type, physical id) of every resource the local runtime created."""
        return [
            (logical_id, resource["Type"], self.physical[logical_id]["Ref"])
            for logical_id, resource in self.resources.items()
            if "Ref" in self.physical.get(logical_id, {})
        ]


def _statements(document: dict[str, Any]) -> list[dict[str, Any]]:
    statements = document.get("Statement", [])
    return list(statements if isinstance(statements, list) else [statements])
