"""Starts under the StartExecution quota, on moto, through the real code paths: a CSV import
with ``--trigger`` (``ops.csv_io``, as ``mailstep subscribers import`` calls it) and POST
/v1/events (the API handler). Throttling is injected on the real Step Functions client by a
botocore ``before-call`` hook that answers ``ThrottlingException`` as AWS does once the
account's StartExecution bucket is empty; botocore's own retries never see it, as when their
attempts or their retry quota are spent, so what the test sees is mailstep's own handling.
Executions are recorded by moto, not run, so each one started is still RUNNING when counted.
Then ``mailstep doctor``'s open-executions check counts them against the quota."""

from __future__ import annotations

import csv
import importlib
import json
import shutil
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from moto.core import DEFAULT_ACCOUNT_ID

from local_aws.provision import LocalResources
from ops import doctor
from ops.csv_io import SequenceTrigger, checkpoint_path, import_csv
from ops.targets import LOCAL, Target
from shared.core.aws import client, register_hook, unregister_hook
from shared.core.settings import Settings
from shared.core.specs import ENV
from shared.sending.rendering import TEMPLATES_DIR
from shared.sequences import SEQUENCES_DIR
from shared.sequences.engine import SequenceEngine
from shared.sequences.sfn import StartPolicy, StepFunctions
from shared.sequences.validate import require_catalog
from shared.store.subscribers import SubscriberStore
from tests.integration.conftest import API_KEY, ApiClient

REGION = "us-east-1"
DRIP = (
    "steps:\n  - send: welcome\n    subject: Welcome\n  - wait: 30d\n  - send: welcome\n    subject: Again\n"
)
PASS = '{"StartAt":"P","States":{"P":{"Type":"Pass","End":true}}}'


@dataclass
class Throttle:
    """Answers StartExecution with ``code`` for one call in ``every`` until ``first`` were
    refused (an empty bucket refilling), and for every call whose input names an address in
    ``stuck``; counts the calls made and refused."""

    first: int = 0
    every: int = 1
    stuck: set[str] = field(default_factory=set)
    code: str = "ThrottlingException"
    calls: int = 0
    refused: int = 0

    def __call__(
        self, model: Any, params: dict[str, Any], **_: Any
    ) -> tuple[AWSResponse, dict[str, Any]] | None:
        if model.name != "StartExecution":
            return None
        self.calls += 1
        email = json.loads(json.loads(params["body"])["input"])["email"]
        if email not in self.stuck and (self.refused >= self.first or self.calls % self.every):
            return None
        if email not in self.stuck:
            self.refused += 1
        status = 400
        parsed = {
            "Error": {"Code": self.code, "Message": "Rate exceeded"},
            "ResponseMetadata": {"HTTPStatusCode": status, "HTTPHeaders": {}},
        }
        return AWSResponse("https://states.us-east-1.amazonaws.com/", status, HTTPHeaders(), None), parsed


@pytest.fixture
def throttle() -> Iterator[Throttle]:
    injected = Throttle()
    register_hook("before-call.sfn.StartExecution", injected)
    try:
        yield injected
    finally:
        unregister_hook("before-call.sfn.StartExecution", injected)


def _role() -> str:
    iam = client("iam")
    try:
        return str(iam.get_role(RoleName="start-quota-test")["Role"]["Arn"])
    except ClientError:
        return str(iam.create_role(RoleName="start-quota-test", AssumeRolePolicyDocument="{}")["Role"]["Arn"])


@dataclass
class Machines:
    prefix: str  # state machine ARN prefix (the settings' state_machine_arn_prefix)
    arns: dict[str, str]  # sequence id -> ARN

    def executions(self, sequence: str) -> list[dict[str, Any]]:
        sfn: Any = client("stepfunctions")
        found: list[dict[str, Any]] = []
        request: dict[str, Any] = {"stateMachineArn": self.arns[sequence]}
        while True:
            page = sfn.list_executions(**request)
            found += page["executions"]
            if not page.get("nextToken"):
                return found
            request["nextToken"] = page["nextToken"]

    def started_for(self, sequence: str) -> Counter[str]:
        """Subscriber -> how many executions of ``sequence`` name them (from each input)."""
        sfn = client("stepfunctions")
        return Counter(
            json.loads(sfn.describe_execution(executionArn=e["executionArn"])["input"])["email"]
            for e in self.executions(sequence)
        )


