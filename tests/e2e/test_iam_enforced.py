"""IAM is enforced in the local runtime: a function whose role policy in the template lacks
an action fails exactly where it would in AWS, with AccessDeniedException naming the action."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from shared.core import specs
from tests.e2e.conftest import (
    mailstep,
    post_events,
    start_dev,
    stop_dev,
    wait_for_state,
)
from tests.e2e.helpers import eventually


def without_action(template: dict[str, Any], handler: str, action: str) -> dict[str, Any]:
    """A copy of ``template`` whose function ``handler`` no longer has ``action`` in its role policy."""
    changed = copy.deepcopy(template)
    resources = changed["Resources"]
    function = next(
        r
        for r in resources.values()
        if r["Type"] == "AWS::Lambda::Function" and r["Properties"]["Handler"] == handler
    )
    role = function["Properties"]["Role"]["Fn::GetAtt"][0]
    removed = 0
    for policy in resources.values():
        if policy["Type"] != "AWS::IAM::Policy" or {"Ref": role} not in policy["Properties"]["Roles"]:
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            if action in actions:
                statement["Action"] = [a for a in actions if a != action] or ["none:None"]
                removed += 1
    assert removed, f"{handler} has no {action} to remove"
    return changed


# SES authorizes mailstep's raw v2 SendEmail as ses:SendRawEmail (what AWS names when it refuses;
# the local runtime requires ses:SendEmail as well): removing either stops the mail.
@pytest.mark.parametrize("action", ["ses:SendRawEmail", "ses:SendEmail"])
def test_a_missing_grant_fails_the_flow_with_access_denied(
    tmp_path: Path, artifact: Any, action: str
) -> None:
    handler = specs.SEQUENCE_STEP_FUNCTION.handler
    template = tmp_path / "template.json"
    template.write_text(json.dumps(without_action(artifact.template, handler, action)))
    state_dir = tmp_path / "dev"
    process = start_dev(state_dir, "--template", str(template))
    try:
        state = wait_for_state(state_dir, process, 60)
        answer = post_events(state, {"type": "subscriber.subscribed", "email": "denied@example.com"})
        assert answer["results"][0]["sequences_started"] == ["onboarding"]  # the API still does its part
        log = Path(state["logs"]) / "mailstep-sequence-step.log"
        refused = "AccessDeniedException"
        eventually(lambda: refused in (log.read_text() if log.exists() else ""), 30, "the refusal")
        assert action in log.read_text()

        def denied() -> set[tuple[str, str]]:
            """The refused (function, action) pairs (recorded when the invocation ends, after its log)."""
            with urllib.request.urlopen(state["api_url"] + "/_local/iam", timeout=10) as answer:
                calls = json.loads(answer.read())["calls"]
            return {(c["function"], c["action"]) for c in calls if not c["allowed"]}

        assert eventually(denied, 30, "the refused call on record") == {("mailstep-sequence-step", action)}
        assert not list(Path(state["outbox"]).glob("*.eml"))  # nothing was sent
    finally:
        stop_dev(process)


def local_verify(state_dir: Path, identity: str) -> subprocess.CompletedProcess[str]:
    return mailstep("local", "verify", identity, "--state-dir", str(state_dir))


def test_in_the_ses_sandbox_only_verified_recipients_get_mail(tmp_path: Path, artifact: Any) -> None:
    # Given `mailstep dev --ses-sandbox` (the template as synthesized, IAM enforced)
    state_dir = tmp_path / "dev"
    process = start_dev(state_dir, "--ses-sandbox")
    try:
        state = wait_for_state(state_dir, process, 60)
        outbox = Path(state["outbox"])
        # when a subscriber who is no verified identity starts onboarding,
        post_events(state, {"type": "subscriber.subscribed", "email": "unverified@example.org"})
        log = Path(state["logs"]) / "mailstep-sequence-step.log"
        eventually(lambda: "MessageRejected" in (log.read_text() if log.exists() else ""), 30, "the refusal")
        # then SES refuses the send as it does in the sandbox, and nothing is delivered;
        assert '"error_code":"MessageRejected"' in log.read_text()
        assert not list(outbox.glob("*.eml"))
        # after `mailstep local verify`, mail to that address is delivered,
        verify = local_verify(state_dir, "reader@example.net")
        assert verify.returncode == 0, verify.stderr
        post_events(state, {"type": "subscriber.subscribed", "email": "reader@example.net"})
        mails = eventually(lambda: list(outbox.glob("*.json")), 30, "the verified reader's mail")
        assert [json.loads(m.read_text())["destination"] for m in mails] == [["reader@example.net"]]

        # and the sender's role was checked on the recipient's identity too (the sandbox's rule).
        def checked() -> set[str]:
            """The identities the sends were authorized on (recorded when the invocation ends)."""
            with urllib.request.urlopen(state["api_url"] + "/_local/iam", timeout=10) as answer:
                calls = json.loads(answer.read())["calls"]
            return {c["resource"].rsplit(":", 1)[-1] for c in calls if c["action"] == "ses:SendRawEmail"}

        wanted = {"identity/example.com", "identity/example.org", "identity/example.net"}
        eventually(lambda: wanted <= checked(), 30, "sender and recipient identities authorized")
        bad = local_verify(state_dir, "not an address")
        assert bad.returncode == 2  # a usage error, the message in typer's box:
        message = " ".join(re.sub(r"[│╭╮╰╯─]", " ", bad.stderr).split())
        assert "neither an email address nor a domain" in message
    finally:
        stop_dev(process)
