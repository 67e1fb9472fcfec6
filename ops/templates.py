"""Templates for operators: the list (``mailstep templates list``, the MCP tool
``templates_list``, the console) and a test send through the real pipeline
(``mailstep send-test``, the console's test send)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from shared.sending.jobs import SendJob
from shared.sending.pipeline import TEST_SOURCE, MailIdentity, SendOutcome, send
from shared.sending.rendering import Renderer

if TYPE_CHECKING:
    from ops.targets import Target


def identity_from_env() -> MailIdentity:
    """The sending identity from the environment (defaults where unset)."""
    import os

    from shared.core.specs import ENV

    defaults = MailIdentity()
    fields = {
        "from_": "default_from",
        "reply_to": "default_reply_to",
        "postal_address": "postal_address",
        "footer_reason": "mail_footer_reason",
        "public_base_url": "public_base_url",
    }
    values = {attr: os.environ.get(ENV[setting], getattr(defaults, attr)) for attr, setting in fields.items()}
    return MailIdentity(**values)


def rows(engine: Renderer) -> list[dict[str, Any]]:
    """Every template key with its file, subject and layout (front matter)."""
    found = []
    for key in engine.keys():  # noqa: SIM118 - Renderer, not dict
        source = engine.source(key)
        found.append(
            {
                "key": key,
                "file": source.path.relative_to(engine.root).as_posix(),
                "subject": str(source.front_matter.get("subject", "")),
                "layout": str(source.front_matter.get("layout", "default")),
            }
        )
    return found


def send_test(
    target: Target,
    key: str,
    to: str,
    *,
    data: dict[str, Any] | None = None,
    subject: str | None = None,
    transactional: bool = False,
) -> SendOutcome:
    """One mail of ``key`` to ``to`` through the send pipeline the Lambdas run (eligibility,
    send-once claim, render, SES, ``SENT#``), with source ``test`` and a fresh step id: every
    call sends once. Suppressed and unsubscribed addresses are skipped as for any mail."""
    job = SendJob(
        email=to,
        template=key,
        source=TEST_SOURCE,
        step=f"t{time.time_ns()}",
        subject=subject,
        transactional=transactional,
        data=data or {},
    )
    return send(job, target.send_context())
