"""API: one HTTP API with a route per ``shared.core.specs.routes()``, access logs, stage
throttling, a tighter throttle of its own on the public sign-up route, and CORS for the
configured sign-up origins."""

from __future__ import annotations

import json

import jsii
from aws_cdk import Acknowledgment, Duration, RemovalPolicy, Validations
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk.aws_apigatewayv2_integrations import HttpLambdaIntegration
from constructs import Construct

from shared.core import specs
from stacks.config import MailstepConfig

# One JSON line per request, in HTTP API access log variables (REST API variables such as
# $context.resourcePath are empty in an HTTP API). The route key ("POST /u/{token}"), never the
# path: paths carry unsubscribe and confirm tokens.
ACCESS_LOG_FIELDS = {
    "requestId": "$context.requestId",
    "requestTime": "$context.requestTime",
    "httpMethod": "$context.httpMethod",
    "routeKey": "$context.routeKey",
    "status": "$context.status",
    "protocol": "$context.protocol",
    "responseLength": "$context.responseLength",
    "ip": "$context.identity.sourceIp",
    "integrationError": "$context.integrationErrorMessage",
}


@jsii.implements(apigwv2.IAccessLogSettings)
class _AccessLogSettings:
    def __init__(self, log_group: logs.ILogGroup) -> None:
        self._destination = apigwv2.LogGroupLogDestination(log_group)

    @property
    def destination(self) -> apigwv2.IAccessLogDestination:
        return self._destination

    @property
    def format(self) -> apigw.AccessLogFormat:
        return apigw.AccessLogFormat.custom(json.dumps(ACCESS_LOG_FIELDS, separators=(",", ":")))


class Api(Construct):
    """Created before the functions (they receive its URL); ``add_routes`` wires them in after."""

    def __init__(self, scope: Construct, construct_id: str, *, config: MailstepConfig) -> None:
        super().__init__(scope, construct_id)
        self.config = config
        self.http_api = apigwv2.HttpApi(
            self,
            "HttpApi",
            api_name=specs.APP_NAME,
            description="mailstep API",
            create_default_stage=False,  # the stage below, with access logs and throttling
            cors_preflight=_cors(config),
        )
        access_logs = logs.LogGroup(
            self, "AccessLogs", retention=config.log_retention, removal_policy=RemovalPolicy.DESTROY
        )
        self.stage = apigwv2.HttpStage(
            self,
            "DefaultStage",
            http_api=self.http_api,
            stage_name="$default",
            auto_deploy=True,
            throttle=apigwv2.ThrottleSettings(
                rate_limit=config.api_throttle_rate, burst_limit=config.api_throttle_burst
            ),
            access_log_settings=_AccessLogSettings(access_logs),
        )

    @property
    def url(self) -> str:
        return self.http_api.api_endpoint

    def add_routes(self, functions: dict[str, lambda_.Function]) -> None:
        integrations: dict[str, HttpLambdaIntegration] = {}
        for route, fn_spec in specs.routes():
            if fn_spec.name not in integrations:
                integrations[fn_spec.name] = HttpLambdaIntegration(
                    f"{fn_spec.name}-integration", functions[fn_spec.name]
                )
            for created in self.http_api.add_routes(
                path=route.path,
                methods=[apigwv2.HttpMethod(route.method)],
                integration=integrations[fn_spec.name],
            ):
                if route == specs.SIGNUP_ROUTE:
                    self._throttle(created)
                Validations.of(created).acknowledge(
                    Acknowledgment(
                        id="AwsSolutions-APIG4",
                        reason=f"{route.method} {route.path} authenticates in the function: a bearer API key "
                        "from Secrets Manager compared in constant time (or a signed token for public "
                        "links). A Lambda authorizer would add an invocation per request for the same check.",
                    )
                )

    def _throttle(self, route: apigwv2.HttpRoute) -> None:
        """The public sign-up route's own throttle (a stage route setting keyed by the route;
        the stage must be created after the route it names)."""
        stage = self.stage.node.default_child
        assert isinstance(stage, apigwv2.CfnStage)
        key = f"{specs.SIGNUP_ROUTE.method} {specs.SIGNUP_ROUTE.path}"
        stage.route_settings = {
            key: {
                "ThrottlingRateLimit": self.config.signup_throttle_rate,
                "ThrottlingBurstLimit": self.config.signup_throttle_burst,
            }
        }
        self.stage.node.add_dependency(route)


def _cors(config: MailstepConfig) -> apigwv2.CorsPreflightOptions | None:
    """CORS for the sign-up origins (a form's page calling POST /v1/signup with fetch); none
    configured: no CORS (a plain HTML form post needs none)."""
    if not config.signup_allowed_origins:
        return None
    return apigwv2.CorsPreflightOptions(
        allow_origins=list(config.signup_allowed_origins),
        allow_methods=[apigwv2.CorsHttpMethod.POST],
        allow_headers=["content-type"],
        max_age=Duration.hours(1),
    )
