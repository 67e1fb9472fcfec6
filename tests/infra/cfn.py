"""Synthesis and CloudFormation template helpers for the infra tests."""

from __future__ import annotations

import os

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aws_cdk import App
from aws_cdk.assertions import Template

from stacks.mailstep_stack import TEST_CONTEXT, MailstepStack, build_app


@dataclass(frozen=True)
class Synth:
    app: App
    stack: MailstepStack
    template: Template
    outdir: Path
    seconds: float

    @property
    def json(self) -> dict[str, Any]:
        return self.template.to_json()

    def resources(self, cfn_type: str) -> dict[str, dict[str, Any]]:
        return {k: r for k, r in self.json["Resources"].items() if r["Type"] == cfn_type}


def synthesize(outdir: Path, context: dict[str, Any] | None = None) -> Synth:
    started = time.perf_counter()
    app, stack = build_app({**TEST_CONTEXT, **(context or {})}, outdir=str(outdir))
    app.synth()
    template = Template.from_stack(stack)
    return Synth(app, stack, template, outdir, time.perf_counter() - started)


def ref(logical_id: str) -> dict[str, str]:
    return {"Ref": logical_id}


def arn(logical_id: str) -> dict[str, list[str]]:
    return {"Fn::GetAtt": [logical_id, "Arn"]}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def function_by_handler(synth: Synth, handler: str) -> tuple[str, dict[str, Any]]:
    found = [
        (k, r)
        for k, r in synth.resources("AWS::Lambda::Function").items()
        if r["Properties"]["Handler"] == handler
    ]
    assert len(found) == 1, f"expected one function with handler {handler}, found {len(found)}"
    return found[0]


def role_statements(synth: Synth, function_id: str) -> list[dict[str, Any]]:
    """Every IAM statement granted to a function's role (inline policies and attached policies)."""
    role_id = synth.json["Resources"][function_id]["Properties"]["Role"]["Fn::GetAtt"][0]
    role = synth.json["Resources"][role_id]["Properties"]
    statements = [s for p in role.get("Policies", []) for s in p["PolicyDocument"]["Statement"]]
    for policy in synth.resources("AWS::IAM::Policy").values():
        if ref(role_id) in policy["Properties"].get("Roles", []):
            statements += policy["Properties"]["PolicyDocument"]["Statement"]
    return statements


def statements_for(statements: list[dict[str, Any]], service: str) -> list[dict[str, Any]]:
    return [s for s in statements if any(a.startswith(service + ":") for a in as_list(s["Action"]))]


def route_target_function(synth: Synth, route_key: str) -> str:
    """Logical id of the function behind an HTTP API route (via its Lambda proxy integration)."""
    routes = [
        r
        for r in synth.resources("AWS::ApiGatewayV2::Route").values()
        if r["Properties"]["RouteKey"] == route_key
    ]
    assert len(routes) == 1, f"expected one route {route_key!r}, found {len(routes)}"
    target = routes[0]["Properties"]["Target"]
    integration_id = target["Fn::Join"][1][1]["Ref"]
    integration = synth.json["Resources"][integration_id]["Properties"]
    assert integration["IntegrationType"] == "AWS_PROXY"
    assert integration["PayloadFormatVersion"] == "2.0"
    return str(integration["IntegrationUri"]["Fn::GetAtt"][0])


def dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True)
