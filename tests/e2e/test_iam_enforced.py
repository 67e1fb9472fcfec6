"""IAM is enforced in the local runtime: a function whose role policy in the template lacks
an action fails exactly where it would in AWS, with AccessDeniedException naming the action."""

from __future__ import annotations

import copy
import json
import time
import urllib.request
from pathlib import Path
from typing import Any

from shared.core import specs
from tests.e2e.conftest import post_events, start_dev, stop_dev, wait_for_state


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


def test_a_missing_grant_fails_the_flow_with_access_denied(tmp_path: Path, artifact: Any) -> None:
    handler = specs.SEQUENCE_STEP_FUNCTION.handler
    template = tmp_path / "template.json"
    template.write_text(json.dumps(without_action(artifact.template, handler, "ses:SendEmail")))
    state_dir = tmp_path / "dev"
    process = start_dev(state_dir, "--template", str(template))
    try:
        state = wait_for_state(state_dir, process, 60)
        answer = post_events(state, {"type": "subscriber.subscribed", "email": "denied@example.com"})
        assert answer["results"][0]["sequences_started"] == ["onboarding"]  # the API still does its part
        log = Path(state["logs"]) / "mailstep-sequence-step.log"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "AccessDeniedException" not in (
            log.read_text() if log.exists() else ""
        ):
            time.sleep(0.2)
        text = log.read_text()
        assert "AccessDeniedException" in text and "ses:SendEmail" in text
        with urllib.request.urlopen(state["api_url"] + "/_local/iam", timeout=10) as answer:
            calls = json.loads(answer.read())["calls"]
        denied = {(c["function"], c["action"]) for c in calls if not c["allowed"]}
        assert denied == {("mailstep-sequence-step", "ses:SendEmail")}
        assert not list(Path(state["outbox"]).glob("*.eml"))  # nothing was sent
    finally:
        stop_dev(process)
