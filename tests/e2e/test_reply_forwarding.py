"""Reply forwarding with IAM enforced: the template synthesized with `mailstep:replyForwardTo`
(the only configuration that grants the inbound function SES), run by `mailstep dev --template`.
A reply to a sequence mail is recorded and forwarded to the owner through SES, on the grants
that template gives the inbound function (`ses:SendRawEmail` for a raw send)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from ops.outbox import read_outbox
from shared.core import specs
from shared.sending.sender import decode_tag_value
from tests.e2e.conftest import (
    ROOT,
    mailstep,
    post_events,
    start_dev,
    stop_dev,
    subprocess_env,
    wait_for_state,
)
from tests.e2e.helpers import eventually

OWNER = "owner@example.com"


def forwarding_template(outdir: Path) -> Path:
    """The stack's template with reply forwarding on (synthesized without bundling: the runtime
    runs this checkout's code asset with it)."""
    script = (
        "import sys; from stacks.mailstep_stack import TEST_CONTEXT, build_app; "
        f"app, _ = build_app({{**TEST_CONTEXT, 'mailstep:replyForwardTo': {OWNER!r}}}, outdir=sys.argv[1]); "
        "app.synth()"
    )
    result = subprocess.run(  # noqa: S603 - this interpreter, the project's stack
        [sys.executable, "-c", script, str(outdir)],
        cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return outdir / f"{specs.STACK_NAME}.template.json"


def template_of(mail: dict[str, Any]) -> str | None:
    """The template a mail of the outbox was rendered from (its SES tag, as the pipeline encodes it)."""
    tag = mail.get("email_tags", {}).get("template")
    return decode_tag_value(tag) if tag else None


def test_a_reply_is_forwarded_to_the_owner_with_the_template_s_iam(tmp_path: Path, artifact: Any) -> None:
    template = forwarding_template(tmp_path / "cdk.out")
    inbound = next(
        r
        for r in json.loads(template.read_text())["Resources"].values()
        if r["Type"] == "AWS::Lambda::Function"
        and r["Properties"]["Handler"] == specs.INBOUND_FUNCTION.handler
    )
    assert inbound["Properties"]["Environment"]["Variables"]["REPLY_FORWARD_TO"] == OWNER
    state_dir = tmp_path / "dev"
    process = start_dev(state_dir, "--template", str(template))
    try:
        state = wait_for_state(state_dir, process, 60)
        outbox = Path(state["outbox"])
        # Given the welcome mail of a new subscriber
        post_events(state, {"type": "subscriber.subscribed", "email": "replier@example.org"})
        # (onboarding goes on at once on the test clock: its later mails may be there too)
        (welcome,) = eventually(
            lambda: [m for m in read_outbox(outbox) if template_of(m) == "onboarding/welcome"],
            30,
            "the welcome mail",
        )
        # when the subscriber replies to it,
        reply = mailstep(
            "local", "reply", welcome["message_id"], "--body", "Yes", "--state-dir", str(state_dir)
        )
        assert reply.returncode == 0, reply.stderr
        # then the inbound function forwards it to the owner through SES,
        forwarded = eventually(
            lambda: [m for m in read_outbox(outbox) if m["destination"] == [OWNER]],
            30,
            "the forwarded reply",
        )
        assert len(forwarded) == 1

        # with no request its role refused (the requests are on record when the invocation ends,
        # which can be after the mail reached the outbox).
        def calls() -> list[dict[str, Any]]:
            with urllib.request.urlopen(state["api_url"] + "/_local/iam", timeout=10) as answer:
                return list(json.loads(answer.read())["calls"])

        def sent() -> set[str]:
            return {
                c["action"]
                for c in calls()
                if c["function"] == "mailstep-inbound" and c["action"].startswith("ses:")
            }

        assert eventually(sent, 30, "the forward's SES requests on record") == {
            "ses:SendRawEmail",
            "ses:SendEmail",
        }
        assert [c for c in calls() if not c["allowed"]] == []
    finally:
        stop_dev(process)