def _deploy(sequence_ids: list[str]) -> Machines:
    name_prefix = f"sq{uuid.uuid4().hex[:8]}-seq-"
    sfn = StepFunctions()
    arns = {s: sfn.put_state_machine(f"{name_prefix}{s}", PASS, _role()) for s in sequence_ids}
    return Machines(f"arn:aws:states:{REGION}:{DEFAULT_ACCOUNT_ID}:stateMachine:{name_prefix}", arns)


def _remove(machines: Machines) -> None:
    for arn in machines.arns.values():
        client("stepfunctions").delete_state_machine(stateMachineArn=arn)


@pytest.fixture
def drips(tmp_path: Path, resources: LocalResources) -> Iterator[tuple[Path, Machines]]:
    """Two sequences triggered by ``subscriber.subscribed``, their state machines in moto."""
    folder = tmp_path / "sequences"
    folder.mkdir()
    shutil.copytree(TEMPLATES_DIR, tmp_path / "templates")  # beside the sequences, as in a project
    for sequence_id in ("drip-a", "drip-b"):
        (folder / f"{sequence_id}.yaml").write_text("trigger: subscriber.subscribed\n" + DRIP)
    require_catalog(folder, TEMPLATES_DIR)
    machines = _deploy(["drip-a", "drip-b"])
    yield folder, machines
    _remove(machines)


def _csv(path: Path, emails: list[str]) -> Path:
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["email", "first_name"])
        writer.writerows([email, f"Reader {i}"] for i, email in enumerate(emails))
    return path


def _trigger(
    store: SubscriberStore, folder: Path, machines: Machines, policy: StartPolicy
) -> SequenceTrigger:
    catalog = require_catalog(folder, TEMPLATES_DIR)
    engine = SequenceEngine(catalog, machines.prefix, store, StepFunctions().with_starts(policy))
    return SequenceTrigger(engine)


def test_throttling_during_an_import_loses_no_start_and_a_second_run_duplicates_none(
    tmp_path: Path, store: SubscriberStore, drips: tuple[Path, Machines], throttle: Throttle
) -> None:
    # Given an import of 40 readers into two drips, the account's StartExecution bucket empty:
    # every second call throttled until 12 were
    folder, machines = drips
    emails = [f"reader{i:02d}@example.com" for i in range(40)]
    source = _csv(tmp_path / "readers.csv", emails)
    throttle.first, throttle.every = 12, 2
    trigger = SequenceTrigger.load(store, machines.prefix, folder, StepFunctions(), start_rate=500)

    # When it runs, and runs again (the operator repeats the command)
    first = import_csv(source, store, trigger=trigger, workers=1, checkpoint=checkpoint_path(source))
    second = import_csv(source, store, trigger=trigger, workers=1, checkpoint=checkpoint_path(source))

    # Then every throttled start was retried: each reader is in each drip exactly once
    assert throttle.refused == 12
    assert first.starts_failed == [] and first.sequences_started == 80, first.public()
    assert second.starts_failed == [] and second.sequences_started == 0, second.public()
    for sequence in ("drip-a", "drip-b"):
        assert machines.started_for(sequence) == Counter({email: 1 for email in emails})
    assert all(len(store.list_executions(email)) == 2 for email in emails)  # each EXEC pair written
    assert not checkpoint_path(source).exists()


