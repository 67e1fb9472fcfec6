"""End-to-end: the local runtime through its HTTP API, its AWS endpoint and the CLI."""

from __future__ import annotations

import json
import random
import signal
import socket
import time
import urllib.error
import urllib.request
from email import message_from_bytes, policy
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.e2e.conftest import Local, start_dev, wait_for_state
from tests.e2e.helpers import MAIN, eventually, item, post, receive_all, scan_all, ses_send, unique

THIRTY_DAYS_S = 30 * 86400
ROLE_NAME = "e2e-handlers"
ROLE = f"arn:aws:iam::123456789012:role/{ROLE_NAME}"
# What the test handlers may do (the runtime enforces a function's role policy).
ROLE_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Action": "dynamodb:PutItem",
            "Resource": "arn:aws:dynamodb:us-east-1:123456789012:table/mailstep-main",
        },
        {"Effect": "Allow", "Action": "lambda:InvokeFunction", "Resource": "*"},
    ],
}


def ensure_role(local: Local) -> str:
    iam = local.client("iam")
    try:
        iam.create_role(RoleName=ROLE_NAME, AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17"}))
        iam.put_role_policy(RoleName=ROLE_NAME, PolicyName="handlers", PolicyDocument=json.dumps(ROLE_POLICY))
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "EntityAlreadyExists":
            raise
    return ROLE


def create_function(local: Local, handler: str, env: dict[str, str] | None = None) -> str:
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:  # the function's code: one file, boto3 only
        archive.write(Path(__file__).with_name("handlers.py"), "handlers.py")
    return str(
        local.client("lambda").create_function(
            FunctionName=unique("e2e"),
            Runtime="python3.12",
            Role=ensure_role(local),
            Handler=handler,
            Code={"ZipFile": buffer.getvalue()},
            Environment={"Variables": env or {}},
        )["FunctionArn"]
    )


def run_state_machine(
    local: Local, definition: dict[str, Any], payload: Any = None
) -> tuple[dict[str, Any], float]:
    """Create and run a state machine; returns the execution and the wall time of the run."""
    sfn = local.client("stepfunctions")
    machine = sfn.create_state_machine(
        name=unique("e2e"), definition=json.dumps(definition), roleArn=ensure_role(local)
    )
    started = time.perf_counter()
    execution = sfn.start_execution(
        stateMachineArn=machine["stateMachineArn"], name=unique("run"), input=json.dumps(payload or {})
    )

    def ended() -> dict[str, Any] | None:
        described = sfn.describe_execution(executionArn=execution["executionArn"])
        return None if described["status"] == "RUNNING" else dict(described)

    described = eventually(ended, 20, "the execution to end", interval_s=0.01)
    return described, time.perf_counter() - started


def events_queue(local: Local) -> str:
    """A fresh SQS queue subscribed to the SES events topic of the spec'd configuration set."""
    sqs, sns = local.client("sqs"), local.client("sns")
    url = sqs.create_queue(QueueName=unique("ses-events"))["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    destinations = local.client("sesv2").get_configuration_set_event_destinations(
        ConfigurationSetName="mailstep"
    )
    topic = destinations["EventDestinations"][0]["SnsDestination"]["TopicArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn)
    return str(url)


def records_for(records: list[dict[str, Any]], message_id: str) -> list[dict[str, Any]]:
    return [r for r in records if r["mail"]["messageId"] == message_id]


# ----- HTTP API ---------------------------------------------------------------------------
def test_post_events_creates_a_subscriber_visible_through_the_endpoint(local: Local) -> None:
    email = f"{unique('ada')}@example.com"
    (answer,) = post(local, {"type": "subscriber.subscribed", "email": email, "tags": {"add": ["pro"]}})
    assert answer["subscriber"] == "created"
    profile = item(local, f"SUB#{email}", "PROFILE")
    assert profile is not None and profile["email"]["S"] == email and "pro" in profile["tags"]["SS"]
    assert item(local, "TAG#pro", f"SUB#{email}") is not None


def test_concurrent_requests_each_get_an_execution_environment_of_their_own(local: Local) -> None:
    """Like Lambda, one environment handles one invocation at a time: concurrent requests with
    distinct idempotency keys never see another request's in-progress record, and every log
    line of the API function carries its own name."""
    from concurrent.futures import ThreadPoolExecutor

    run = unique("burst")

    def subscribe(n: int) -> tuple[int, Any]:
        body = {"type": "subscriber.subscribed", "email": f"{run}-{n}@example.com", "id": f"{run}-{n}"}
        return local.http("POST", "/v1/events", body, key=local.api_key)

    with ThreadPoolExecutor(max_workers=12) as pool:
        answers = list(pool.map(subscribe, range(12)))
    assert [code for code, _ in answers] == [200] * 12, answers
    environments = local.status()["lambda"]["environments"]["mailstep-api"]
    assert environments["cold_starts"] >= 2 and environments["busy"] == 0
    names = {
        json.loads(line).get("function_name")
        for line in (Path(local.state["logs"]) / "mailstep-api.log").read_text().splitlines()
        if line.startswith("{")
    }
    assert names - {None} == {"mailstep-api"}


def test_a_wrong_key_gets_401_and_writes_nothing(local: Local) -> None:
    email = f"{unique('eve')}@example.com"
    status, answer = local.http(
        "POST", "/v1/events", {"type": "subscriber.subscribed", "email": email}, "wrong"
    )
    assert status == 401
    assert answer["error"]["code"] == "unauthorized"
    assert all(i["PK"]["S"] != f"SUB#{email}" for i in scan_all(local, MAIN))


def test_a_bad_request_gets_400_naming_the_field(local: Local) -> None:
    status, answer = local.http(
        "POST", "/v1/events", {"type": "subscriber.subscribed", "email": "nope"}, local.api_key
    )
    assert status == 400
    assert answer["error"]["field"] == "email"
    event = {"type": "trial.started", "email": "huge@example.com", "data": {"n": 10**60}}
    status, answer = local.http("POST", "/v1/events", event, local.api_key)
    assert status == 400 and answer["error"]["field"].startswith("data"), answer


def test_unknown_routes_get_404(local: Local) -> None:
    status, _ = local.http("GET", "/v1/nothing-here")
    assert status == 404
    status, _ = local.http("GET", "/v1/events")  # known path, wrong method
    assert status == 404


# ----- Step Functions on the virtual clock -------------------------------------------------
def test_a_30_day_wait_completes_on_the_virtual_clock_within_seconds(local: Local) -> None:
    # The wait is the virtual clock's: it ends within run_state_machine's 20 s (a real one would
    # take 30 days), and the clock shows the 30 days. How far under 20 s is the machine's load,
    # not the runtime's: a bound of 1 s failed on a busy 2-core machine (1.15 s).
    before = local.status()["clock"]["advanced_s"]
    definition = {
        "StartAt": "Wait30Days",
        "States": {
            "Wait30Days": {"Type": "Wait", "Seconds": THIRTY_DAYS_S, "Next": "Done"},
            "Done": {"Type": "Pass", "Result": {"done": "waited"}, "End": True},
        },
    }
    described, wall = run_state_machine(local, definition)
    assert described["status"] == "SUCCEEDED"
    assert json.loads(described["output"]) == {"done": "waited"}
    assert wall < 20.0, f"a 30-day wait took {wall:.2f} s of wall time"
    assert local.status()["clock"]["advanced_s"] - before >= THIRTY_DAYS_S


def test_a_task_gets_the_lambda_result_and_retry_catch_work(local: Local) -> None:
    echo = create_function(local, "handlers.echo")
    fail = create_function(local, "handlers.fail")
    definition = {
        "StartAt": "Echo",
        "States": {
            "Echo": {"Type": "Task", "Resource": echo, "ResultPath": "$.echoed", "Next": "Fail"},
            "Fail": {
                "Type": "Task",
                "Resource": fail,
                "Retry": [{"ErrorEquals": ["PaymentDeclined"], "IntervalSeconds": 3600, "MaxAttempts": 2}],
                "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "Caught"}],
                "End": True,
            },
            "Caught": {"Type": "Pass", "End": True},
        },
    }
    before = local.status()
    described, wall = run_state_machine(local, definition, {"hello": "world"})
    assert described["status"] == "SUCCEEDED", described
    output = json.loads(described["output"])
    assert output["echoed"]["echo"] == {"hello": "world"}
    assert output["echoed"]["has_time_left"] is True
    assert output["echoed"]["function"] == echo.rsplit(":", 1)[-1]
    assert output["error"]["Error"] == "PaymentDeclined"
    assert "card declined" in output["error"]["Cause"]
    after = local.status()
    fail_name = fail.rsplit(":", 1)[-1]
    assert after["lambda"]["invocations"][fail_name] == 3  # first attempt + 2 retries
    assert after["clock"]["advanced_s"] - before["clock"]["advanced_s"] >= 3600 + 7200  # backoff 2.0
    # the backoff slept on the virtual clock: seconds of wall time, not the 3 hours real sleeps
    # take (a loose bound: this is not a timing measurement, and CI runs two workers at once)
    assert wall < 60, f"3 hours of retry backoff took {wall:.2f} s"


# ----- SQS -> Lambda -----------------------------------------------------------------------
def test_an_sqs_message_reaches_the_mapped_handler_with_partial_batch_failures(local: Local) -> None:
    sqs, lam = local.client("sqs"), local.client("lambda")
    dlq = sqs.create_queue(QueueName=unique("dlq"))["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    url = sqs.create_queue(
        QueueName=unique("jobs"),
        Attributes={
            "VisibilityTimeout": "3",
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 2}),
        },
    )["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    function = create_function(local, "handlers.record")
    lam.create_event_source_mapping(
        FunctionName=function,
        EventSourceArn=arn,
        BatchSize=10,
        FunctionResponseTypes=["ReportBatchItemFailures"],
    )
    body, retried = unique("job"), unique("once")
    sent_at = time.time()
    sqs.send_message(QueueUrl=url, MessageBody=body)
    sqs.send_message(QueueUrl=url, MessageBody="fail")
    sqs.send_message(QueueUrl=url, MessageBody=retried)

    def stored(message_body: str, timeout_s: float) -> dict[str, Any]:
        """The item the handler wrote for ``message_body``, once it is there."""
        return eventually(
            lambda: item(local, f"E2E#{message_body}", "SQS"),
            timeout_s,
            f"the mapped handler to store {message_body}",
            interval_s=0.05,
        )

    first = stored(body, 10)
    assert first["function"]["S"] == function.rsplit(":", 1)[-1]
    assert first["source"]["S"] == arn
    # `mailstep dev` runs functions in their own execution environments, from their code
    assert int(first["pid"]["N"]) != local.state["pid"] and local.state["lambdas"] == "artifact"
    # a record the function failed comes back only after the queue's visibility timeout (3 s)
    again = stored(retried, 15)
    assert again["receive_count"]["S"] == "2"
    assert float(again["stored_at"]["N"]) - sent_at >= 2.5
    # the record that always fails lands in the DLQ after maxReceiveCount
    moved = eventually(
        lambda: sqs.receive_message(QueueUrl=dlq, WaitTimeSeconds=1).get("Messages", []),
        15,
        "the always-failing record in the DLQ",
    )
    assert [m["Body"] for m in moved] == ["fail"]


# ----- SES -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("recipient", "expected"),
    [
        ("bounce@simulator.amazonses.com", ["Bounce"]),
        ("complaint@simulator.amazonses.com", ["Delivery", "Complaint"]),
        ("success@simulator.amazonses.com", ["Delivery"]),
        ("ooto@simulator.amazonses.com", ["Delivery"]),
        ("suppressionlist@simulator.amazonses.com", ["Bounce"]),
    ],
)
def test_mailbox_simulator_events_arrive_through_sns(
    local: Local, recipient: str, expected: list[str]
) -> None:
    queue = events_queue(local)
    message_id = ses_send(local, recipient)
    records = records_for(receive_all(local.client("sqs"), queue, len(expected)), message_id)
    assert sorted(r["eventType"] for r in records) == sorted(expected)
    if recipient.startswith("suppressionlist"):
        bounce = next(r for r in records if r["eventType"] == "Bounce")["bounce"]
        assert (bounce["bounceType"], bounce["bounceSubType"]) == ("Permanent", "OnAccountSuppressionList")


