"""Where the operator commands act: a stack, found by its name through CloudFormation.

A deployed stack and the local runtime resolve the same way. ``describe_stacks`` gives the
outputs, and ``shared.core.specs.stack_outputs()`` says which Settings field each output carries,
so the CLI and the MCP server rebuild exactly the settings the Lambdas get from their
environment; ``list_stack_resources`` finds what the outputs do not name (queues and their
DLQs, the SES configuration set, alarms, functions, state machines) for ``mailstep doctor``.

The local runtime registers itself in its emulated CloudFormation as a stack named
``specs.STACK_NAME`` (``local_aws.cfn_stack``): :func:`local_target` is :func:`stack_target`
against the runtime's endpoint, labelled as the local runtime.

A :class:`Target` is a value: the settings, the resources and the configured clients
(``shared.core.aws.ClientFactory``) of one deployment. Everything the operator commands do
goes through the adapters it builds (:meth:`Target.subscriber_store`, :meth:`Target.send_context`...),
so nothing depends on where ``os.environ`` points.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from shared.core import specs
from shared.core.aws import ClientFactory
from shared.core.errors import InvalidInput, NotFound
from shared.core.settings import Settings

if TYPE_CHECKING:
    from shared.sending.pipeline import SendContext
    from shared.sequences.engine import SequenceEngine
    from shared.store.stats import StatsStore
    from shared.store.subscribers import SubscriberStore

LOCAL, STACK = "local", "stack"
# The running local runtime (`mailstep dev`) writes its endpoints and keys here (local_aws.runtime).
DEFAULT_STATE_DIR = Path(".mailstep")
STATE_FILE = "runtime.json"


def read_state(state_dir: Path) -> dict[str, Any]:
    """The runtime.json a local runtime (``mailstep dev``) wrote in ``state_dir``: its endpoints,
    keys and outbox. Reading it imports nothing of the runtime (no moto)."""
    path = state_dir / STATE_FILE
    if not path.exists():
        raise FileNotFoundError(
            f"no running local runtime found ({path} is missing): start `mailstep dev` first"
        )
    return dict(json.loads(path.read_text()))


class StackNotFound(NotFound):
    pass


def calendar_offset(api_url: str) -> float:
    """How far a running local runtime's calendar is ahead of the wall clock (``mailstep local
    advance``), as its control endpoint says."""
    import urllib.request

    with urllib.request.urlopen(api_url + "/_local/status", timeout=10) as answer:  # noqa: S310
        return float(json.loads(answer.read())["clock"].get("calendar_offset_s", 0.0))


@dataclass(frozen=True)
class Target:
    """A resolved target: its settings, the resource names doctor and executions need, and the
    clients that reach it."""

    kind: str  # LOCAL | STACK
    name: str  # the stack name, or the local runtime's state folder
    region: str
    settings: Settings
    api_url: str = ""
    # Physical resources by kind: "queues" (URLs), "configuration_sets", "alarms" (names),
    # "state_machines" (ARNs), "functions" (names), "receipt_rule_sets" (names). Empty lists mean
    # "none found".
    resources: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    aws: ClientFactory = field(default_factory=ClientFactory, compare=False, repr=False)

    @property
    def label(self) -> str:
        return f"local runtime ({self.name})" if self.kind == LOCAL else f"stack {self.name} ({self.region})"

    def client(self, service: str) -> Any:
        """A boto3 client of ``service`` for this target."""
        return self.aws.client(service)

    def calendar_now(self) -> datetime:
        """Now as the target counts its days (the warm-up's "today"): a local runtime's calendar,
        which `mailstep local advance` moves ahead of the wall clock; a stack's is the wall clock."""
        now = datetime.now(UTC)
        if self.kind != LOCAL:
            return now
        try:  # the runtime's control endpoint, named in its state folder (runtime.json)
            offset = calendar_offset(json.loads((Path(self.name) / STATE_FILE).read_text())["api_url"])
        except (OSError, ValueError, KeyError, TypeError):
            return now
        return now + timedelta(seconds=offset)

    # ----- the shared adapters, wired to this target's settings and clients -------------------
    def subscriber_store(self) -> SubscriberStore:
        from shared.store.subscribers import SubscriberStore

        settings = self.settings
        return SubscriberStore(
            settings.table_name, settings.events_table_name, client=self.client("dynamodb")
        )

    def stats_store(self) -> StatsStore:
        from shared.store.stats import StatsStore

        settings = self.settings
        return StatsStore(settings.table_name, settings.events_table_name, client=self.client("dynamodb"))

    def sequence_engine(
        self, store: SubscriberStore | None = None, sequences_dir: Path | None = None
    ) -> SequenceEngine:
        """The sequence engine; with no ``sequences_dir`` it has no catalog (enough to stop and
        reconcile: the EXEC pairs name the executions)."""
        from shared.sequences.engine import SequenceEngine
        from shared.sequences.sfn import StepFunctions
        from shared.sequences.validate import Catalog, require_catalog

        return SequenceEngine(
            catalog=require_catalog(sequences_dir) if sequences_dir is not None else Catalog(),
            arn_prefix=self.settings.state_machine_arn_prefix,
            store=store or self.subscriber_store(),
            sfn=StepFunctions(self.client("stepfunctions")),
        )

    def send_context(self) -> SendContext:
        """What the send pipeline needs, on this target's clients."""
        from shared.sending.pipeline import SendContext

        return SendContext.from_settings(self.settings, self.subscriber_store(), aws=self.aws)


def _settings_from(values: Mapping[str, str], origin: str) -> Settings:
    missing = [spec.setting for spec in specs.TABLES if not values.get(spec.setting)]
    if missing:
        raise InvalidInput(f"{origin} does not name {', '.join(missing)}: is it a mailstep deployment?")
    return Settings.model_validate(dict(values))


def stack_outputs(stack_name: str, aws: ClientFactory) -> dict[str, str]:
    """The raw CloudFormation outputs of ``stack_name`` (output key -> value)."""
    try:
        stacks = aws.client("cloudformation").describe_stacks(StackName=stack_name)["Stacks"]
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
    "AWS::SES::ReceiptRuleSet": "receipt_rule_sets",  # replies on (mailstep:inboundDomain)
}


