"""Every operator command against a stack by name: ``--stack Mailstep`` with ``AWS_ENDPOINT_URL``
at the local runtime, which registers itself in its emulated CloudFormation under the deployed
stack's name. The commands find everything through the stack (outputs and resources), never
through runtime.json: their ``--state-dir`` is an empty folder.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from shared.core import specs
from tests.e2e.conftest import Local, mailstep, subprocess_env
from tests.e2e.helpers import eventually, ok_json, unique

STACK = specs.STACK_NAME
LABEL = f"stack {STACK} (us-east-1)"


@pytest.fixture(scope="module")
def nowhere(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A state folder without a runtime: a command that looked for runtime.json would fail."""
    return tmp_path_factory.mktemp("no-runtime")


def stack_cli(local: Local, nowhere: Path, *args: str, stack: str = STACK, timeout: float = 90) -> Any:
    """``mailstep <args> --stack <stack>`` with the AWS settings an operator has for a stack."""
    env = subprocess_env() | {
        "AWS_ENDPOINT_URL": str(local.state["endpoint"]),
        "AWS_REGION": str(local.state["region"]),
        "AWS_ACCESS_KEY_ID": "operator",
        "AWS_SECRET_ACCESS_KEY": "operator",
        "COLUMNS": "200",  # rich tables: no truncated ids
    }
    return mailstep(*args, "--stack", stack, "--state-dir", str(nowhere), env=env, timeout=timeout)


def outputs(local: Local) -> dict[str, str]:
    stack = local.client("cloudformation").describe_stacks(StackName=STACK)["Stacks"][0]
    return {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}