def test_a_bounce_event_has_the_documented_ses_format(local: Local) -> None:
    queue = events_queue(local)
    message_id = ses_send(local, "bounce@simulator.amazonses.com")
    records = records_for(receive_all(local.client("sqs"), queue, 1), message_id)
    record = next(r for r in records if r["eventType"] == "Bounce")
    assert set(record) == {"eventType", "mail", "bounce"}
    bounce = record["bounce"]
    assert bounce["bounceType"] == "Permanent"
    assert bounce["bounceSubType"] == "General"
    assert bounce["bouncedRecipients"][0]["emailAddress"] == "bounce@simulator.amazonses.com"
    assert bounce["bouncedRecipients"][0]["action"] == "failed"
    assert {"timestamp", "feedbackId", "reportingMTA"} <= set(bounce)
    mail = record["mail"]
    assert mail["messageId"] == message_id
    assert mail["source"] == "Acme <hello@acme.test>"
    assert mail["destination"] == ["bounce@simulator.amazonses.com"]
    assert mail["headersTruncated"] is False
    assert {"name": "Subject", "value": "Hello"} in mail["headers"]
    assert mail["commonHeaders"]["subject"] == "Hello"
    assert mail["commonHeaders"]["to"] == ["bounce@simulator.amazonses.com"]
    assert mail["tags"]["ses:configuration-set"] == ["mailstep"]
    assert mail["tags"]["template"] == ["onboarding_welcome"]
    assert mail["tags"]["source"] == ["e2e"]
    assert mail["timestamp"].endswith("Z") and mail["sendingAccountId"] == "123456789012"