@pytest.mark.parametrize("code", ["ThrottlingException", "ExecutionLimitExceeded"])
def test_a_start_still_refused_after_the_retries_is_reported_and_the_next_run_starts_it(
    tmp_path: Path, store: SubscriberStore, drips: tuple[Path, Machines], throttle: Throttle, code: str
) -> None:
    # Given one reader whose start AWS keeps refusing (throttled past the retries, or the
    # open-executions quota reached), the import's patience cut short for the test
    folder, machines = drips
    emails = [f"row{i:02d}@example.com" for i in range(12)]
    stuck = emails[5]  # line 7
    source = _csv(tmp_path / "rows.csv", emails)
    throttle.stuck, throttle.code = {stuck}, code
    trigger = _trigger(
        store, folder, machines, StartPolicy(rate_per_s=500, patience_s=0.3, base_delay_s=0.02)
    )

    # When the import runs
    report = import_csv(source, store, trigger=trigger, workers=1, checkpoint=checkpoint_path(source))

    # Then the row is written, its starts are reported by line, nothing of them is left behind,
    # the other rows started, and the checkpoint keeps the line
    assert [(f.line, f.sequences) for f in report.starts_failed] == [(7, ("drip-a", "drip-b"))]
    assert ("quota" in report.starts_failed[0].reason) == (code == "ExecutionLimitExceeded")
    assert report.public()["starts_failed"][0]["line"] == 7
    assert report.created == 12 and report.sequences_started == 22
    assert store.get_profile(stuck) is not None and store.list_executions(stuck) == []
    assert json.loads(checkpoint_path(source).read_text())["starts_failed"] == [7]
    if code == "ThrottlingException":
        assert throttle.calls > 2 + 22  # the refused starts were retried before being reported

    # When AWS accepts again and the operator runs the same import
    throttle.stuck = set()
    again = import_csv(source, store, trigger=trigger, workers=1, checkpoint=checkpoint_path(source))

    # Then only that row is done again, its starts are made, and every reader is in each drip once
    assert again.skipped_before_checkpoint == 11 and again.unchanged == 1
    assert again.starts_failed == [] and again.sequences_started == 2
    for sequence in ("drip-a", "drip-b"):
        assert machines.started_for(sequence) == Counter({email: 1 for email in emails})
    assert not checkpoint_path(source).exists()


@pytest.fixture
def sequenced_api(
    resources: LocalResources, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[ApiClient, Machines]]:
    """The API handler as deployed with sequences: ``STATE_MACHINE_ARN_PREFIX`` set and the
    repository's sequences (``onboarding`` starts on ``subscriber.subscribed``) deployed in moto.
    The handler reads its settings at import: it is reloaded with them, and without them after."""
    catalog = require_catalog(SEQUENCES_DIR, TEMPLATES_DIR)
    machines = _deploy([s.id for s in catalog])
    for name, value in resources.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(ENV["state_machine_arn_prefix"], machines.prefix)
    module = importlib.reload(importlib.import_module("functions.api.handler"))
    yield ApiClient(module), machines
    monkeypatch.delenv(ENV["state_machine_arn_prefix"])
    importlib.reload(module)
    _remove(machines)


def _subscribe(email: str) -> dict[str, Any]:
    return {"type": "subscriber.subscribed", "email": email, "id": f"sub-{email}"}


def test_throttling_on_the_events_api_loses_no_start_and_a_refusal_is_a_503_to_retry(
    sequenced_api: tuple[ApiClient, Machines], store: SubscriberStore, throttle: Throttle
) -> None:
    api, machines = sequenced_api
    emails = [f"api{i:02d}@example.com" for i in range(8)]

    # Given the first StartExecution calls throttled, as many in a row as the API's patience
    # outlasts even at the longest jittered pauses (a longer run depends on the draw of the
    # jitter: a 503 to retry, the case below): every subscribe still starts onboarding
    policy = StartPolicy()
    throttle.first = 4
    worst = sum(min(policy.max_delay_s, policy.base_delay_s * 2**k) for k in range(throttle.first))
    assert worst < policy.patience_s - 1.0
    answers = [api.post("/v1/events", _subscribe(email)) for email in emails]
    assert [(status, body["results"][0]["sequences_started"]) for status, body in answers] == [
        (200, ["onboarding"])
    ] * 8
    assert throttle.refused == 4

    # Given a subscriber whose start stays throttled past the retries: a 503 to retry, no EXEC
    # pair left behind
    late = "late@example.com"
    throttle.stuck = {late}
    status, body = api.post("/v1/events", _subscribe(late))
    assert status == 503 and body["error"]["code"] == "throttled", body
    assert store.list_executions(late) == []

    # When the client retries as told, once AWS accepts again
    throttle.stuck = set()
    status, body = api.post("/v1/events", _subscribe(late))
    assert status == 200 and body["results"][0]["sequences_started"] == ["onboarding"], body

    # And every event is delivered a second time
    again = [api.post("/v1/events", _subscribe(email)) for email in [*emails, late]]
    assert all(status == 200 and body["results"][0]["replayed"] for status, body in again)

    # Then each subscriber has exactly one onboarding execution
    assert machines.started_for("onboarding") == Counter({email: 1 for email in [*emails, late]})