def stack_resources(stack_name: str, aws: ClientFactory) -> dict[str, tuple[str, ...]]:
    """Physical ids of the stack's queues, configuration sets, alarms, state machines, functions
    and receipt rule sets."""
    found: dict[str, list[str]] = {kind: [] for kind in RESOURCE_TYPES.values()}
    cfn = aws.client("cloudformation")
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


def state_machine_arn_prefix(region: str, stack_name: str, aws: ClientFactory) -> str:
    """``arn:aws:states:<region>:<account>:stateMachine:<stack name>-seq-`` for stacks that
    predate the ``StateMachineArnPrefix`` output."""
    account = aws.client("sts").get_caller_identity()["Account"]
    return f"arn:aws:states:{region}:{account}:stateMachine:{specs.state_machine_prefix(stack_name)}"


def stack_target(stack_name: str, region: str, aws: ClientFactory | None = None) -> Target:
    """The target of the stack named ``stack_name`` in the account and region of the clients
    (``aws``; by default the environment's)."""
    aws = aws or ClientFactory()
    outputs = stack_outputs(stack_name, aws)
    fields = specs.stack_outputs()
    values = {fields[k]: v for k, v in outputs.items() if k in fields}
    if not values.get("state_machine_arn_prefix"):
        values["state_machine_arn_prefix"] = state_machine_arn_prefix(region, stack_name, aws)
    if outputs.get(specs.API_URL_OUTPUT) and not values.get("public_base_url"):
        # the functions' PUBLIC_BASE_URL is the API's URL (stacks/mailstep_stack.py): a mail the
        # operator sends (send-test, the console) links to the same unsubscribe and confirm pages
        values["public_base_url"] = outputs[specs.API_URL_OUTPUT].rstrip("/")
    resources = stack_resources(stack_name, aws)
    if not values.get("configuration_set") and len(resources["configuration_sets"]) == 1:
        values["configuration_set"] = resources["configuration_sets"][0]  # what the senders name
    return Target(
        kind=STACK,
        name=stack_name,
        region=region,
        settings=_settings_from(values, f"stack {stack_name!r}"),
        api_url=outputs.get(specs.API_URL_OUTPUT, ""),
        resources=resources,
        aws=aws,
    )