def test_sending_faster_than_max_send_rate_is_throttled_and_get_account_reports_it(local: Local) -> None:
    code, _ = local.http("POST", "/_local/ses", {"max_send_rate": 2})
    assert code == 200
    try:
        quota = local.client("sesv2").get_account()["SendQuota"]
        assert quota["MaxSendRate"] == 2.0
        assert quota["Max24HourSend"] >= 1
        errors = []
        for _ in range(6):
            try:
                ses_send(local, "success@simulator.amazonses.com")
            except ClientError as exc:
                errors.append(exc.response["Error"])
        assert errors, "six immediate sends at MaxSendRate 2 were never throttled"
        assert {e["Code"] for e in errors} == {"TooManyRequestsException"}
        assert errors[0]["Message"] == "Maximum sending rate exceeded."
    finally:
        local.http("POST", "/_local/ses", {"max_send_rate": 1000})


def test_the_daily_quota_is_enforced(local: Local) -> None:
    def sent_last_24_hours() -> int:
        return int(local.client("sesv2").get_account()["SendQuota"]["SentLast24Hours"])

    ses_send(local, "success@simulator.amazonses.com")  # at least one mail in the last 24 hours
    # the quota set to what was sent: used up (the runtime is shared: any mail another test's
    # sequence sends meanwhile only makes it more than used, and is refused from then on too)
    local.http("POST", "/_local/ses", {"max_24_hour_send": sent_last_24_hours()})
    try:
        spent = sent_last_24_hours()
        with pytest.raises(ClientError) as caught:
            ses_send(local, "success@simulator.amazonses.com")
        assert caught.value.response["Error"]["Code"] == "ThrottlingException"
        assert caught.value.response["Error"]["Message"] == "Daily message quota exceeded."
        assert sent_last_24_hours() == spent  # a refused mail is not counted
    finally:
        local.http("POST", "/_local/ses", {"max_24_hour_send": 50_000})


