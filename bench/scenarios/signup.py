"""Public sign-up with double opt-in, as a website's visitors use it (no API key):

- a new address: ``POST /v1/signup`` (the pending item, the confirmation mail);
- a repeat of the same address within the cooldown (bots, double clicks): nothing is sent;
- the click: ``POST /c/<token>`` with the link of the confirmation mail (the profile, the
  consent record, the ``confirm`` counter, the event, and the ``welcome-confirmed``
  sequence it triggers, up to its one mail).

A warm-up sign-up and confirmation first, so cold starts (secret fetch, imports) are not
charged to the steady state.
"""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
from email import policy
from email.parser import BytesParser

from bench.harness import Bench
from bench.meter import Measurement

NAME = "signup"
DESCRIPTION = (
    "public sign-ups (POST /v1/signup), repeats within the cooldown, confirmations (POST /c/<token>)"
)
SIGNUPS = 50
REPEATS = 5  # per address
_LINK = re.compile(r'href="https://[^"]+(/c/[^"]+)"')


def _signup(bench: Bench, email: str) -> None:
    status, answer = bench.post("/v1/signup", {"email": email, "topics": ["newsletter"], "form": "bench"})
    if status != 200:
        raise RuntimeError(f"POST /v1/signup answered {status}: {answer}")


def _confirm_path(bench: Bench, email: str) -> str:
    """The /c/<token> path of the newest confirmation mail to ``email`` in the outbox."""
    from ops.outbox import read_outbox

    # The confirmation goes out through the send queue (the sender function), not inside the
    # sign-up request: wait for it.
    deadline = time.monotonic() + 30
    while not (found := [m for m in read_outbox(bench.runtime.outbox) if email in m["destination"]]):
        if time.monotonic() > deadline:
            raise RuntimeError(f"no confirmation mail for {email} within 30 s")
        time.sleep(0.05)
    raw = (bench.runtime.outbox / f"{found[-1]['message_id']}.eml").read_bytes()
    message = BytesParser(policy=policy.default).parsebytes(raw)
    html = message.get_body(("html",))
    link = _LINK.search(html.get_content() if html is not None else "")  # type: ignore[union-attr]
    if link is None:
        raise RuntimeError(f"no confirmation link in the mail to {email}")
    return link.group(1).replace("&amp;", "&")


def _click(bench: Bench, path: str) -> None:
    request = urllib.request.Request(  # noqa: S310 - the local API
        bench.runtime.api_url + path,
        data=b"confirm=1",
        headers={"content-type": "application/x-www-form-urlencoded"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:  # noqa: S310
            status = answer.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    if status != 200:
        raise RuntimeError(f"POST {path[:12]}... answered {status}")


def _wait_for_sends(bench: Bench, total: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while bench.runtime.ses.sends < total:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{bench.runtime.ses.sends} mails sent, expected {total}")
        time.sleep(0.05)


def run(bench: Bench) -> list[Measurement]:
    warmup = "signup-warmup@example.com"
    _signup(bench, warmup)
    _click(bench, _confirm_path(bench, warmup))
    _wait_for_sends(bench, bench.runtime.ses.sends + 1)  # the warm-up's welcome mail
    emails = [f"signup{i}@example.com" for i in range(SIGNUPS)]

    def new_addresses() -> None:
        expected = bench.runtime.ses.sends + SIGNUPS  # the confirmations, sent by the sender function
        for email in emails:
            _signup(bench, email)
        _wait_for_sends(bench, expected)

    def repeats() -> None:
        for email in emails:
            for _ in range(REPEATS):
                _signup(bench, email)

    paths: dict[str, str] = {}

    def confirmations() -> None:
        expected = bench.runtime.ses.sends + SIGNUPS  # one welcome-confirmed mail each
        for email in emails:
            _click(bench, paths[email])
        _wait_for_sends(bench, expected)

    measured = [bench.measure("new address", SIGNUPS, "sign-up", new_addresses)]
    sent = bench.runtime.ses.sends
    measured.append(
        bench.measure(f"repeat within the cooldown (x{REPEATS})", SIGNUPS * REPEATS, "request", repeats)
    )
    if bench.runtime.ses.sends != sent:
        raise RuntimeError("a repeat within the cooldown sent a mail")
    paths.update({email: _confirm_path(bench, email) for email in emails})
    measured.append(bench.measure("confirmation (+ welcome mail)", SIGNUPS, "confirmation", confirmations))
    return measured