def local_target(state_dir: str, region: str, aws: ClientFactory | None = None) -> Target:
    """The running local runtime (``aws`` points at its endpoint): the stack it registered
    under ``specs.STACK_NAME``, labelled with its state folder."""
    return replace(stack_target(specs.STACK_NAME, region, aws), kind=LOCAL, name=state_dir)


class TargetError(Exception):
    """No usable target (the command line exits 2 with the message)."""


def local_state(state_dir: Path) -> dict[str, Any] | None:
    """The runtime.json of a RUNNING local runtime in ``state_dir``, else None.

    ``mailstep dev`` leaves runtime.json behind when it stops, so the endpoint must answer.
    """
    import socket
    from urllib.parse import urlparse

    try:
        state = read_state(state_dir)
    except FileNotFoundError:
        return None
    endpoint = urlparse(str(state.get("endpoint", "")))
    try:
        with socket.create_connection((endpoint.hostname or "127.0.0.1", endpoint.port or 80), timeout=1):
            return state
    except OSError:
        return None


def resolve(target: str | None, stack: str | None, state_dir: Path, region: str | None = None) -> Target:
    """Where an operator command acts (the rules: ``cli.target``), as a :class:`Target` with
    clients that reach it."""
    import os

    from botocore.exceptions import BotoCoreError

    from shared.core.aws import AwsConfig

    if target not in (None, LOCAL, STACK):
        raise TargetError(f"--target must be 'local' or 'stack', not {target!r}")
    state_dir = state_dir.resolve()
    local = target == LOCAL or (target is None and not stack)
    if local:
        state = local_state(state_dir)
        if state is None:
            hint = "start `mailstep dev`, or choose a deployed stack with --stack NAME (or MAILSTEP_STACK)"
            raise TargetError(f"no running local runtime in {state_dir}: {hint}")
        region = str(state["region"])
        aws = ClientFactory(AwsConfig.emulated(str(state["endpoint"]), region))
    else:
        region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if not region:
            raise TargetError("no AWS region: pass --region or set AWS_REGION")
        aws = ClientFactory(AwsConfig(region=region))  # credentials and endpoint: boto3's usual lookup
    name = specs.STACK_NAME if local else stack or specs.STACK_NAME
    try:
        if local:
            return local_target(str(state_dir), region, aws)
        return stack_target(name, region, aws)
    except StackNotFound as exc:
        if local:
            raise TargetError(
                f"the local runtime in {state_dir} registered no stack {name!r}: restart it"
            ) from None
        where = f" at {os.environ['AWS_ENDPOINT_URL']}" if os.environ.get("AWS_ENDPOINT_URL") else ""
        hint = "check --stack (or MAILSTEP_STACK), --region (or AWS_REGION) and your credentials' account"
        raise TargetError(f"{exc} ({region}{where}): {hint}") from None
    except (BotoCoreError, ClientError) as exc:
        raise TargetError(f"cannot read stack {name!r} in {region}: {exc}") from None


def state_machine_name_prefix(arn_prefix: str) -> str:
    """``<stack name>-seq-`` from ``settings.state_machine_arn_prefix`` (the default stack's
    prefix when it is empty)."""
    return arn_prefix.rpartition(":stateMachine:")[2] if arn_prefix else specs.STATE_MACHINE_PREFIX


def _state_machines(prefix: str, aws: ClientFactory) -> list[str]:
    sfn = aws.client("stepfunctions")
    found: list[str] = []
    token: str | None = None
    while True:
        page = sfn.list_state_machines(**({"nextToken": token} if token else {}))
        found += [m["stateMachineArn"] for m in page["stateMachines"] if m["name"].startswith(prefix)]
        token = page.get("nextToken")
        if not token:
            return found


def sequence_state_machines(arn_prefix: str = "", aws: ClientFactory | None = None) -> dict[str, str]:
    """Sequence id -> state machine ARN of the target's sequence machines, named
    ``<stack name>-seq-<id>``; ``arn_prefix`` is the target's ``settings.state_machine_arn_prefix``
    (listed live: sequences are deployed after the stack)."""
    prefix = state_machine_name_prefix(arn_prefix)
    marker = f":stateMachine:{prefix}"
    found = _state_machines(prefix, aws or ClientFactory())
    return {arn.split(marker, 1)[1]: arn for arn in found if marker in arn}
