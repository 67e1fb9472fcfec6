"""A sequence with ``topic:`` on the local runtime: its mail belongs to the topic (List-Id,
one-click), and a reader who leaves the topic gets none of its later mails while the execution
goes on, as docs/sequences.md says.

No shipped sequence names a topic, so the test writes its own sequence file in a temporary
project folder (beside a copy of ``topics.yaml`` and the project's templates), deploys it as a
state machine calling the runtime's sequence step function (what the CDK construct does for
every file of ``sequences/``), and starts it the way an operator does:
``mailstep subscribers import --trigger --sequences-dir``. Every step runs in the deployed
shape: the bundled asset's step function with the template's IAM.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from local_aws.sequence_machines import deploy_state_machines
from shared.core.specs import STATE_MACHINE_PREFIX
from shared.sequences.sfn import StepFunctions
from tests.e2e.conftest import ROOT, Local
from tests.e2e.helpers import (
    add_contact,
    events_of,
    eventually,
    item,
    messages,
    ok_json,
    one_click,
    ops,
    paused_clock,
    unique,
    unsubscribe_targets,
)

TOPIC, TOPIC_NAME = "product-updates", "Product updates"  # topics.yaml: default on
FIRST, SECOND = "onboarding/tips", "onboarding/upgrade"


def _project(tmp_path: Path, sequence_id: str) -> Path:
    """A project folder: ``sequences/<id>.yaml`` (topic, send, wait, send), ``topics.yaml``,
    ``templates/``; the sequences folder is returned."""
    shutil.copy(ROOT / "topics.yaml", tmp_path / "topics.yaml")
    (tmp_path / "templates").symlink_to(ROOT / "templates", target_is_directory=True)
    folder = tmp_path / "sequences"
    folder.mkdir()
    (folder / f"{sequence_id}.yaml").write_text(
        f"trigger: subscriber.subscribed\ntopic: {TOPIC}\nsteps:\n"
        f"  - send: {FIRST}\n    subject: First\n  - wait: 1d\n  - send: {SECOND}\n    subject: Second\n"
    )
    return folder


def _deploy(local: Local, folder: Path) -> None:
    """One state machine per file, with the role of a shipped sequence's machine and its Tasks
    calling the same step function (the ARN the shipped machine's Tasks name)."""
    sfn = local.client("stepfunctions")
    shipped = sfn.describe_state_machine(
        stateMachineArn=next(
            m["stateMachineArn"]
            for m in sfn.list_state_machines()["stateMachines"]
            if m["name"] == f"{STATE_MACHINE_PREFIX}onboarding"
        )
    )
    # a plain Task names the function as its Resource, a callback Task as its FunctionName
    resources = {
        s.get("Parameters", {}).get("FunctionName", s["Resource"])
        for s in json.loads(shipped["definition"])["States"].values()
        if s["Type"] == "Task"
    }
    (step_function,) = resources
    deploy_state_machines(step_function, shipped["roleArn"], folder, ROOT / "templates", StepFunctions(sfn))


def _mail_to(local: Local, source: str, email: str) -> list[Any]:
    return [msg for meta, msg in messages(local, source) if meta["destination"] == [email]]


def _runs_done(local: Local, sequence_id: str, count: int) -> bool:
    sfn = local.client("stepfunctions")
    machine = next(
        m["stateMachineArn"]
        for m in sfn.list_state_machines()["stateMachines"]
        if m["name"] == f"{STATE_MACHINE_PREFIX}{sequence_id}"
    )
    runs = sfn.list_executions(stateMachineArn=machine)["executions"]
    return len(runs) == count and all(r["status"] == "SUCCEEDED" for r in runs)


def test_a_reader_who_leaves_a_sequence_topic_gets_none_of_its_later_mails(
    local: Local, tmp_path: Path
) -> None:
    run = unique("topicseq")
    stay, leave = f"stay-{run}@example.com", f"leave-{run}@example.com"
    for email in (stay, leave):
        add_contact(local, email, tags=[run])
    folder = _project(tmp_path, run)
    _deploy(local, folder)
    imported = tmp_path / "readers.csv"
    imported.write_text(f"email\n{stay}\n{leave}\n")

    with paused_clock(local):  # both executions stop at their one-day wait
        # Given both readers in the sequence, its first mail in their inbox
        report = ok_json(
            ops(
                local,
                "subscribers",
                "import",
                str(imported),
                "--trigger",
                "--sequences-dir",
                str(folder),
                "--json",
            )
        )
        assert report["rejected"] == [] and report["sequences_started"] == 2, report
        eventually(
            lambda: all(len(_mail_to(local, run, email)) == 1 for email in (leave, stay)),
            what="the first mail to both readers",
        )
        (mail,) = _mail_to(local, run, leave)
        # ... a mail of the topic: its List-Id names the topic, not the sequence
        list_id = " ".join(str(mail["List-Id"]).replace('"', "").split())
        assert list_id.startswith(f"{TOPIC_NAME} <{TOPIC}."), list_id

        # When one reader's mail client posts the mail's one-click unsubscribe
        assert one_click(local, unsubscribe_targets(mail)[0]) == 200
        profile = item(local, f"SUB#{leave}", "PROFILE")
        assert profile is not None
        assert profile["status"]["S"] == "subscribed"  # only the topic was left
        assert set(profile.get("topics_out", {}).get("SS", [])) == {TOPIC}

    # Then after the wait the reader who stayed gets the second mail; the one who left does not,
    # skipped with the reason, and both executions end normally
    eventually(lambda: _runs_done(local, run, 2), what="both executions to succeed", timeout_s=60)
    assert [m["Subject"] for m in _mail_to(local, run, stay)] == ["First", "Second"]
    assert [m["Subject"] for m in _mail_to(local, run, leave)] == ["First"]
    skipped = [e for e in events_of(local, leave) if e["type"] == "send_skipped"]
    assert [(e["reason"], e["template"]) for e in skipped] == [("topic_opt_out", SECOND)], skipped
    assert [e for e in events_of(local, stay) if e["type"] == "send_skipped"] == []
