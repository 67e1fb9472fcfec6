"""The local SES replaces the caller's Message-ID with SES's own, as SES does."""

from __future__ import annotations

import base64
import json
from email import message_from_bytes, policy
from pathlib import Path
from typing import Any

import pytest

from local_aws.ses import LocalSes, ses_message_id_header

RAW = (
    b"From: Acme <hello@acme.test>\r\n"
    b"To: ada@example.com\r\n"
    b"Message-ID:\r\n <send-42@acme.test>\r\n"  # folded: the continuation goes too
    b"Subject: Welcome\r\n"
    b"X-Mailstep-Send-Id: send-42\r\n"
    b"\r\n"
    b"Message-ID: <in-the-body@acme.test> stays\r\n"
)


def local_ses(tmp_path: Path, region: str = "us-east-1") -> LocalSes:
    return LocalSes(tmp_path, account_id="123456789012", region=region, publish=lambda _topic, _message: None)


def send(ses: LocalSes, content: dict[str, Any]) -> tuple[str, bytes, dict[str, Any]]:
    sent = ses.send({"Content": content}, lambda _name: True)
    return sent.message_id, sent.eml.read_bytes(), json.loads(sent.meta.read_text())


@pytest.mark.parametrize(
    ("region", "domain"),
    [("us-east-1", "email.amazonses.com"), ("eu-west-1", "eu-west-1.amazonses.com")],
)
def test_the_header_names_the_message_id_sendemail_returns_in_the_region_domain(
    region: str, domain: str
) -> None:
    assert ses_message_id_header("0100019a-abc-000000", region) == f"<0100019a-abc-000000@{domain}>"


def test_a_raw_message_id_is_replaced_and_the_rest_stays_byte_exact(tmp_path: Path) -> None:
    message_id, eml, meta = send(local_ses(tmp_path), {"Raw": {"Data": base64.b64encode(RAW).decode()}})
    parsed = message_from_bytes(eml, policy=policy.default)
    assert parsed.get_all("Message-ID") == [f"<{message_id}@email.amazonses.com>"]
    assert b"send-42@acme.test" not in eml
    assert eml.endswith(
        b"From: Acme <hello@acme.test>\r\nTo: ada@example.com\r\nSubject: Welcome\r\n"
        b"X-Mailstep-Send-Id: send-42\r\n\r\nMessage-ID: <in-the-body@acme.test> stays\r\n"
    )
    assert meta["mail"]["messageId"] == message_id  # what SES events carry
    headers = {h["name"]: h["value"] for h in meta["mail"]["headers"]}
    assert headers["Message-ID"] == f"<{message_id}@email.amazonses.com>"


def test_a_raw_message_without_message_id_gets_ses_s_and_keeps_its_bytes(tmp_path: Path) -> None:
    raw = RAW.replace(b"Message-ID:\r\n <send-42@acme.test>\r\n", b"")
    message_id, eml, _ = send(
        local_ses(tmp_path, "eu-west-1"), {"Raw": {"Data": base64.b64encode(raw).decode()}}
    )
    assert eml.startswith(f"Message-ID: <{message_id}@eu-west-1.amazonses.com>\r\n".encode())
    assert eml.endswith(raw)


def test_a_simple_message_s_header_is_replaced_too(tmp_path: Path) -> None:
    content = {
        "Simple": {
            "Subject": {"Data": "Hi"},
            "Body": {"Text": {"Data": "Hello"}},
            "Headers": [{"Name": "Message-ID", "Value": "<mine@acme.test>"}],
        }
    }
    ses = local_ses(tmp_path)
    message_id = ses.send(
        {
            "FromEmailAddress": "hello@acme.test",
            "Destination": {"ToAddresses": ["ada@example.com"]},
            "Content": content,
        },
        lambda _name: True,
    ).message_id
    parsed = message_from_bytes((tmp_path / f"{message_id}.eml").read_bytes(), policy=policy.default)
    assert parsed.get_all("Message-ID") == [f"<{message_id}@email.amazonses.com>"]