def test_outbox_eml_keeps_every_header_of_a_raw_message(local: Local) -> None:
    mime = MIMEMultipart("alternative")
    headers = {
        "From": "Acme <hello@acme.test>",
        "To": "reader@example.com",
        "Subject": "Tips for week 2",
        "Reply-To": "help@acme.test",
        "List-Unsubscribe": "<https://acme.test/u/tok123>, <mailto:unsubscribe@acme.test?subject=tok123>",
        "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
        "List-Id": "Acme onboarding <onboarding.acme.test>",
        "X-Mailstep-Send-Id": "send-42",
    }
    for name, value in headers.items():
        mime[name] = value
    mime.attach(MIMEText("plain body", "plain"))
    mime.attach(MIMEText("<p>html body</p>", "html"))
    raw = mime.as_bytes()
    message_id = local.client("sesv2").send_email(
        Content={"Raw": {"Data": raw}},
        ConfigurationSetName="mailstep",
        EmailTags=[{"Name": "template", "Value": "onboarding_week2"}],
    )["MessageId"]
    eml = local.outbox / f"{message_id}.eml"
    parsed = message_from_bytes(eml.read_bytes(), policy=policy.default)
    for name, value in headers.items():
        assert str(parsed[name]) == value, name
    assert parsed["Message-ID"] == f"<{message_id}@email.amazonses.com>"
    assert parsed["Date"]
    parts = {p.get_content_type(): p.get_content().strip() for p in parsed.iter_parts()}
    assert parts == {"text/plain": "plain body", "text/html": "<p>html body</p>"}
    assert eml.read_bytes().endswith(raw)  # the message exactly as sent
    meta = json.loads((local.outbox / f"{message_id}.json").read_text())
    assert meta["configuration_set"] == "mailstep"
    assert meta["email_tags"] == {"template": "onboarding_week2"}
    assert meta["destination"] == ["reader@example.com"]
    assert meta["from"] == "Acme <hello@acme.test>"