def post_event(local: Local, event: dict[str, Any]) -> tuple[int, Any]:
    """POST /v1/events at the stack's ApiUrl output (the https front of the local runtime)."""
    request = urllib.request.Request(
        outputs(local)[specs.API_URL_OUTPUT] + "/v1/events",
        data=json.dumps(event).encode(),
        headers={"content-type": "application/json", "authorization": f"Bearer {local.api_key}"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30, context=local.ssl_context()) as response:  # noqa: S310
        return response.status, json.loads(response.read())


def test_the_local_runtime_is_registered_as_the_stack_with_every_output_and_its_resources(
    local: Local,
) -> None:
    found = outputs(local)

    assert set(found) == {specs.API_URL_OUTPUT, *specs.stack_outputs()}
    assert all(found.values())
    assert found[specs.API_URL_OUTPUT] == local.public_url
    assert found[f"{specs.MAIN_TABLE.id}Name"] == local.state["tables"]["table_name"]
    listed = local.client("cloudformation").list_stack_resources(StackName=STACK)["StackResourceSummaries"]
    by_type: dict[str, set[str]] = {}
    for resource in listed:
        by_type.setdefault(resource["ResourceType"], set()).add(resource["PhysicalResourceId"])
    queues = {url.rsplit("/", 1)[1] for url in by_type["AWS::SQS::Queue"]}
    assert {"mailstep-send", "mailstep-send-dlq", "mailstep-broadcast", "mailstep-broadcast-dlq"} <= queues
    assert by_type["AWS::SES::ConfigurationSet"] == {c.local_name for c in specs.CONFIGURATION_SETS}
    assert len(by_type["AWS::Lambda::Function"]) == len(specs.FUNCTIONS)
    assert found[specs.BROADCAST_SCHEDULE_OUTPUT] in by_type["AWS::StepFunctions::StateMachine"]


def test_an_unknown_stack_fails_with_a_clear_message_and_exit_code_2(local: Local, nowhere: Path) -> None:
    for command in (("subscribers", "list"), ("broadcast", "list"), ("doctor",)):
        result = stack_cli(local, nowhere, *command, stack="NoSuchStack")

        assert result.returncode == 2, (command, result.stdout, result.stderr)
        assert "stack 'NoSuchStack' not found" in result.stderr and "--stack" in result.stderr
        assert "Traceback" not in result.stderr


def test_subscriber_admin_events_stats_suppression_and_sequences_through_the_stack(
    local: Local, nowhere: Path
) -> None:
    # Given a subscriber created through the events API at the stack's ApiUrl output
    email = f"{unique('stack-ada')}@example.com"
    code, answer = post_event(local, {"type": "subscriber.subscribed", "email": email, "tags": ["stack-t"]})
    assert code == 200, answer

    # When the operator commands name the stack, Then they see and change that subscriber
    assert "stack-t" in ok_json(stack_cli(local, nowhere, "subscribers", "get", email, "--json"))["tags"]
    updated = ok_json(
        stack_cli(
            local,
            nowhere,
            "subscribers",
            "update",
            email,
            "--tag",
            "+stack-pro",
            "--attr",
            "seats=2",
            "--json",
        )
    )
    assert updated["tags_added"] == ["stack-pro"] and updated["subscriber"]["attributes"] == {"seats": 2}
    listed = ok_json(stack_cli(local, nowhere, "subscribers", "list", "--tag", "stack-pro", "--json"))
    assert email in [s["email"] for s in listed["subscribers"]]

    timeline = eventually(
        lambda: [
            e for e in ok_json(stack_cli(local, nowhere, "events", email, "--json")) if e["type"] == "send"
        ],
        what="the onboarding mail in the timeline",
    )
    assert timeline[0]["source"] == "onboarding"
    # the send's counters are folded from the table's stream after its log entry: wait for them
    eventually(
        lambda: "onboarding" in ok_json(stack_cli(local, nowhere, "stats", "--json")),
        what="the onboarding mail counted in the stats",
    )
    assert isinstance(ok_json(stack_cli(local, nowhere, "suppression", "list", "--json")), list)
    failed = ok_json(stack_cli(local, nowhere, "executions", "failed", "--sequence", "onboarding", "--json"))
    assert isinstance(failed, list)

    members = stack_cli(local, nowhere, "sequences", "subscribers", "onboarding")
    assert members.returncode == 0, members.stderr
    assert LABEL in " ".join(members.stdout.split())
    reconciled = stack_cli(local, nowhere, "sequences", "reconcile", "onboarding")
    assert reconciled.returncode == 0 and "stale pair(s) removed" in reconciled.stdout

    sent = ok_json(
        stack_cli(local, nowhere, "send-test", "onboarding/welcome", "--to", email, "--transactional")
    )
    assert sent["target"] == LABEL and sent["status"] == "sent"


def test_doctor_checks_the_stack_by_its_resources(local: Local, nowhere: Path) -> None:
    result = stack_cli(local, nowhere, "doctor", "--json")

    report = json.loads(result.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert report["target"] == LABEL
    assert result.returncode == (0 if report["ok"] else 1)
    # A stack gets every check (the local runtime skips the unemulated ones); its resources
    # come from ListStackResources: the configuration set and the queues with their DLQs.
    assert checks["ses-identity"]["status"] != "skip"
    assert checks["configuration-set"]["status"] == "pass"
    assert checks["dlqs"]["status"] == "pass" or "mailstep-" in checks["dlqs"]["detail"]
    assert checks["alarms"]["status"] != "skip"


def test_broadcast_through_the_stack_dry_run_send_list_and_get(local: Local, nowhere: Path) -> None:
    tag = unique("stack-bc")
    people = [f"{tag}-{n}@example.com" for n in range(3)]
    for email in people:
        code, answer = post_event(local, {"type": "contact.created", "email": email, "tags": [tag]})
        assert code == 200, answer
    args = ("broadcast", "send", "--template", "newsletter/monthly", "--tag", tag, "--id", tag)

    dry = stack_cli(local, nowhere, *args, "--dry-run")

    assert dry.returncode == 0, dry.stdout + dry.stderr
    dry_out = " ".join(dry.stdout.split())
    assert "audience: 3 subscriber(s)" in dry_out and LABEL in dry_out
    missing = stack_cli(local, nowhere, "broadcast", "get", tag)
    assert missing.returncode == 1  # the dry run created nothing

    sent = stack_cli(local, nowhere, *args, "--yes", timeout=150)

    assert sent.returncode == 0, sent.stdout + sent.stderr
    assert f"{tag}: done" in " ".join(sent.stdout.split())
    record = ok_json(stack_cli(local, nowhere, "broadcast", "get", tag))
    assert (record["status"], record["audience"], record["sent"], record["failed"]) == ("done", 3, 3, 0)
    listed = stack_cli(local, nowhere, "broadcast", "list")
    assert listed.returncode == 0 and tag in listed.stdout
    outbox = [json.loads(p.read_text()) for p in local.outbox.glob("*.json")]
    assert sorted(d for m in outbox for d in m["destination"] if d in people) == sorted(people)

    cancelled = stack_cli(local, nowhere, "broadcast", "cancel", tag)
    assert cancelled.returncode == 0 and "nothing to cancel" in " ".join(cancelled.stdout.split())
    resumed = stack_cli(local, nowhere, "broadcast", "resume", tag)
    assert resumed.returncode == 1  # a finished broadcast is not resumed
