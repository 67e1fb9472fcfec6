"""Sequences on the local runtime: what one email costs when it is sent by a state machine.

Two measurements, each over subscribers whose executions run to the end on the virtual
clock (waits are instant, the Lambdas run in-process):

- a linear 5-mail drip (send, wait 1d, send, ...): the shape the <= 2.0 transitions per
  email target is about (comparable tools pay ~2.6 with register/send/wait/complete);
- the shipped ``onboarding`` example (a live branch on a tag, 4 mails per subscriber).

Executions are started by the sequence engine exactly as the events dispatch does (pair
first, then StartExecution); the profiles are created before the measurement starts.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.harness import Bench
from bench.meter import Measurement
from local_aws.sequence_machines import deploy_state_machines
from shared.core import specs
from shared.core.aws import ClientFactory
from shared.core.models import InboundEvent
from shared.sequences import SEQUENCES_DIR
from shared.sequences.engine import SequenceEngine
from shared.sequences.sfn import StepFunctions
from shared.sequences.validate import require_catalog
from shared.store.subscribers import Profile, SubscriberStore

NAME = "sequences"
DESCRIPTION = "emails sent by sequence state machines: a linear 5-mail drip and the onboarding example"
SUBSCRIBERS = 20
LINEAR = "trigger: bench.linear\nsteps:\n" + "  - wait: 1d\n".join(
    f"  - send: onboarding/tips\n    subject: Tip {i}\n" for i in range(1, 6)
)


def _wait_all(aws: ClientFactory, machine_arns: list[str], expected: int, timeout_s: float = 300.0) -> None:
    sfn = aws.client("stepfunctions")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done = running = 0
        for arn in machine_arns:
            for execution in sfn.list_executions(stateMachineArn=arn)["executions"]:
                running += execution["status"] == "RUNNING"
                done += execution["status"] != "RUNNING"
        if running == 0 and done >= expected:
            return
        time.sleep(0.05)
    raise TimeoutError("sequence executions did not finish")


@dataclass
class Deployed:
    """The shipped sequences and the bench's linear drip, deployed as state machines."""

    aws: ClientFactory
    store: SubscriberStore
    engine: SequenceEngine
    machines: dict[str, str]  # sequence id -> state machine ARN

    def subscribers(self, sequence_id: str, count: int, *, tag_half: bool, prefix: str = "") -> list[Profile]:
        """``count`` new profiles (every other one tagged ``pro`` with ``tag_half``)."""
        profiles = []
        for i in range(count):
            tags = ["pro"] if tag_half and i % 2 else []
            email = f"{prefix}{sequence_id}-{i}@example.com"
            change = self.store.upsert(email, first_name=f"Reader {i}", add_tags=tags)
            assert change.profile is not None
            profiles.append(change.profile)
        return profiles

    def start_and_wait(self, sequence_id: str, profiles: list[Profile]) -> None:
        """Start ``sequence_id`` for each profile as the events dispatch does, and wait until
        every execution of its machine has ended."""
        sequence = self.engine.catalog.sequences[sequence_id]
        expected = len(self.aws.client("stepfunctions").list_executions(
            stateMachineArn=self.machines[sequence_id])["executions"]) + len(profiles)  # fmt: skip
        for profile in profiles:
            event = InboundEvent(type=sequence.trigger_event, email=profile.email)
            self.engine.start(sequence, profile, event)
        _wait_all(self.aws, [self.machines[sequence_id]], expected)


def deploy(bench: Bench) -> Deployed:
    runtime = bench.runtime
    region = runtime.config.region
    aws = bench.aws
    account = aws.client("sts").get_caller_identity()["Account"]
    # The bench's own machines (a linear drip beside the shipped sequences) get a role of theirs.
    trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
             "Principal": {"Service": "states.amazonaws.com"}}]}  # fmt: skip
    role = aws.client("iam").create_role(
        RoleName="bench-sequences", AssumeRolePolicyDocument=json.dumps(trust)
    )["Role"]["Arn"]
    step_arn = runtime.resources.functions[specs.SEQUENCE_STEP_FUNCTION.name].arn
    prefix = f"arn:aws:states:{region}:{account}:stateMachine:{specs.STATE_MACHINE_PREFIX}"
    tables = runtime.resources.tables
    store = SubscriberStore(tables["table_name"], tables["events_table_name"], client=aws.client("dynamodb"))
    sfn = StepFunctions(aws.client("stepfunctions"))

    with tempfile.TemporaryDirectory() as folder:
        drip = Path(folder) / "sequences"
        drip.mkdir()
        (drip / "bench-linear.yaml").write_text(LINEAR)
        for path in SEQUENCES_DIR.glob("*.yaml"):
            (drip / path.name).write_text(path.read_text())
        templates = SEQUENCES_DIR.parent / "templates"
        machines = deploy_state_machines(step_arn, role, drip, templates, sfn=sfn)
        catalog = require_catalog(drip, templates)
    engine = SequenceEngine(catalog=catalog, arn_prefix=prefix, store=store, sfn=sfn)
    return Deployed(aws=aws, store=store, engine=engine, machines=dict(machines))


def run(bench: Bench) -> list[Measurement]:
    deployed = deploy(bench)

    def walk(sequence_id: str, label: str, mails: int, tag_half: bool) -> Measurement:
        profiles = deployed.subscribers(sequence_id, SUBSCRIBERS, tag_half=tag_half)
        return bench.measure(
            label, SUBSCRIBERS * mails, "email", lambda: deployed.start_and_wait(sequence_id, profiles)
        )

    return [
        walk("bench-linear", f"linear 5-mail drip x {SUBSCRIBERS}", 5, tag_half=False),
        walk("onboarding", f"onboarding (branch on tag pro) x {SUBSCRIBERS}", 4, tag_half=True),
    ]
