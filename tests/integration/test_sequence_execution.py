"""Generated state machines executed by moto's ASL interpreter, with the real step logic,
the real store and the real send pipeline in-process (Lambda invocations are routed to
``run_step``; Wait and Retry intervals are recorded instead of slept)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from email import policy
from email.parser import BytesParser
from pathlib import Path
from typing import Any
from unittest import mock
from zoneinfo import ZoneInfo

import pytest
from botocore.exceptions import ClientError
from moto.awslambda.models import LambdaFunction
from moto.core import DEFAULT_ACCOUNT_ID
from moto.core.config import default_user_config
from moto.scheduler.models import EventBridgeSchedulerBackend
from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl
from moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function import WaitFunction

from local_aws import hooks
from local_aws.scheduler import OneTimeSchedules
from shared.core.aws import ClientFactory, client
from shared.core.models import InboundEvent
from shared.core.specs import STATS_FOLD_FUNCTION
from shared.core.topics import TOPICS_FILE, require_topics
from shared.sending.jobs import SendJob
from shared.sending.pipeline import SendContext, SendOutcome, send
from shared.sequences import SEQUENCES_DIR
from shared.sequences.compiler import compile_sequence, definition_json, render_definition
from shared.sequences.engine import SequenceEngine
from shared.sequences.evaluate import evaluate
from shared.sequences.loader import Source, parse_source
from shared.sequences.model import Sequence
from shared.sequences.schedules import Resumer
from shared.sequences.sfn import StepFunctions, state_transitions
from shared.sequences.steps import StepDeps, parse_request, run_step
from shared.sequences.structure import structural_problems
from shared.sequences.validate import Catalog, load_catalog
from shared.store.stats import StatsStore
from shared.store.stream_counts import StreamCountFold
from shared.store.subscribers import SubscriberStore, keys
from shared.web.ingest import IngestContext, dispatch
from tests.eventually import eventually
from tests.integration.conftest import fold_batches, in_process_function, scan_all
from tests.integration.webhook_support import Streams

REGION = "us-east-1"
FUNCTION = "seq-step-under-test"
ROLE = "seq-test-role"
SCHEDULE_GROUP = "test-sequences"  # the callback Tasks' schedules
PREFIX = f"arn:aws:states:{REGION}:{DEFAULT_ACCOUNT_ID}:stateMachine:test-seq-"


@dataclass
class Harness:
    store: SubscriberStore
    sfn: StepFunctions
    function_arn: str
    role_arn: str
    waits: list[float] = field(default_factory=list)
    retries: list[float] = field(default_factory=list)
    invocations: list[dict[str, Any]] = field(default_factory=list)
    # (template) -> outcomes to return instead of sending, consumed in order
    scripted: dict[str, list[str]] = field(default_factory=dict)
    gate: threading.Event | None = None  # waits (Wait states, callback schedules) block until it is set
    machines: list[str] = field(default_factory=list)
    send_real: Callable[[SendJob], SendOutcome] | None = None

    def send(self, job: SendJob) -> SendOutcome:
        script = self.scripted.get(job.template)
        if script:
            status = script.pop(0)
            return SendOutcome(status=status, send_id="x", reason="scripted")  # type: ignore[arg-type]
        assert self.send_real is not None
        return self.send_real(job)

    def deploy(self, sequence: Sequence) -> str:
        asl = compile_sequence(sequence)
        assert structural_problems(asl) == []
        definition = render_definition(definition_json(sequence), self.function_arn)
        arn = self.sfn.put_state_machine(f"test-seq-{sequence.id}", definition, self.role_arn)
        self.machines.append(arn)
        return arn

    def engine(self, catalog: Catalog) -> SequenceEngine:
        for sequence in catalog:
            self.deploy(sequence)
        return SequenceEngine(catalog=catalog, arn_prefix=PREFIX, store=self.store, sfn=self.sfn)

    def wait_done(self, execution_arn: str, timeout: float = 20.0) -> dict[str, Any]:
        def ended() -> dict[str, Any] | None:
            described = self.sfn.describe(execution_arn)
            return described if described["status"] != "RUNNING" else None

        return eventually(ended, timeout, f"{execution_arn} to end", interval_s=0.02)

    def until_waiting(self, count: int = 1, timeout: float = 20.0) -> None:
        """Block until ``count`` Wait states were entered (executions run in moto's threads)."""
        eventually(lambda: len(self.waits) >= count, timeout, f"{count} Wait states entered", interval_s=0.01)

    def sent(self, email: str) -> list[str]:
        items = [
            i
            for i in scan_all(self.store.table)
            if i["PK"] == keys.sub_pk(email) and i["SK"].startswith(keys.SENT_PREFIX)
        ]
        return [i["template"] for i in sorted(items, key=lambda i: i["SK"])]

    def exec_items(self) -> list[dict[str, Any]]:
        return [
            i
            for i in scan_all(self.store.table)
            if i["PK"].startswith("EXEC#") or i["SK"].startswith("EXEC#")
        ]


@pytest.fixture
def harness(store: SubscriberStore, send_ctx: SendContext) -> Iterator[Harness]:
    previous = dict(default_user_config.get("stepfunctions", {}))
    default_user_config.setdefault("stepfunctions", {})["execute_state_machine"] = True
    with contextlib.suppress(ClientError):
        client("sesv2").create_email_identity(EmailIdentity="example.com")
    function_arn, role_arn = in_process_function(FUNCTION, ROLE)
    h = Harness(store=store, sfn=StepFunctions(), function_arn=function_arn, role_arn=role_arn)
    h.send_real = lambda job: send(job, send_ctx)
    # Callback Tasks: the step function creates its schedules in moto's Scheduler; the local
    # runtime's one-time schedules fire them (IAM is not enforced here), their wait recorded and
    # held by the gate like a Wait state's.
    with contextlib.suppress(ClientError):
        client("scheduler").create_schedule_group(Name=SCHEDULE_GROUP)
    deps = StepDeps(store=store, send=h.send, resumer=Resumer(SCHEDULE_GROUP, role_arn))

    class Recorder:
        @staticmethod
        def wait(seconds: float, interrupt: Any = None, running: Callable[[], bool] | None = None) -> None:
            h.waits.append(seconds)
            gate = h.gate
            if gate is not None:
                while not gate.wait(0.01) and (running is None or running()):
                    pass

    def delete(group: str, name: str) -> None:
        client("scheduler").delete_schedule(GroupName=group, Name=name)

    schedules = OneTimeSchedules(Recorder(), ClientFactory(), lambda *_: True, lambda _: None, delete)

    def invoke(self: Any, event: Any = None) -> tuple[str, bool, str]:
        payload = json.loads(event) if isinstance(event, str | bytes) else event
        h.invocations.append(payload)
        try:
            return json.dumps(run_step(parse_request(payload), deps)), False, ""
        except Exception as exc:  # mapped like the Lambda service maps a function error
            return json.dumps({"errorType": type(exc).__name__, "errorMessage": str(exc)}), True, ""

    def wait(self: Any, env: Any, wait_seconds: int) -> None:
        h.waits.append(wait_seconds)
        gate = h.gate
        if gate is not None:
            while not gate.wait(0.01) and not env.program_state_event.is_set():
                pass

    class RetryTime:
        def __getattr__(self, name: str) -> Any:
            return getattr(time, name)

        @staticmethod
        def sleep(seconds: float) -> None:
            h.retries.append(seconds)

    with (
        mock.patch.object(hooks.ACTIVE, "schedules", schedules),
        mock.patch.object(EventBridgeSchedulerBackend, "create_schedule", hooks.armed_create_schedule),
        mock.patch.object(EventBridgeSchedulerBackend, "update_schedule", hooks.armed_update_schedule),
        mock.patch.object(EventBridgeSchedulerBackend, "delete_schedule", hooks.forgetting_delete_schedule),
        mock.patch.object(LambdaFunction, "_invoke_lambda", invoke),
        mock.patch.object(WaitFunction, "_wait_interval", wait),
        mock.patch.object(retrier_decl, "time", RetryTime()),
    ):
        yield h
    schedules.stop()
    for arn in h.machines:
        with contextlib.suppress(ClientError):
            client("stepfunctions").delete_state_machine(stateMachineArn=arn)
    default_user_config["stepfunctions"] = previous


def sequence_from(text: str, sequence_id: str = "t") -> Sequence:
    import yaml

    from shared.sequences.loader import _Composer

    composer = _Composer(f"{sequence_id}.yaml")
    data = composer.build(yaml.compose(text, Loader=yaml.SafeLoader), ())
    sequence, problems = parse_source(Source(f"{sequence_id}.yaml", data, composer.lines), sequence_id)
    assert not problems, problems
    assert sequence is not None
    return sequence


def send_wait_send(sequence_id: str, head: str, first: str, then: str) -> Sequence:
    """A sequence whose ``head`` (trigger and options) is followed by three steps: send
    ``first``, wait a day, send ``then``."""
    steps = f"  - send: {first}\n    subject: A\n  - wait: 1d\n  - send: {then}\n    subject: B\n"
    return sequence_from(f"{head}\nsteps:\n{steps}", sequence_id)


def start(
    h: Harness,
    sequence: Sequence,
    email: str,
    *,
    name: str = "run-1",
    tags: list[str] | None = None,
    attributes: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Given a subscriber, When the dispatcher starts the sequence: pair first, then execution."""
    change = h.store.upsert(email, first_name="Ada", add_tags=tags or [], attributes=attributes or {})
    assert change.profile is not None
    engine = SequenceEngine(catalog=Catalog(), arn_prefix=PREFIX, store=h.store, sfn=h.sfn)
    event = InboundEvent(type="go", email=email, id=name)
    assert engine.start(sequence, change.profile, event)
    arn = next(e.execution_arn for e in h.store.list_executions(email) if e.sequence_id == sequence.id)
    return h.wait_done(arn)


def assert_waits(waits: list[float], expected: list[int]) -> None:
    """The waits stood for the expected durations. A callback Task's wait is its schedule's time
    (the wake-up, rounded up to the second) less the moment the schedule was armed, so it may
    differ from the step's duration by the second's rounding and the milliseconds in between."""
    assert len(waits) == len(expected)
    assert all(abs(w - e) <= 2 for w, e in zip(sorted(waits), sorted(expected), strict=True)), waits


def test_examples_run_with_the_expected_branch_and_leave_no_pairs(harness: Harness) -> None:
    catalog, problems = load_catalog(SEQUENCES_DIR)
    assert problems == []
    onboarding = catalog.sequences["onboarding"]
    harness.deploy(onboarding)
    pro = start(harness, onboarding, "pro@example.com", tags=["pro"])
    basic = start(harness, onboarding, "basic@example.com")
    assert pro["status"] == basic["status"] == "SUCCEEDED"
    common = ["onboarding/welcome", "onboarding/tips"]
    assert harness.sent("pro@example.com") == [*common, "onboarding/pro-tips", "onboarding/check-in"]
    assert harness.sent("basic@example.com") == [*common, "onboarding/upgrade", "onboarding/check-in"]
    assert harness.store.get_profile("pro@example.com").tags == {"pro", "onboarded"}  # type: ignore[union-attr]
    assert harness.exec_items() == []
    assert_waits(harness.waits, [86400, 172800, 604800] * 2)

    trial = catalog.sequences["trial-expiring"]
    harness.deploy(trial)
    assert start(harness, trial, "trial@example.com")["status"] == "SUCCEEDED"
    assert harness.sent("trial@example.com") == ["trial/expiring", "trial/last-day"]
    assert harness.exec_items() == []
    done = {"active": 0, "started": 2, "completed": 2}  # the console's sequences list reads these
    assert executions_of(harness, "onboarding") == done


def test_linear_sequence_costs_one_transition_per_email(harness: Harness) -> None:
    steps = "\n".join(f"  - send: onboarding/tips\n    subject: Mail {i}\n  - wait: 1d" for i in range(5))
    sequence = sequence_from("trigger: go\nsteps:\n" + steps.rsplit("\n  - wait: 1d", 1)[0], "linear")
    harness.deploy(sequence)
    result = start(harness, sequence, "linear@example.com")
    history = harness.sfn.history(result["executionArn"])
    sent = len(harness.sent("linear@example.com"))
    transitions = state_transitions(history)
    assert sent == 5
    assert transitions == 5  # 4 callback Tasks (send + wait) and the last send: no Wait states
    assert transitions / sent <= 1.25
    assert_waits(harness.waits, [86400] * 4)
    assert harness.exec_items() == []


def test_a_live_branch_of_single_sends_is_one_task_and_its_retry_sends_once(harness: Harness) -> None:
    """Given onboarding (its ``if {tag: pro}`` after a wait folds check, Choice and send into one
    ``branch`` Task, which is also a callback Task with the wait after it), When the branch's first
    send is throttled and the Task retried, Then each reader gets one mail of their branch and a
    run costs 4 transitions for 4 mails (the retry one more: AWS bills a Task's retry as a
    transition)."""
    catalog, problems = load_catalog(SEQUENCES_DIR)
    assert problems == []
    onboarding = catalog.sequences["onboarding"]
    harness.deploy(onboarding)
    harness.scripted["onboarding/upgrade"] = ["retryable"]
    runs = {
        "pro": start(harness, onboarding, "fold-pro@example.com", tags=["pro"]),
        "basic": start(harness, onboarding, "fold-basic@example.com"),
    }
    for kind, run in runs.items():
        assert run["status"] == "SUCCEEDED"
        sent = harness.sent(f"fold-{kind}@example.com")
        assert sent[2] == ("onboarding/pro-tips" if kind == "pro" else "onboarding/upgrade")
        assert len(sent) == 4
        assert state_transitions(harness.sfn.history(run["executionArn"])) == 4 + (kind == "basic")
    assert harness.scripted["onboarding/upgrade"] == [] and len(harness.retries) == 1
    assert not any(i["action"] == "check" for i in harness.invocations)
    assert harness.exec_items() == []


def test_a_branch_step_delivered_twice_sends_once(harness: Harness) -> None:
    """Given a running execution's pair, When the same ``branch`` payload is run twice (a
    redelivered invocation), Then one mail goes out, under the chosen branch's own step code."""
    email = "fold-twice@example.com"
    harness.store.upsert(email, first_name="Ada", add_tags=["pro"])
    arn = f"{PREFIX}t:t-twice"
    harness.store.put_execution(email, "t", arn)
    payload = {
        "contract": "sequence.step",
        "version": 1,
        "action": "branch",
        "sequence": "t",
        "step": "S3",
        "email": email,
        "execution": arn,
        "condition": {"tag": "pro"},
        "then": {"step": "S3T1", "template": "onboarding/pro-tips", "subject": "Pro", "add": ["seen"]},
        "else": {"step": "S3E1", "template": "onboarding/upgrade", "subject": "Upgrade"},
    }
    deps = StepDeps(store=harness.store, send=harness.send)
    first = run_step(parse_request(payload), deps)
    second = run_step(parse_request(payload), deps)
    assert (first["ok"], first["outcome"]) == (True, "sent")
    assert second["outcome"] == "skipped:already_sent"
    assert harness.sent(email) == ["onboarding/pro-tips"]
    log = [i for i in scan_all(harness.store.table) if i["SK"].startswith(keys.SENT_PREFIX)]
    assert [i["step"] for i in log if i["email"] == email] == [f"S3T1:{arn.rsplit(':', 1)[-1][-40:]}"]
    assert "seen" in harness.store.get_profile(email).tags  # type: ignore[union-attr]


def test_every_step_kind_and_condition_executes(harness: Harness) -> None:
    sequence = sequence_from(
        """
trigger: go
sender: {from: "Acme <news@example.com>", reply_to: "help@example.com"}
steps:
  - if: {all: [{attribute: plan, in: [pro, team]}, {not: {tag: churned}}]}
    then: [{tag: {add: [vip]}}]
  - if: {any: [{attribute: seats, greater: 10}, {attribute: beta, exists: true}]}
    then: [{send: onboarding/pro-tips, subject: "Big team"}]
    else: [{send: onboarding/upgrade, subject: "Small team"}]
  - wait: 30m
  - if: {tag: vip}
    then: [{send: onboarding/tips, subject: "VIP tips"}]
  - if: {sent: onboarding/pro-tips}
    then: [{send: onboarding/check-in, subject: "Since you saw the big-team mail"}]
    else: [exit]
  - if: {opened: onboarding/welcome}
    then: [{send: onboarding/welcome, subject: "never: nobody opened it"}]
  - tag: {remove: [vip]}
""",
        "kinds",
    )
    harness.deploy(sequence)
    big = start(harness, sequence, "big@example.com", attributes={"plan": "pro", "seats": 25})
    small = start(harness, sequence, "small@example.com", attributes={"plan": "free", "seats": 2})
    assert big["status"] == small["status"] == "SUCCEEDED"
    assert harness.sent("big@example.com") == [
        "onboarding/pro-tips",
        "onboarding/tips",
        "onboarding/check-in",
    ]
    assert harness.sent("small@example.com") == ["onboarding/upgrade"]
    assert harness.store.get_profile("big@example.com").tags == frozenset()  # type: ignore[union-attr]
    assert harness.exec_items() == []
    actions = [i["action"] for i in harness.invocations if i["email"] == "big@example.com"]
    assert "check" in actions  # live conditions (after a wait / engagement) went through the step function


@pytest.mark.parametrize(
    "attributes",
    [{}, {"n": 5}, {"n": 11}, {"n": "11"}, {"n": True}, {"n": None}, {"plan": "pro"}, {"plan": 1}],
)
def test_native_choice_agrees_with_the_python_evaluator(harness: Harness, attributes: dict[str, Any]) -> None:
    sequence = sequence_from(
        """
trigger: go
steps:
  - if:
      any: [{attribute: n, greater: 10}, {attribute: plan, equals: pro}, {not: {attribute: n, exists: true}}]
    then: [{send: onboarding/tips, subject: "yes"}]
    else: [{send: onboarding/upgrade, subject: "no"}]
""",
        "native",
    )
    harness.deploy(sequence)
    email = f"n{abs(hash(json.dumps(attributes, sort_keys=True))) % 10**8}@example.com"
    assert start(harness, sequence, email, attributes=attributes)["status"] == "SUCCEEDED"
    expected = evaluate(sequence.steps[0].if_, [], attributes)  # type: ignore[union-attr]
    assert harness.sent(email) == (["onboarding/tips"] if expected else ["onboarding/upgrade"])
    assert not any(i["action"] == "check" for i in harness.invocations)  # a native Choice, no Lambda


def test_retryable_send_is_retried_with_backoff_and_sent_once(harness: Harness) -> None:
    sequence = sequence_from("trigger: go\nsteps:\n  - send: onboarding/tips\n    subject: Hi\n", "retry")
    harness.deploy(sequence)
    harness.scripted["onboarding/tips"] = ["retryable", "retryable"]
    result = start(harness, sequence, "retry@example.com")
    assert result["status"] == "SUCCEEDED"
    assert harness.sent("retry@example.com") == ["onboarding/tips"]
    assert len(harness.retries) == 2 and harness.retries[1] >= 0  # two backoff sleeps, jittered
    assert harness.exec_items() == []


def test_permanent_failure_is_recorded_and_removes_the_pair(harness: Harness) -> None:
    sequence = send_wait_send("failing", "trigger: go", "onboarding/tips", "onboarding/upgrade")
    harness.deploy(sequence)
    harness.scripted["onboarding/tips"] = ["failed"]
    result = start(harness, sequence, "fail@example.com")
    assert result["status"] == "FAILED"
    assert harness.sent("fail@example.com") == []
    assert harness.exec_items() == []
    events = harness.store.list_events("fail@example.com")
    assert [e["type"] for e in events if e["type"] == "sequence_failed"] == ["sequence_failed"]
    assert next(e for e in events if e["type"] == "sequence_failed")["error"] == "SendFailed"


def test_send_window_moves_waits_into_the_window(harness: Harness) -> None:
    sequence = sequence_from(
        """
trigger: go
send_window: {days: [sat], start: "10:00", end: "11:00", timezone: Asia/Tokyo}
steps:
  - send: onboarding/tips
    subject: Hi
  - wait: 1d
  - send: onboarding/upgrade
    subject: Up
""",
        "windowed",
    )
    harness.deploy(sequence)
    result = start(harness, sequence, "window@example.com", attributes={"timezone": "Europe/Paris"})
    assert result["status"] == "SUCCEEDED"
    assert harness.sent("window@example.com") == ["onboarding/tips", "onboarding/upgrade"]
    # Each Wait resumes on a Saturday between 10:00 and 11:00 in Paris (the subscriber's zone
    # beats the default; at once when that is now) and the 1d wait is not cut short: the wall
    # clock stands still while virtual time passes.
    now = datetime.now(UTC)
    assert len(harness.waits) == 2
    for seconds in harness.waits:
        wake = (now + timedelta(seconds=seconds)).astimezone(ZoneInfo("Europe/Paris"))
        assert wake.weekday() == 5 and (9, 59) <= (wake.hour, wake.minute) < (11, 0), wake
    assert harness.waits[1] >= 86400


# ----- the engine: start/stop through the events dispatch --------------------------------
def _catalog(*sequences: Sequence) -> Catalog:
    return Catalog(sequences={s.id: s for s in sequences}, files={s.id: f"{s.id}.yaml" for s in sequences})


def _post(engine: SequenceEngine, store: SubscriberStore, **event: Any) -> dict[str, Any]:
    ctx = IngestContext(store=store, data_ttl_days=30, sequences=engine)
    return dispatch(InboundEvent.model_validate(event), ctx)


def test_same_trigger_three_times_starts_one_execution_and_reentry_is_ignored(harness: Harness) -> None:
    head = "trigger: trial.started\nexit_on: [purchase.completed]"
    drip = send_wait_send("drip", head, "trial/expiring", "trial/last-day")
    engine = harness.engine(_catalog(drip))
    gate = harness.gate = threading.Event()  # hold the execution in its first wait
    outcomes = [
        _post(engine, harness.store, type="trial.started", email="t@example.com", id="evt-1")
        for _ in range(3)
    ]
    harness.until_waiting()
    assert [o["sequences_started"] for o in outcomes] == [["drip"], [], []]
    again = _post(engine, harness.store, type="trial.started", email="t@example.com", id="evt-2")
    assert again["sequences_started"] == []  # reentry: ignore while active
    executions = harness.sfn.list_executions(PREFIX + "drip")
    assert len(executions) == 1
    # When a purchase arrives mid-sequence, Then the execution stops before its next send
    stopped = _post(engine, harness.store, type="purchase.completed", email="t@example.com")
    assert stopped["sequences_stopped"] == ["drip"]
    gate.set()
    result = harness.wait_done(executions[0]["executionArn"])
    assert result["status"] == "ABORTED"
    assert harness.sent("t@example.com") == ["trial/expiring"]
    assert harness.exec_items() == []


@pytest.mark.parametrize(("reentry", "runs"), [("ignore", 1), ("allow", 2)])
def test_a_finished_sequence_is_entered_again_only_with_reentry_allow(
    harness: Harness, reentry: str, runs: int
) -> None:
    drip = sequence_from(
        f"trigger: go\nreentry: {reentry}\nsteps:\n  - send: trial/expiring\n    subject: A\n", "once"
    )
    engine = harness.engine(_catalog(drip))
    first = _post(engine, harness.store, type="go", email="o@example.com", id="a")
    assert first["sequences_started"] == ["once"]
    harness.wait_done(harness.sfn.list_executions(PREFIX + "once")[0]["executionArn"])
    assert harness.exec_items() == []
    # Given the first run ended, When the trigger comes again with a new event id
    second = _post(engine, harness.store, type="go", email="o@example.com", id="b")
    assert second["sequences_started"] == (["once"] if reentry == "allow" else [])
    for run in harness.sfn.list_executions(PREFIX + "once"):
        harness.wait_done(run["executionArn"])
    assert len(harness.sfn.list_executions(PREFIX + "once")) == runs
    assert harness.sent("o@example.com") == ["trial/expiring"] * runs
    assert harness.exec_items() == []


def test_restart_reentry_stops_the_running_execution_and_starts_anew(harness: Harness) -> None:
    drip = send_wait_send("again", "trigger: go\nreentry: restart", "trial/expiring", "trial/last-day")
    engine = harness.engine(_catalog(drip))
    gate = harness.gate = threading.Event()
    first = _post(engine, harness.store, type="go", email="r@example.com", id="a")
    harness.until_waiting()
    second = _post(engine, harness.store, type="go", email="r@example.com", id="b")
    assert first["sequences_started"] == second["sequences_started"] == ["again"]
    runs = harness.sfn.list_executions(PREFIX + "again")
    assert len(runs) == 2
    gate.set()
    for run in runs:
        harness.wait_done(run["executionArn"])
    statuses = sorted(harness.sfn.describe(r["executionArn"])["status"] for r in runs)
    assert statuses == ["ABORTED", "SUCCEEDED"]
    # the restarted run sends its mails again (send-once is per execution)
    assert harness.sent("r@example.com") == ["trial/expiring", "trial/expiring", "trial/last-day"]
    assert harness.exec_items() == []
    assert executions_of(harness, "again") == {"active": 0, "started": 2, "completed": 1}  # one stopped


def executions_of(harness: Harness, sequence_id: str) -> dict[str, int]:
    """The sequence's executions counts, once the stats fold has read the table's stream."""
    fold_batches(StreamCountFold(harness.store.table), Streams(STATS_FOLD_FUNCTION))
    stats = StatsStore(harness.store.table, harness.store.events_table)
    return stats.executions_of([sequence_id])[sequence_id]


def test_a_finish_delivered_twice_counts_one_completion(harness: Harness) -> None:
    """Given a running execution's pair, When its ``finish`` payload runs twice (a redelivered
    invocation), Then the pair is gone and the sequence counts one start and one completion."""
    from shared.sequences.steps import SequenceHalted

    email = "done-twice@example.com"
    harness.store.upsert(email, first_name="Ada")
    arn = f"{PREFIX}t:t-done"
    harness.store.put_execution(email, "t", arn)
    payload = {"contract": "sequence.step", "version": 1, "action": "finish", "sequence": "t",
               "step": "S9", "email": email, "execution": arn}  # fmt: skip
    deps = StepDeps(store=harness.store, send=harness.send)
    run_step(parse_request(payload), deps)
    with pytest.raises(SequenceHalted):  # the pair is gone: nothing more happens
        run_step(parse_request(payload), deps)
    assert harness.exec_items() == []
    assert executions_of(harness, "t") == {"active": 0, "started": 1, "completed": 1}


@pytest.mark.parametrize("via_link", [False, True], ids=["event", "one-click-link"])
def test_unsubscribe_stops_marketing_but_not_transactional(harness: Harness, via_link: bool) -> None:
    marketing = send_wait_send("marketing", "trigger: signup", "onboarding/tips", "onboarding/upgrade")
    head = "trigger: signup\ntransactional: true"
    receipts = send_wait_send("receipts", head, "onboarding/welcome", "onboarding/welcome")
    engine = harness.engine(_catalog(marketing, receipts))
    gate = harness.gate = threading.Event()
    started = _post(engine, harness.store, type="signup", email="u@example.com", id="s1")
    assert sorted(started["sequences_started"]) == ["marketing", "receipts"]
    harness.until_waiting(2)
    if via_link:  # the List-Unsubscribe one-click POST path
        from shared.sending.tokens import TokenClaims, issue
        from shared.web.unsubscribe import UnsubscribeContext, unsubscribe

        claims = TokenClaims(
            email="u@example.com", source="marketing", template="onboarding/tips", send_id="s"
        )
        token = issue(claims, "k" * 32, ttl_seconds=3600)
        ctx = UnsubscribeContext(store=harness.store, secret="k" * 32, sequences=engine)
        assert unsubscribe(token, ctx, origin="one_click").sequences_stopped == ["marketing"]
    else:
        out = _post(engine, harness.store, type="subscriber.unsubscribed", email="u@example.com")
        assert out["sequences_stopped"] == ["marketing"]
    gate.set()
    for machine in ("marketing", "receipts"):
        for run in harness.sfn.list_executions(PREFIX + machine):
            harness.wait_done(run["executionArn"])
    sent = harness.sent("u@example.com")
    assert sent.count("onboarding/tips") == 1 and "onboarding/upgrade" not in sent
    assert sent.count("onboarding/welcome") == 2
    assert harness.exec_items() == []


def test_an_execution_whose_pair_was_erased_halts_without_sending(harness: Harness) -> None:
    drip = sequence_from(
        "trigger: go\nsteps:\n  - wait: 1d\n  - send: onboarding/tips\n    subject: A\n", "erased"
    )
    engine = harness.engine(_catalog(drip))
    gate = harness.gate = threading.Event()
    _post(engine, harness.store, type="go", email="e@example.com", id="x")
    harness.until_waiting()
    run = harness.sfn.list_executions(PREFIX + "erased")[0]
    harness.store.delete_execution("e@example.com", "erased")  # e.g. erase removed every item
    gate.set()
    result = harness.wait_done(run["executionArn"])
    assert result["status"] == "SUCCEEDED"  # the Halted Succeed state: stopped quietly
    assert harness.sent("e@example.com") == []
    history = harness.sfn.history(run["executionArn"])
    assert any(e.get("stateEnteredEventDetails", {}).get("name") == "Halted" for e in history)


def test_one_off_event_mail_sends_once_per_event_and_keeps_no_pair(harness: Harness) -> None:
    receipt = sequence_from(
        'on: {event: purchase.completed, send: transactional/receipt, subject: "Thanks"}', "r1"
    )
    engine = harness.engine(_catalog(receipt))
    order = {"order_id": "A-1", "total": "$9", "lines": [{"description": "Pro", "amount": "$9"}]}
    for _ in range(2):
        _post(engine, harness.store, type="purchase.completed", email="o@example.com", id="p-1", data=order)
    _post(engine, harness.store, type="purchase.completed", email="o@example.com", id="p-2", data=order)
    for run in harness.sfn.list_executions(PREFIX + "r1"):
        assert harness.wait_done(run["executionArn"])["status"] == "SUCCEEDED"
    assert harness.sent("o@example.com") == ["transactional/receipt"] * 2
    assert harness.exec_items() == []


def test_stale_pair_without_execution_is_replaced_on_the_next_trigger(harness: Harness) -> None:
    drip = sequence_from("trigger: go\nsteps:\n  - send: onboarding/tips\n    subject: A\n", "stale")
    engine = harness.engine(_catalog(drip))
    harness.store.upsert("s@example.com")
    # a crash after the pair was written and before StartExecution
    harness.store.put_execution(
        "s@example.com", "stale", PREFIX.replace(":stateMachine:", ":execution:") + "stale:gone"
    )
    out = _post(engine, harness.store, type="go", email="s@example.com", id="n")
    assert out["sequences_started"] == ["stale"]
    run = harness.sfn.list_executions(PREFIX + "stale")[0]
    assert harness.wait_done(run["executionArn"])["status"] == "SUCCEEDED"
    assert harness.sent("s@example.com") == ["onboarding/tips"]
    assert harness.exec_items() == []


def test_example_definitions_are_deterministic() -> None:
    first, _ = load_catalog(SEQUENCES_DIR)
    second, _ = load_catalog(Path(SEQUENCES_DIR))
    for sequence_id, sequence in first.sequences.items():
        assert definition_json(sequence) == definition_json(second.sequences[sequence_id])


# ----- topics and A/B variants through the compiled send Task ---------------------------------
TOPICS = require_topics(TOPICS_FILE)  # product-updates: default on; newsletter: default off


def _skips(store: SubscriberStore, email: str) -> list[str]:
    return [e["reason"] for e in store.list_events(email) if e["type"] == "send_skipped"]


def _sent_by(item: dict[str, Any], email: str) -> bool:
    return bool(item["PK"] == keys.sub_pk(email) and item["SK"].startswith(keys.SENT_PREFIX))


def _task_outcomes(h: Harness, execution_arn: str) -> list[str]:
    """The send outcomes of an execution's Tasks: a plain Task's function result, a callback Task's
    result as its schedule handed it back (SendTaskSuccess)."""
    outputs = [
        e[details]["output"]
        for e in h.sfn.history(execution_arn)
        for details in ("lambdaFunctionSucceededEventDetails", "taskSucceededEventDetails")
        if details in e
    ]
    return [json.loads(o)["outcome"] for o in outputs if "outcome" in json.loads(o)]


def test_a_topic_sequence_skips_readers_who_do_not_receive_the_topic_and_goes_on(
    harness: Harness, send_ctx: SendContext, outbox: list[Any]
) -> None:
    """A sequence with ``topic:``: every send step is gated by the reader's topic choice (an
    explicit opt-out, or a default-off topic never opted into); the execution goes on."""
    harness.send_real = lambda job: send(job, replace(send_ctx, topics=TOPICS))
    updates = send_wait_send(
        "updates", "trigger: go\ntopic: product-updates", "onboarding/tips", "onboarding/upgrade"
    )
    news = send_wait_send("news", "trigger: go\ntopic: newsletter", "onboarding/tips", "onboarding/upgrade")
    harness.deploy(updates)
    harness.deploy(news)
    store = harness.store
    # Given a reader who left product-updates, one who opted into the newsletter, one who chose nothing
    for email in ("left@example.com", "keen@example.com", "plain@example.com"):
        store.upsert(email)
    store.set_topics("left@example.com", off=["product-updates"])
    store.set_topics("keen@example.com", on=["newsletter"])

    # When each walks both sequences
    runs = {
        (email.split("@")[0], sequence.id): start(harness, sequence, email, name=f"{sequence.id}-1")
        for email in ("left@example.com", "keen@example.com", "plain@example.com")
        for sequence in (updates, news)
    }

    # Then every execution ran to its end (a skipped mail does not stop it)
    assert {run: r["status"] for run, r in runs.items() if r["status"] != "SUCCEEDED"} == {}
    both, skipped = ["sent", "sent"], ["skipped:topic_opt_out"] * 2
    assert {run: _task_outcomes(harness, r["executionArn"]) for run, r in runs.items()} == {
        ("left", "updates"): skipped,
        ("left", "news"): skipped,  # the newsletter is off unless chosen
        ("keen", "updates"): both,
        ("keen", "news"): both,
        ("plain", "updates"): both,
        ("plain", "news"): skipped,
    }
    assert harness.sent("left@example.com") == []
    assert _skips(store, "left@example.com") == ["topic_opt_out"] * 4
    assert harness.sent("keen@example.com") == ["onboarding/tips", "onboarding/upgrade"] * 2
    assert harness.sent("plain@example.com") == ["onboarding/tips", "onboarding/upgrade"]
    assert _skips(store, "plain@example.com") == ["topic_opt_out"] * 2
    # ... and a mail that went out belongs to the topic: its List-Id names it
    list_ids = {
        str(BytesParser(policy=policy.default).parsebytes(m.raw_data.encode())["List-Id"]) for m in outbox
    }
    assert list_ids == {
        '"Product updates" <product-updates.acme.test>',
        '"Newsletter" <newsletter.acme.test>',
    }
    assert harness.exec_items() == []


def test_an_ab_step_sends_each_reader_one_variant_across_retries_and_re_entries(
    harness: Harness, send_ctx: SendContext
) -> None:
    """The variant is sticky per reader: the first attempt of every send is refused as
    retryable (the Task is evaluated again by the Retry) and every reader walks the sequence
    twice (reentry: allow); each reader's evaluations and mails all carry one variant."""
    sequence = sequence_from(
        """
trigger: go
reentry: allow
steps:
  - send: onboarding/check-in
    subject: "How is it going?"
    variants:
      - subject: "Quick check-in"
      - {send: onboarding/tips, subject: "Three tips"}
""",
        "ab",
    )
    harness.deploy(sequence)
    evaluated: dict[str, list[tuple[str, str | None]]] = {}
    refused: set[str] = set()

    def first_attempt_retryable(job: SendJob) -> SendOutcome:
        evaluated.setdefault(job.email, []).append((job.template, job.subject))
        if job.step not in refused:  # one refusal per Task of each execution
            refused.add(job.step)
            return SendOutcome(status="retryable", send_id="x", reason="throttled")
        return send(job, send_ctx)

    harness.send_real = first_attempt_retryable
    readers = [f"ab-{i:02d}@example.com" for i in range(12)]
    for email in readers:
        for run in ("run-1", "run-2"):
            assert start(harness, sequence, email, name=run)["status"] == "SUCCEEDED"

    assert len(harness.retries) == 2 * len(readers)
    assert {email: len(picks) for email, picks in evaluated.items()} == {email: 4 for email in readers}
    mixed = {email: set(picks) for email, picks in evaluated.items() if len(set(picks)) != 1}
    assert mixed == {}
    for email in readers:  # the send log holds that variant's mail, once per execution
        logged = [(i["template"], i["subject"]) for i in scan_all(harness.store.table) if _sent_by(i, email)]
        assert logged == [evaluated[email][0]] * 2, (email, logged, evaluated[email])
    assert len({picks[0] for picks in evaluated.values()}) > 1  # readers were split, not all alike
    assert harness.exec_items() == []
