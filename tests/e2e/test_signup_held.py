"""The sign-up's limits on the local runtime, through HTTP and the CLI, as a flood meets them:

- 100 dot, case and googlemail.com spellings of one Gmail inbox (500 in ``make bench``) get ONE
  confirmation mail (the cooldown's mailbox key follows Gmail's documented rules; docs/signup.md).
- After a flood fills a recipient domain's hourly cap, a real reader of that domain is HELD,
  not dropped: the answer says the mail is delayed and until when, the operator sees the
  domain held (``mailstep signups held``), and the reader gets exactly one confirmation mail
  (the held job's 15-minute SQS delay runs on the runtime's virtual clock, so at once here),
  however often the operator releases the domain; once the held budget is spent too, the
  answer asks to try again after the hour (429, Retry-After).

Every request of the local runtime comes from 127.0.0.1, so the per-client-address limit is
lifted in its template (specs.LOCAL_SYNTH_CONTEXT; tested on moto in
tests/integration/test_signup_hostile.py): here the held path is what protects the reader.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from shared.core import specs
from shared.store.pending import mailbox_key
from tests.e2e.conftest import Local, dev_runtime
from tests.e2e.helpers import as_json, eventually, ops, outbox, request, settled, unique
from tests.e2e.test_signup import CONFIRM_TEMPLATE

CAP, HELD = 5, 3  # the flooded runtime's signupDomainCapPerHour and signupDomainHeldPerHour


def sign_up(local: Local, email: str) -> tuple[int, dict[str, str], dict[str, Any]]:
    status, headers, body = request(
        local.api_url + "/v1/signup", "POST", json.dumps({"email": email}), "application/json"
    )
    return status, headers, json.loads(body)


def confirmations_to(local: Local, mailbox: str) -> list[dict[str, Any]]:
    return [
        m
        for m in outbox(local)
        if m["template"] == CONFIRM_TEMPLATE and {mailbox_key(d) for d in m["destination"]} == {mailbox}
    ]


@pytest.mark.parametrize(
    "count", [pytest.param(100, id="100"), pytest.param(500, id="500", marks=pytest.mark.bench)]
)
def test_dot_case_and_googlemail_spellings_of_one_gmail_inbox_get_one_confirmation_mail(
    local: Local, count: int
) -> None:
    """Every spelling kind is in the 100: dots in 7 of the 11 places, upper case (each third) and
    googlemail.com (each second), alone and together; 500 puts dots in 9."""
    base = "dotflood" + unique("g").removeprefix("g-")[:4]  # 12 letters: 11 places for a dot
    variants = []
    for bits in range(1, count + 1):
        local_part = "".join(
            c + ("." if (bits >> i) & 1 and i < len(base) - 1 else "") for i, c in enumerate(base)
        )
        local_part = local_part.upper() if bits % 3 == 0 else local_part
        variants.append(f"{local_part}@{'googlemail.com' if bits % 2 else 'gmail.com'}")
    mailbox = f"{base}@gmail.com"
    assert len(set(variants)) == count and {mailbox_key(v) for v in variants} == {mailbox}

    started = time.monotonic()
    answers = [sign_up(local, v) for v in variants]
    elapsed = time.monotonic() - started
    settled(local)

    assert {status for status, _, _ in answers} == {200}
    received = confirmations_to(local, mailbox)
    print(f"\n{count} spellings in {elapsed:.1f} s: {len(received)} confirmation mail(s) to the inbox")
    assert len(received) == 1
    assert received[0]["destination"] == [variants[0]]  # the spelling the first sign-up typed


def _capped_template(template: dict[str, Any]) -> dict[str, Any]:
    """The template `cdk synth -c mailstep:signupDomainCapPerHour=5 -c
    mailstep:signupDomainHeldPerHour=3` gives: the sign-up function's environment
    (tests/infra/test_signup_infra.py proves the context lands there)."""
    changed = json.loads(json.dumps(template))
    [function] = [
        r
        for r in changed["Resources"].values()
        if r["Type"] == "AWS::Lambda::Function"
        and r["Properties"].get("Handler") == specs.SIGNUP_FUNCTION.handler
    ]
    variables = function["Properties"]["Environment"]["Variables"]
    variables[specs.ENV["signup_domain_cap_per_hour"]] = str(CAP)
    variables[specs.ENV["signup_domain_held_per_hour"]] = str(HELD)
    return changed


def test_after_a_flood_fills_a_domains_cap_a_real_reader_is_held_told_and_mailed_once(
    tmp_path: Path, artifact: Any
) -> None:
    template = tmp_path / "template.json"
    template.write_text(json.dumps(_capped_template(artifact.template)))
    with dev_runtime(tmp_path / "dev", "--template", str(template), "--max-send-rate", "1000") as local:
        domain = "flood.example.com"
        # Given a flood that fills the domain's cap of the hour (and takes a held place)
        flood = [sign_up(local, f"victim{i}@{domain}") for i in range(CAP + 1)]
        assert [s for s, _, _ in flood] == [200] * (CAP + 1)
        assert [b["status"] for _, _, b in flood] == ["accepted"] * CAP + ["held"]

        # When a real reader of the domain signs up
        started = time.monotonic()
        status, _, answer = sign_up(local, f"reader@{domain}")

        # Then the answer says the mail is delayed and until when
        assert status == 200 and answer["status"] == "held" and answer["confirmation"] is True, answer
        assert "delayed" in answer["message"] and domain in answer["message"] and answer["mail_by"]
        # the operator sees the domain held
        held = as_json(ops(local, "signups", "held", "--json"))["domains"]
        assert [(d["domain"], d["held"], d["mailed_at_once"]) for d in held] == [(domain, 2, CAP)], held
        assert held[0]["since"]
        # and the reader gets one confirmation mail (the 15-minute delay on the virtual clock)
        eventually(lambda: confirmations_to(local, f"reader@{domain}"), 60, "the held reader's confirmation")
        took = time.monotonic() - started
        # releasing the domain (twice) mails nobody again
        for _ in range(2):
            released = as_json(ops(local, "signups", "release", domain, "--json"))
            assert released["domain"] == domain and released["released"] in (0, 1)
        settled(local)
        assert len(confirmations_to(local, f"reader@{domain}")) == 1
        assert as_json(ops(local, "signups", "held", "--json"))["domains"][0]["waiting"] == 0
        clock = local.status()["clock"]  # the two held jobs waited 15 minutes each (virtual time)
        assert (clock["queue_delays"], clock["queue_delay_s"]) == (2, 2 * 900.0), clock
        print(f"\nheld reader's confirmation after {took:.1f} s wall, 900 s of virtual SQS delay")

        # Once the held budget is spent too, the answer asks to try again after the hour
        for i in range(HELD - 2):
            assert sign_up(local, f"late{i}@{domain}")[2]["status"] == "held"
        status, headers, answer = sign_up(local, f"last@{domain}")
        assert status == 429 and answer["status"] == "try_later" and answer["retry_after"], answer
        assert 0 < int(headers.get("retry-after") or headers["Retry-After"]) <= 3600
        # and another domain is not held back
        assert sign_up(local, "someone@example.org")[2]["status"] == "accepted"
