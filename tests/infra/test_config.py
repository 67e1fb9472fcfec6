"""cdk.json context keys are validated; a bad value fails synthesis naming the key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from aws_cdk import App

from shared.core import specs
from stacks.config import KEYS, PREFIX, ConfigError, MailstepConfig
from stacks.mailstep_stack import SKIP_BUNDLING, TEST_CONTEXT, build_app, cdk_json_context

ROOT = Path(__file__).resolve().parents[2]


def config_from(context: dict[str, object]) -> MailstepConfig:
    """The configuration of a synthesis for the local runtime (no sending identity needed)."""
    return MailstepConfig.from_context(App(context={**context, **specs.LOCAL_SYNTH_CONTEXT}).node)


def test_defaults() -> None:
    config = config_from({})

    assert config.data_ttl_days == 180
    assert config.log_retention_days == 90
    assert config.log_level == "INFO"
    assert (config.api_throttle_rate, config.api_throttle_burst) == (50, 100)
    assert config.mail_settings() == {}


def test_cdk_json_declares_every_key_with_its_default() -> None:
    context = cdk_json_context()
    declared = {k.removeprefix(PREFIX) for k in context if k.startswith(PREFIX)}

    assert declared == set(KEYS.values())
    # the local synthesis lifts the sign-up's per-client-address limit (specs.LOCAL_SYNTH_CONTEXT)
    local_source_cap = specs.LOCAL_SYNTH_CONTEXT["mailstep:signupSourceCapPerHour"]
    assert config_from(context) == MailstepConfig(local=True, signup_source_cap_per_hour=local_source_cap)
    assert json.loads((ROOT / "cdk.json").read_text())["app"] == "python app.py"


def test_a_deployment_without_a_sending_identity_fails_naming_the_keys() -> None:
    # cdk.json as committed, synthesized for deployment (not for the local runtime):
    with pytest.raises(ConfigError) as raised:
        MailstepConfig.from_context(App(context=cdk_json_context()).node)

    assert "mailstep:sesDomain" in str(raised.value) and "mailstep:fromAddress" in str(raised.value)
    assert "sending identity" in str(raised.value)
    # either key gives the stack an identity to send from
    deployed = MailstepConfig.from_context(App(context={"mailstep:sesDomain": "acme.test"}).node)
    assert deployed.sending_domain == "acme.test"
    by_address = MailstepConfig.from_context(App(context={"mailstep:fromAddress": "News <n@Acme.test>"}).node)
    assert by_address.sending_domain == "acme.test"
    assert config_from({}).sending_domain == "example.com"  # the local default sender's


def test_synthesizing_app_py_without_a_sending_identity_fails_naming_the_keys(tmp_path: Path) -> None:
    # What `cdk deploy` runs with cdk.json as committed: the app exits non-zero with the message.
    env = {k: v for k, v in os.environ.items() if k != "CDK_CONTEXT_JSON"}
    env |= {"CDK_OUTDIR": str(tmp_path), "CDK_CONTEXT_JSON": json.dumps(SKIP_BUNDLING)}
    result = subprocess.run(  # noqa: S603 - this interpreter, the project's app.py
        [sys.executable, str(ROOT / "app.py")], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )

    assert result.returncode != 0
    assert "mailstep:sesDomain" in result.stderr and "mailstep:fromAddress" in result.stderr


def test_every_key_is_documented() -> None:
    docs = (ROOT / "docs" / "configuration.md").read_text()

    for key in KEYS.values():
        assert f"`{PREFIX}{key}`" in docs


def test_cli_strings_are_coerced() -> None:
    config = config_from(
        {"mailstep:dataTtlDays": "30", "mailstep:apiThrottleRate": "12.5", "mailstep:logLevel": "debug"}
    )

    assert (config.data_ttl_days, config.api_throttle_rate, config.log_level) == (30, 12.5, "DEBUG")


def test_mail_settings_come_from_context() -> None:
    config = config_from(
        {
            "mailstep:fromAddress": "Acme <hello@mail.acme.test>",
            "mailstep:replyTo": "help@acme.test",
            "mailstep:postalAddress": "Acme, 1 Road, Town",
            "mailstep:sesDomain": "acme.test",
        }
    )

    assert config.mail_settings() == {
        "default_from": "Acme <hello@mail.acme.test>",
        "default_reply_to": "help@acme.test",
        "postal_address": "Acme, 1 Road, Town",
    }


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("dataTtlDays", 0),
        ("dataTtlDays", 4000),
        ("dataTtlDays", "soon"),
        ("logRetentionDays", 10),
        ("logLevel", "LOUD"),
        ("apiThrottleRate", 0),
        ("apiThrottleRate", -5),
        ("apiThrottleBurst", 0),
        ("fromAddress", "not an address"),
        ("fromAddress", "Acme <hello@acme.test>\r\nBcc: x@y.test"),
        ("replyTo", "help@"),
        ("alarmEmail", "ops"),
        ("sesDomain", "not_a_domain"),
        ("postalAddress", "1 Road\x00"),
        ("replyForwardTo", "me@"),
        ("stackName", "1stack"),
        ("stackName", "my_stack"),
        ("useExistingIdentity", "maybe"),
        ("sesMaxSendRate", 0),
        ("sesMaxSendRate", "fast"),
    ],
)
def test_bad_values_fail_naming_the_key(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=f"context key {PREFIX}{key}"):
        config_from({PREFIX + key: value})


def test_sender_must_be_on_the_ses_domain() -> None:
    with pytest.raises(
        ConfigError, match="fromAddress: 'other.test' is not on mailstep:sesDomain 'acme.test'"
    ):
        config_from({"mailstep:sesDomain": "acme.test", "mailstep:fromAddress": "x@other.test"})


def test_unknown_keys_are_rejected() -> None:
    with pytest.raises(ConfigError, match=r"unknown context keys \['mailstep:dataTTLDays'\]"):
        config_from({"mailstep:dataTTLDays": 30})


def test_a_bad_value_fails_synthesis(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="mailstep:logRetentionDays"):
        build_app(
            {**TEST_CONTEXT, "mailstep:logRetentionDays": 42},
            outdir=str(tmp_path),
        )


def test_existing_identity_needs_the_domain_and_leaves_mail_from_to_the_user() -> None:
    with pytest.raises(ConfigError, match=f"{PREFIX}useExistingIdentity: needs {PREFIX}sesDomain"):
        config_from({f"{PREFIX}useExistingIdentity": True})
    with pytest.raises(ConfigError, match=f"{PREFIX}mailFromSubdomain"):
        config_from(
            {
                f"{PREFIX}useExistingIdentity": "true",
                f"{PREFIX}sesDomain": "mail.example.com",
                f"{PREFIX}mailFromSubdomain": "bounce",
            }
        )
    config = config_from({f"{PREFIX}useExistingIdentity": "true", f"{PREFIX}sesDomain": "mail.example.com"})
    assert config.use_existing_identity is True


def test_reply_forwarding_and_stack_name_come_from_context() -> None:
    config = config_from(
        {f"{PREFIX}replyForwardTo": " me@example.com ", f"{PREFIX}stackName": "MailstepStaging"}
    )
    assert config.reply_forward_to == "me@example.com"
    assert config.stack_name == "MailstepStaging"
    assert config_from({}).stack_name == "Mailstep"
