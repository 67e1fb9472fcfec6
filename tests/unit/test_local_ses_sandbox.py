"""The local SES in sandbox mode (`mailstep dev --ses-sandbox`): as SES in the sandbox, it
refuses the whole send when a recipient is not a verified identity (the address or its domain)
or a mailbox simulator address, with SES's MessageRejected and its message."""

from __future__ import annotations

from pathlib import Path

import pytest

from local_aws.ses import LocalSes, SesError


def local_ses(tmp_path: Path, *, sandbox: bool) -> LocalSes:
    return LocalSes(
        tmp_path, account_id="123456789012", region="eu-west-1", publish=lambda _t, _m: None, sandbox=sandbox
    )


def send(ses: LocalSes, *to: str, verified: frozenset[str] = frozenset()) -> str:
    params = {
        "FromEmailAddress": "hello@acme.test",
        "Destination": {"ToAddresses": list(to)},
        "Content": {"Raw": {"Data": "RnJvbTogQWNtZSA8aGVsbG9AYWNtZS50ZXN0Pg0KDQpoaQ0K"}},
    }
    return ses.send(params, lambda _name: True, lambda identity: identity in verified).message_id


def test_an_unverified_recipient_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    ses = local_ses(tmp_path, sandbox=True)
    with pytest.raises(SesError) as refused:
        send(ses, "ann@verified.test", "bo@elsewhere.test", verified=frozenset({"ann@verified.test"}))

    assert refused.value.error_type == "MessageRejected" and refused.value.status == 400
    assert refused.value.message == (
        "Email address is not verified. The following identities failed the check in region "
        "EU-WEST-1: bo@elsewhere.test"
    )
    assert list(tmp_path.glob("*.eml")) == []
    assert ses.account()["ProductionAccessEnabled"] is False


def test_verified_addresses_domains_and_the_mailbox_simulator_are_delivered(tmp_path: Path) -> None:
    ses = local_ses(tmp_path, sandbox=True)
    verified = frozenset({"ann@verified.test", "team.test"})

    send(ses, "ANN@verified.test", "cy@team.test", "success@simulator.amazonses.com", verified=verified)

    assert len(list(tmp_path.glob("*.eml"))) == 1


def test_out_of_the_sandbox_any_recipient_is_delivered(tmp_path: Path) -> None:
    ses = local_ses(tmp_path, sandbox=False)
    send(ses, "anyone@example.org")
    assert len(list(tmp_path.glob("*.eml"))) == 1
    assert ses.account()["ProductionAccessEnabled"] is True


def test_the_24_hour_quota_counts_the_last_day_s_recipients_and_frees_them_a_day_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from local_aws import ses as ses_module

    now = [1_000_000.0]
    monkeypatch.setattr(ses_module.time, "time", lambda: now[0])
    ses = local_ses(tmp_path, sandbox=False)
    ses.configure(max_24_hour_send=3)
    send(ses, "a@x.test", "b@x.test")
    now[0] += 3600
    send(ses, "c@x.test")
    assert ses.account()["SendQuota"]["SentLast24Hours"] == 3
    with pytest.raises(SesError) as refused:
        send(ses, "d@x.test")
    assert refused.value.message == "Daily message quota exceeded."

    now[0] += 86400 - 3600 + 1  # the first send's two recipients are a day old
    assert ses.account()["SendQuota"]["SentLast24Hours"] == 1
    send(ses, "d@x.test", "e@x.test")
    assert ses.account()["SendQuota"]["SentLast24Hours"] == 3
