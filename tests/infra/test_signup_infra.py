"""The public sign-up in the template: its routes reach the signup function, the sign-up
route has its own (tighter) throttle, CORS follows the configured origins, the function gets
the sign-up settings, and topics.yaml is part of the code asset's fingerprint."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.core import specs
from stacks.constructs.functions import _source_files
from tests.infra.cfn import Synth, function_by_handler, synthesize

HANDLER = "functions.signup.handler.handler"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def configured(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    return synthesize(
        tmp_path_factory.mktemp("cdk.out.signup"),
        {
            "mailstep:signupAllowedOrigins": "https://www.acme.test, https://acme.test:8443",
            "mailstep:signupThrottleRate": "2",
            "mailstep:signupThrottleBurst": "4",
            "mailstep:signupPendingDays": "3",
            "mailstep:signupDomainCapPerHour": "250",
            "mailstep:signupDomainHeldPerHour": "40",
            "mailstep:signupSourceCapPerHour": "30",
            "mailstep:signupSingleOptInForms": ["app"],
        },
    )


def _stage(synth: Synth) -> dict:
    (stage,) = synth.resources("AWS::ApiGatewayV2::Stage").values()
    return stage


def test_the_signup_routes_reach_the_signup_function(synth: Synth) -> None:
    logical_id, _ = function_by_handler(synth, HANDLER)
    routes = {r["Properties"]["RouteKey"]: r for r in synth.resources("AWS::ApiGatewayV2::Route").values()}
    integrations = synth.resources("AWS::ApiGatewayV2::Integration")
    for key in ("POST /v1/signup", "GET /c/{token}", "POST /c/{token}", "POST /u/{token}/preferences"):
        assert key in routes, key
        assert routes[key]["Properties"].get("AuthorizationType", "NONE") == "NONE"
    target = routes["POST /v1/signup"]["Properties"]["Target"]["Fn::Join"][1][1]["Ref"]
    assert logical_id in str(integrations[target]["Properties"]["IntegrationUri"])


def test_the_signup_route_has_its_own_throttle_and_the_stage_follows_the_route(synth: Synth) -> None:
    stage = _stage(synth)
    assert stage["Properties"]["RouteSettings"] == {
        "POST /v1/signup": {"ThrottlingRateLimit": 5, "ThrottlingBurstLimit": 10}
    }
    assert stage["Properties"]["DefaultRouteSettings"] == {
        "ThrottlingBurstLimit": 100,
        "ThrottlingRateLimit": 50,
    }
    assert any("POSTv1signup" in d for d in stage["DependsOn"])  # a route setting needs its route


def test_no_cors_without_origins(synth: Synth) -> None:
    (api,) = synth.resources("AWS::ApiGatewayV2::Api").values()
    assert "CorsConfiguration" not in api["Properties"]


def test_configured_origins_throttle_and_settings_reach_the_template(configured: Synth) -> None:
    (api,) = configured.resources("AWS::ApiGatewayV2::Api").values()
    assert api["Properties"]["CorsConfiguration"] == {
        "AllowHeaders": ["content-type"],
        "AllowMethods": ["POST"],
        "AllowOrigins": ["https://www.acme.test", "https://acme.test:8443"],
        "MaxAge": 3600,
    }
    assert _stage(configured)["Properties"]["RouteSettings"]["POST /v1/signup"] == {
        "ThrottlingRateLimit": 2,
        "ThrottlingBurstLimit": 4,
    }
    signup_id, fn = function_by_handler(configured, HANDLER)
    env = fn["Properties"]["Environment"]["Variables"]
    assert env["SIGNUP_ALLOWED_ORIGINS"] == "https://www.acme.test,https://acme.test:8443"
    assert env["SIGNUP_PENDING_DAYS"] == "3" and env["SIGNUP_SINGLE_OPT_IN_FORMS"] == "app"
    assert env["SIGNUP_DOMAIN_CAP_PER_HOUR"] == "250"
    assert env["SIGNUP_DOMAIN_HELD_PER_HOUR"] == "40"
    assert env["SIGNUP_SOURCE_CAP_PER_HOUR"] == "30"
    assert env["SIGNUP_DOUBLE_OPT_IN"] == "true"
    # only the sign-up function gets the sign-up settings
    for logical_id, other in configured.resources("AWS::Lambda::Function").items():
        if logical_id != signup_id:
            variables = other["Properties"].get("Environment", {}).get("Variables", {})
            assert not [k for k in variables if k.startswith("SIGNUP_")], logical_id


def test_topics_yaml_is_shipped_in_the_asset() -> None:
    assert "topics.yaml" in specs.LAMBDA_SOURCE_FILES
    assert ROOT / "topics.yaml" in _source_files(ROOT)


@pytest.mark.parametrize("outcome", ["held", "domain_full"])
def test_held_and_refused_sign_ups_alarm_to_the_alarm_topic(synth: Synth, outcome: str) -> None:
    from shared.consent.signup import SIGNUP_METRICS

    metric = SIGNUP_METRICS[outcome]
    alarms = synth.resources("AWS::CloudWatch::Alarm")
    [props] = [a["Properties"] for a in alarms.values() if a["Properties"].get("MetricName") == metric]
    assert (props["Namespace"], props["Statistic"], props["Period"]) == ("Mailstep", "Sum", 300)
    assert props["Dimensions"] == [{"Name": "service", "Value": "mailstep"}]
    assert props["Threshold"] == 0 and props["ComparisonOperator"] == "GreaterThanThreshold"
    assert props["TreatMissingData"] == "notBreaching"
    assert len(props["AlarmActions"]) == 1 and "AlarmTopic" in str(props["AlarmActions"][0])
    assert "mailstep signups held" in props["AlarmDescription"]


def test_the_local_template_lifts_the_per_client_limit_and_a_deployment_keeps_the_default(
    synth: Synth,
) -> None:
    """Every request reaches the local runtime from 127.0.0.1 (specs.LOCAL_SYNTH_CONTEXT)."""
    _, function = function_by_handler(synth, HANDLER)
    env = function["Properties"]["Environment"]["Variables"]
    assert env["SIGNUP_SOURCE_CAP_PER_HOUR"] == "1000000"
    from stacks.config import MailstepConfig

    deployed = MailstepConfig.parse(
        {"ses_domain": "acme.test", "from_address": "News <news@acme.test>"}
    ).signup_settings()
    assert "signup_source_cap_per_hour" not in deployed  # a deployment: Settings' default
    from shared.core.settings import Settings

    assert Settings(table_name="t").signup_source_cap_per_hour == 100