def test_every_outbox_message_parses_with_headers_intact(local: Local) -> None:
    ses_send(local, "success@simulator.amazonses.com", ReplyToAddresses=["help@acme.test"])
    files = sorted(local.outbox.glob("*.eml"))
    assert files
    for path in files:
        parsed = message_from_bytes(path.read_bytes(), policy=policy.default)
        meta = json.loads(path.with_suffix(".json").read_text())
        assert not parsed.defects, (path.name, parsed.defects)
        assert parsed["Message-ID"] and parsed["Date"] and parsed["From"]
        assert parsed["Subject"] == meta["subject"]


def test_tag_values_outside_the_ses_charset_are_rejected(local: Local) -> None:
    with pytest.raises(ClientError) as caught:
        local.client("sesv2", retries=1).send_email(
            FromEmailAddress="hello@acme.test",
            Destination={"ToAddresses": ["success@simulator.amazonses.com"]},
            Content={"Simple": {"Subject": {"Data": "x"}, "Body": {"Text": {"Data": "x"}}}},
            ConfigurationSetName="mailstep",
            EmailTags=[{"Name": "template", "Value": "onboarding/welcome"}],
        )
    assert caught.value.response["Error"]["Code"] == "BadRequestException"


# ----- CLI ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("command", "event_type"),
    [("open", "Open"), ("click", "Click"), ("bounce", "Bounce"), ("complain", "Complaint")],
)
def test_local_engagement_commands_publish_ses_events(local: Local, command: str, event_type: str) -> None:
    queue = events_queue(local)
    recipient = f"{unique('reader')}@example.com"
    message_id = ses_send(local, recipient)
    receive_all(local.client("sqs"), queue, 1)  # Delivery (the configuration set publishes no Send)
    extra = ["--link", "https://acme.test/pricing"] if command == "click" else []
    result = local.cli("local", command, recipient, "--state-dir", str(local.state_dir), *extra)
    assert result.returncode == 0, result.stdout + result.stderr
    records = records_for(receive_all(local.client("sqs"), queue, 1), message_id)
    assert [r["eventType"] for r in records] == [event_type]
    if command == "click":
        assert records[0]["click"]["link"] == "https://acme.test/pricing"