def test_a_503_names_retry_after(sequenced_api: tuple[ApiClient, Machines], throttle: Throttle) -> None:
    from local_aws.apigw import LambdaContext, http_api_event

    api, _ = sequenced_api
    throttle.stuck = {"stuck@example.com"}
    headers = {"content-type": "application/json", "authorization": f"Bearer {API_KEY}"}
    response = api.module.handler(
        http_api_event(
            "POST", "/v1/events", body=json.dumps(_subscribe("stuck@example.com")), headers=headers
        ),
        LambdaContext("api"),
    )
    assert response["statusCode"] == 503 and response["headers"]["Retry-After"] == "1"
    assert "quota" in json.loads(response["body"])["error"]["message"]


def _target(machines: Machines, resources: LocalResources) -> Target:
    settings = Settings(table_name=resources.tables["table_name"], state_machine_arn_prefix=machines.prefix)
    return Target(kind=LOCAL, name="start-quota", region=REGION, settings=settings)


def test_doctor_counts_open_executions_against_the_quota_with_guidance(
    resources: LocalResources, throttle: Throttle
) -> None:
    # Given 30 RUNNING executions of one sequence machine and 5 of another
    machines = _deploy(["drip-a", "drip-b"])
    sfn = client("stepfunctions")
    try:
        for sequence, count in (("drip-a", 30), ("drip-b", 5)):
            for i in range(count):
                sfn.start_execution(
                    stateMachineArn=machines.arns[sequence],
                    name=f"x{i}",
                    input=json.dumps({"email": f"{i}@x.test"}),
                )
        target = _target(machines, resources)

        # When doctor counts them against a quota they are far from, near, and past 80 % of
        low = doctor.check_open_executions(target, quota=1_000_000)
        near = doctor.check_open_executions(target, quota=60)
        high = doctor.check_open_executions(target, quota=40)
        capped = doctor.check_open_executions(target, quota=1_000_000, at_most=10)
        with Stubber(client("sesv2")) as ses:  # moto has no SES GetAccount
            ses.add_response("get_account", {"ProductionAccessEnabled": True, "SendingEnabled": True})
            report = doctor.run(target, executions_quota=40)
    finally:
        _remove(machines)

    # Then each says how many are open, per sequence, and what to do when it matters
    assert low.status == "pass" and low.detail.startswith("35 open of the 1,000,000 quota"), low
    assert "drip-a: 30" in low.detail and "drip-b: 5" in low.detail and low.hint == ""
    assert near.status == "warn" and "58%" in near.detail and "Service Quotas" in near.hint, near
    assert high.status == "fail" and "88%" in high.detail, high
    assert "shorten long drips" in high.hint and "ExecutionLimitExceeded" in high.hint
    assert capped.status == "warn" and capped.detail.startswith("at least 10 open"), capped
    assert "drip-b: not counted" in capped.detail and "--executions-counted" in capped.hint
    check = next(c for c in report.checks if c.name == "open-executions")
    assert check.status == "fail" and not report.ok


def test_doctor_skips_open_executions_without_sequence_machines(resources: LocalResources) -> None:
    target = _target(
        Machines(f"arn:aws:states:{REGION}:{DEFAULT_ACCOUNT_ID}:stateMachine:none-seq-", {}), resources
    )
    check = doctor.check_open_executions(target)
    assert check.status == "skip"
