"""Operating mailstep against the local runtime through the CLI: target selection, subscriber
admin, CSV import/export, GDPR delete (asserted by scan), executions failed, doctor."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from shared.core.specs import STATE_MACHINE_PREFIX
from tests.e2e.conftest import Local
from tests.e2e.helpers import as_json, eventually, failed_execution, ops, post, scan_all, subscribe


def test_without_a_running_runtime_the_cli_says_how_to_choose(local: Local, tmp_path: Path) -> None:
    result = local.cli("subscribers", "list", "--state-dir", str(tmp_path))

    assert result.returncode == 2
    assert "no running local runtime" in result.stderr and "--stack" in result.stderr


def test_subscriber_admin_round_trip(local: Local) -> None:
    subscribe(local, "ops-ada@Example.COM", first_name="Ada", tags=["ops-trial"])

    got = ops(local, "subscribers", "get", "ops-ada@example.com", "--json")
    assert got.returncode == 0, got.stderr
    assert "ops-trial" in as_json(got)["tags"]  # (the onboarding sequence may tag too)

    updated = ops(
        local,
        "subscribers",
        "update",
        "ops-ada@example.com",
        "--tag",
        "+ops-pro",
        "--tag",
        "-ops-trial",
        "--attr",
        "seats=3",
        "--json",
    )
    assert updated.returncode == 0, updated.stderr
    body = as_json(updated)
    assert body["tags_added"] == ["ops-pro"] and body["subscriber"]["attributes"] == {"seats": 3}

    listed = ops(local, "subscribers", "list", "--tag", "ops-pro", "--json")
    assert [s["email"] for s in as_json(listed)["subscribers"]] == ["ops-ada@example.com"]

    out = ops(local, "subscribers", "unsubscribe", "ops-ada@example.com", "--json")
    assert as_json(out)["subscriber"]["status"] == "unsubscribed"
    unsub = ops(local, "subscribers", "list", "--status", "unsubscribed", "--tag", "ops-pro", "--json")
    assert len(as_json(unsub)["subscribers"]) == 1
    back = ops(local, "subscribers", "resubscribe", "ops-ada@example.com", "--json")
    assert as_json(back)["subscriber"]["status"] == "subscribed"

    missing = ops(local, "subscribers", "get", "nobody-ops@example.com")
    assert missing.returncode == 1 and "no such subscriber" in missing.stderr
    bad = ops(local, "subscribers", "update", "ops-ada@example.com", "--tag", "+Bad Tag")
    assert bad.returncode == 2


def test_delete_leaves_no_item_in_either_table(local: Local) -> None:
    email = "ops-erase@example.com"
    subscribe(local, email, tags=["ops-erase-a", "ops-erase-b"], attributes={"plan": "pro"})
    post(local, {"type": "trial.started", "email": email})
    tables = local.state["tables"]
    main, events = tables["table_name"], tables["events_table_name"]

    def mentions() -> list[dict[str, Any]]:
        return [i for t in (main, events) for i in scan_all(local, t) if email in json.dumps(i)]

    def settled() -> bool:
        """Both sequences ended and every mail sent has its SES delivery event recorded: an
        event still in flight when erase runs is written after it (docs/operations.md)."""
        items = mentions()
        sent = sum(i["SK"]["S"].startswith("SENT#") for i in items)
        delivered = sum(i.get("type", {}).get("S") == "delivery" for i in items)
        running = any(i["SK"]["S"].startswith("EXEC#") for i in items)
        return sent > 0 and delivered == sent and not running

    eventually(settled, 60, "the subscriber's sequences and SES events to settle", interval_s=0.2)

    result = ops(local, "subscribers", "delete", email, "--yes", "--json")

    assert result.returncode == 0, result.stderr
    assert as_json(result)["deleted_events"] >= 2
    assert mentions() == []
    items = scan_all(local, main)
    profiles = {i["PK"]["S"] for i in items if i["SK"]["S"] == "PROFILE"}
    orphans = [
        i for i in items if i["PK"]["S"].startswith(("TAG#", "EXEC#")) and i["SK"]["S"] not in profiles
    ]
    assert orphans == []


def test_csv_import_report_rerun_and_export(local: Local, tmp_path: Path) -> None:
    source = tmp_path / "people.csv"
    rows = ["email,first_name,tags,plan"]
    rows += [f"ops-csv{i}@example.com,Person {i},ops-csv,p{i % 3}" for i in range(40)]
    rows += ["not-an-email,,,", "ops-csv1@EXAMPLE.com,,,", "ops-bad@example.com,,Bad#Tag,"]
    source.write_text("\n".join(rows) + "\n")

    first = ops(local, "subscribers", "import", str(source), "--tag", "ops-import", "--json")

    assert first.returncode == 1  # rows were rejected
    report = as_json(first)
    assert report["created"] == 40 and report["rows"] == 43
    assert [(r["line"], r["reason"].split(":")[0]) for r in report["rejected"]] == [
        (42, "bad email"),
        (43, "duplicate row"),
        (44, "bad tag"),
    ]
    assert report["rows_per_second"] > 0

    second = as_json(ops(local, "subscribers", "import", str(source), "--tag", "ops-import", "--json"))
    assert second["unchanged"] == 40 and second["created"] == second["updated"] == 0

    dry = ops(local, "subscribers", "import", str(source), "--dry-run")
    assert "dry run" in dry.stdout and "Rejected rows (3)" in dry.stdout

    exported = ops(local, "subscribers", "export", "--tag", "ops-import")
    assert exported.returncode == 0, exported.stderr
    parsed = list(csv.DictReader(io.StringIO(exported.stdout)))
    assert len(parsed) == 40
    assert {r["email"] for r in parsed} == {f"ops-csv{i}@example.com" for i in range(40)}
    assert json.loads(parsed[0]["attributes"])["plan"].startswith("p")


def test_executions_failed_lists_failed_sequence_executions(local: Local) -> None:
    failed_execution(local, "ops-e2e-fail", "ops-e2e-1")

    result = ops(local, "executions", "failed", "--sequence", "ops-e2e-fail", "--json")

    assert result.returncode == 0, result.stderr
    found = as_json(result)
    assert [(f["sequence"], f["status"], f["name"]) for f in found] == [
        ("ops-e2e-fail", "FAILED", "ops-e2e-1")
    ]
    unknown = ops(local, "executions", "failed", "--sequence", "no-such-sequence")
    assert unknown.returncode == 1


def test_doctor_reports_each_check_and_fails_on_a_dead_letter(local: Local) -> None:
    healthy = ops(local, "doctor", "--json")
    report = as_json(healthy)
    names = [c["name"] for c in report["checks"]]
    assert names == [
        "ses-identity",
        "ses-dkim",
        "ses-production",
        "ses-quota",
        "configuration-set",
        "alarms",
        "dlqs",
        "broadcast-workers",
        "open-executions",
        "webhooks",
        "reputation",
        "table-warm-throughput",
        "lambda-concurrency",
        "inbound-identity",
        "receipt-rule-set",
    ]
    assert all(c["status"] in ("pass", "warn", "fail", "skip") for c in report["checks"])
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert statuses["ses-identity"] == statuses["alarms"] == "skip"  # not emulated locally
    assert statuses["ses-production"] == statuses["ses-quota"] == statuses["configuration-set"] == "pass"
    assert statuses["reputation"] == "pass"  # marketing sending is on (docs/reputation.md)
    # the local endpoint does not answer lambda:GetAccountSettings; replies are off
    assert (
        statuses["lambda-concurrency"]
        == statuses["inbound-identity"]
        == statuses["receipt-rule-set"]
        == "skip"
    )
    # the local sequences' RUNNING executions, far from the open-executions quota
    assert statuses["open-executions"] == "pass"
    # the template's workers, sized for mailstep:sesMaxSendRate (14/s by default), against this
    # local account's 1,000/s: a warning with the deploy command
    workers = next(c for c in report["checks"] if c["name"] == "broadcast-workers")
    assert (
        workers["status"] == "warn" and workers["detail"] == "3 workers; the account's 1000 mails/s needs 60"
    )
    assert "cdk deploy -c mailstep:sesMaxSendRate=1000" in workers["hint"]
    assert healthy.returncode == (1 if "fail" in statuses.values() else 0)

    sqs = local.client("sqs")
    dlq = sqs.get_queue_url(QueueName="mailstep-send-dlq")["QueueUrl"]
    sqs.send_message(QueueUrl=dlq, MessageBody=json.dumps({"contract": "send.job", "version": 1}))
    try:
        sick = ops(local, "doctor")
        assert sick.returncode == 1
        assert "some checks failed" in sick.stdout and "mailstep-send-dlq: 1" in sick.stdout
        dlqs = next(c for c in as_json(ops(local, "doctor", "--json"))["checks"] if c["name"] == "dlqs")
        assert dlqs["status"] == "fail" and "redrive" in dlqs["hint"]
    finally:
        sqs.purge_queue(QueueUrl=dlq)
    after = as_json(ops(local, "doctor", "--json"))
    dlqs_after = next(c for c in after["checks"] if c["name"] == "dlqs")
    assert "mailstep-send-dlq" not in dlqs_after["detail"]  # (other tests' DLQs are theirs)


def test_import_starts_sequences_only_with_trigger_and_only_once(local: Local, tmp_path: Path) -> None:
    source = tmp_path / "trigger.csv"
    source.write_text("email\nops-trig1@example.com\nops-trig2@example.com\n")
    main = local.state["tables"]["table_name"]

    def executions() -> set[str]:
        return {
            i["SK"]["S"].split("#", 1)[1]
            for i in scan_all(local, main)
            if i["SK"]["S"].startswith("EXEC#") and "ops-trig" in i["PK"]["S"]
        }

    plain = as_json(ops(local, "subscribers", "import", str(source), "--json"))
    assert plain["created"] == 2 and plain["sequences_started"] == 0
    assert executions() == set()

    sfn = local.client("stepfunctions")

    def started() -> int:
        machines = [
            m
            for m in sfn.list_state_machines()["stateMachines"]
            if m["name"].startswith(STATE_MACHINE_PREFIX)
        ]
        return sum(
            len(sfn.list_executions(stateMachineArn=m["stateMachineArn"])["executions"]) for m in machines
        )

    before = started()
    triggered = as_json(ops(local, "subscribers", "import", str(source), "--trigger", "--json"))
    assert triggered["unchanged"] == 2 and triggered["sequences_started"] >= 2
    assert started() - before == triggered["sequences_started"]

    again = as_json(ops(local, "subscribers", "import", str(source), "--trigger", "--json"))
    assert again["sequences_started"] == 0 and started() - before == triggered["sequences_started"]