def test_mailstep_demo_exits_0() -> None:
    import subprocess
    import sys

    from tests.e2e.conftest import ROOT, subprocess_env

    result = subprocess.run(
        [sys.executable, "-m", "cli.main", "demo"],
        cwd=ROOT,
        env={**subprocess_env(), "COLUMNS": "220"},  # one table row per line
        capture_output=True,
        text=True,
        # The demo takes about 100 s beside the suite's other test worker on a 2-core machine
        # (its virtual time runs as fast as the functions answer): a bound against hanging.
        timeout=600,
    )
    unexpected = [line for line in result.stdout.splitlines() if "unexpected" in line]
    assert result.returncode == 0, "\n".join(unexpected) + result.stdout[-3000:] + result.stderr[-3000:]
    assert "Subscribers" in result.stdout and "TAG# index" in result.stdout
    assert "demo finished" in result.stdout
    # the subscriber table shows why the simulator's bounce and complaint addresses get no mail
    table = result.stdout.split("Subscribers (", 1)[1].split("TAG# index", 1)[0]
    rows = {line.split()[1]: line for line in table.splitlines() if "@simulator.amazonses.com" in line}
    assert "suppressed (bounce)" in rows["bounce@simulator.amazonses.com"], table
    assert "suppressed (complaint)" in rows["complaint@simulator.amazonses.com"], table


def free_port() -> int:
    """A free port below the kernel's ephemeral range (32768-60999 on Linux): a port the kernel
    handed out for port 0 may be handed to another process (a runtime of another test worker,
    an outgoing connection) before ``mailstep dev`` binds it; one from this range is only ever
    taken by someone who names it."""
    for _ in range(200):
        port = random.randint(20000, 32000)  # noqa: S311 - not a secret
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port in 20000-32000")


def test_mailstep_dev_serves_and_stops_on_sigint(tmp_path: Path, artifact: Any) -> None:
    """``mailstep dev`` answers on its API port and Ctrl-C stops it (bounded generously: the
    suite runs two test workers beside it)."""
    assert serve_and_stop(tmp_path) < 60


@pytest.mark.bench  # a timed measurement: run by `make bench`, not by `make test`
def test_mailstep_dev_serves_within_10_s(tmp_path: Path, artifact: Any) -> None:
    assert serve_and_stop(tmp_path) < 10


def serve_and_stop(tmp_path: Path) -> float:
    """Measured from outside, as a user sees it: from spawning ``mailstep dev`` until its API
    answers a request (401 without a key), on a port chosen here, without reading anything
    the runtime reports about itself. This is a start with the deployment artifact already
    built (the ``artifact`` fixture; the build is cached in ``.mailstep/build``): the very
    first start of a checkout also synthesizes and bundles, which takes longer. Ctrl-C ends
    it, its execution environments included, within a few seconds."""
    from local_aws.artifact import build

    build()  # cached: the same artifact unless a source changed since the session started
    port = free_port()
    state_dir = tmp_path / "dev"
    started = time.monotonic()
    process = start_dev(state_dir, api_port=port, fork=False)  # timed as a user starts it
    try:

        def answer() -> int | None:
            assert process.poll() is None, (state_dir / "dev.log").read_text()[-3000:]
            request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/events", data=b"{}", method="POST")
            try:
                with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
                    return int(response.status)
            except urllib.error.HTTPError as exc:
                return exc.code
            except (urllib.error.URLError, ConnectionError):
                return None  # not listening yet

        code = eventually(answer, 60, "mailstep dev to answer on its API port", interval_s=0.05)
        served = time.monotonic() - started
        print(f"\nmailstep dev answered {served:.2f} s after it was spawned (artifact built)")
        assert code == 401
        state = wait_for_state(state_dir, process, 5)
        assert state["api_url"] == f"http://127.0.0.1:{port}"
    finally:
        stopping = time.monotonic()
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=10) == 0
    assert time.monotonic() - stopping < 8  # ~2 s alone; CI runs another test worker beside it
    log = (state_dir / "dev.log").read_text()
    assert state["api_key"] in log and "stopped." in log
    return served


def test_the_moto_hooks_are_where_the_runtime_expects_them() -> None:
    from local_aws.hooks import self_check

    self_check()
