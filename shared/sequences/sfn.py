"""Step Functions adapter: the only module that calls the ``stepfunctions`` API.

AWS errors become plain results or domain errors here: a start that finds its execution
name taken reports it, a stop of an execution that is gone is not an error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from botocore.exceptions import ClientError

from shared.core.aws import client as aws_client

if TYPE_CHECKING:
    from mypy_boto3_stepfunctions import SFNClient
    from mypy_boto3_stepfunctions.literals import ExecutionStatusType
    from mypy_boto3_stepfunctions.type_defs import (
        ExecutionListItemTypeDef,
        HistoryEventTypeDef,
        ListExecutionsInputTypeDef,
    )


RUNNING = "RUNNING"
EXECUTION_NAME_MAX = 80


class NextToken(TypedDict, total=False):
    nextToken: str


def next_token(token: str | None) -> NextToken:
    """The ``nextToken`` argument of a paginated Step Functions call: none for the first page."""
    return {"nextToken": token} if token else {}


def execution_arn(state_machine_arn: str, name: str) -> str:
    """The ARN StartExecution will give ``name``: predictable, so the pair can be written first."""
    head, _, machine = state_machine_arn.rpartition(":stateMachine:")
    return f"{head}:execution:{machine}:{name}"


def state_machine_of(execution: str) -> str:
    head, _, rest = execution.rpartition(":execution:")
    machine = rest.rsplit(":", 1)[0]
    return f"{head}:stateMachine:{machine}"


@dataclass(frozen=True)
class StartResult:
    execution_arn: str
    created: bool  # False: an execution with this name existed already
    status: str  # RUNNING, or the status of the existing execution


class StepFunctions:
    def __init__(self, client: SFNClient | None = None) -> None:
        self._client = client

    @property
    def client(self) -> SFNClient:
        return self._client or aws_client("stepfunctions")

    def start(self, state_machine_arn: str, name: str, payload: dict[str, Any]) -> StartResult:
        """Start ``name``; a name already used (a retried start) is reported, never raised."""
        if len(name) > EXECUTION_NAME_MAX:
            raise ValueError("execution names are at most 80 characters")
        body = json.dumps(payload, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
        try:
            response = self.client.start_execution(stateMachineArn=state_machine_arn, name=name, input=body)
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ExecutionAlreadyExists":
                raise
            arn = execution_arn(state_machine_arn, name)
            return StartResult(arn, created=False, status=self.status(arn) or RUNNING)
        return StartResult(response["executionArn"], created=True, status=RUNNING)

    def stop(self, execution: str, *, error: str, cause: str) -> bool:
        """Stop a running execution; False when it does not exist or already ended."""
        try:
            self.client.stop_execution(executionArn=execution, error=error[:256], cause=cause[:32768])
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("ExecutionDoesNotExist", "ValidationException"):
                return False
            raise
        return True

    def status(self, execution: str) -> str | None:
        """RUNNING / SUCCEEDED / FAILED / TIMED_OUT / ABORTED, or None when there is no such execution."""
        try:
            return str(self.client.describe_execution(executionArn=execution)["status"])
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ExecutionDoesNotExist":
                return None
            raise

    def describe(self, execution: str) -> dict[str, Any]:
        return dict(self.client.describe_execution(executionArn=execution))

    def history(self, execution: str) -> list[HistoryEventTypeDef]:
        events: list[HistoryEventTypeDef] = []
        token: str | None = None
        while True:
            page = self.client.get_execution_history(
                executionArn=execution, maxResults=1000, **next_token(token)
            )
            events += page["events"]
            token = page.get("nextToken")
            if not token:
                return events

    def list_executions(
        self, state_machine_arn: str, status: ExecutionStatusType | None = None
    ) -> list[ExecutionListItemTypeDef]:
        found: list[ExecutionListItemTypeDef] = []
        request: ListExecutionsInputTypeDef = {"stateMachineArn": state_machine_arn}
        if status:
            request["statusFilter"] = status
        while True:
            page = self.client.list_executions(**request)
            found += page["executions"]
            token = page.get("nextToken")
            if not token:
                return found
            request["nextToken"] = token

    def put_state_machine(self, name: str, definition: str, role_arn: str) -> str:
        """Create or update a STANDARD state machine (local runtime and tests; CDK in the cloud)."""
        try:
            return str(
                self.client.create_state_machine(name=name, definition=definition, roleArn=role_arn)[
                    "stateMachineArn"
                ]
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "StateMachineAlreadyExists":
                raise
        arn = next(
            m["stateMachineArn"]
            for m in self.client.list_state_machines()["stateMachines"]
            if m["name"] == name
        )
        self.client.update_state_machine(stateMachineArn=arn, definition=definition, roleArn=role_arn)
        return str(arn)


def state_transitions(history: list[dict[str, Any]]) -> int:
    """Billable state transitions in an execution history: every state entered (retries of a
    Task count as extra transitions in AWS billing; they appear as extra scheduled invocations)."""
    entered = sum(1 for e in history if e["type"].endswith("StateEntered"))
    retries = sum(1 for e in history if e["type"] == "LambdaFunctionScheduled") - sum(
        1 for e in history if e["type"] == "TaskStateEntered"
    )
    return entered + max(0, retries)
