"""The mailstep stack: one stack composed of one construct per capability, all driven by
``shared.core.specs``; and ``build_app()``, which ``app.py`` and the infra tests share."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, cast

from aws_cdk import App, CfnOutput, CfnResource, Stack, Tags, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_stepfunctions as sfn
from cdk_nag import AwsSolutionsChecks
from constructs import Construct

from shared.core import specs
from stacks.config import MailstepConfig
from stacks.constructs.alarms import Alarms
from stacks.constructs.api import Api
from stacks.constructs.broadcasts import Broadcasts
from stacks.constructs.engagement import Engagement
from stacks.constructs.functions import Functions
from stacks.constructs.hygiene import Hygiene
from stacks.constructs.messaging import Messaging
from stacks.constructs.resources import Resources
from stacks.constructs.secrets import Secrets
from stacks.constructs.sending import Sending
from stacks.constructs.sequences import CallbackSchedules, Sequences, state_machine_arn_prefix
from stacks.constructs.storage import Storage

PROJECT_ROOT = Path(__file__).resolve().parents[1]
# Context that synthesizes without bundling the Lambda code (no pip, no network): tests.
SKIP_BUNDLING = {"aws:cdk:bundling-stacks": []}
# The tests' synthesis: no bundling, for the local runtime (no sending identity required).
TEST_CONTEXT = {**SKIP_BUNDLING, **specs.LOCAL_SYNTH_CONTEXT}


class MailstepStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, *, config: MailstepConfig, **kwargs: Any) -> None:
        super().__init__(
            scope, construct_id, description="mailstep: self-hosted email sequences and broadcasts", **kwargs
        )
        storage = Storage(self, "Storage", config=config)
        secrets = Secrets(self, "Secrets")
        messaging = Messaging(self, "Messaging")
        sending = Sending(self, "Sending", topics=messaging.topics, config=config)
        resources = Resources(
            tables=storage.tables,
            secrets=secrets.secrets,
            queues=messaging.queues,
            topics=messaging.topics,
            configuration_sets=sending.configuration_sets,
            failure_queues=messaging.failure_queues,
        )
        api = Api(self, "Api", config=config)
        settings = {**config.mail_settings(), "public_base_url": api.url, **resources.settings()}
        settings["state_machine_arn_prefix"] = state_machine_arn_prefix(self)
        schedules = CallbackSchedules(self, "CallbackSchedules")
        settings["sequence_schedule_group"] = schedules.group_name
        settings["sequence_scheduler_role_arn"] = schedules.role.role_arn
        if config.reply_forward_to:
            settings["reply_forward_to"] = config.reply_forward_to
        settings["warmup_schedule"] = config.warmup_schedule()  # docs/sending.md, "Warm-up"
        settings |= config.signup_settings()  # only the sign-up keys the deployment sets
        settings |= config.set_settings(specs.HYGIENE_SETTINGS)
        settings |= config.set_settings(specs.SUNSET_SETTINGS)
        if config.local:  # the local runtime's receivers may be http on loopback (docs/webhooks.md)
            settings["webhook_allow_loopback_http"] = "true"
        functions = Functions(
            self,
            "Functions",
            resources=resources,
            settings=settings,
            sending=sending,
            config=config,
            state_machine_prefix=specs.state_machine_prefix(self.stack_name),
        )
        api.add_routes(functions.functions)
        sequences = Sequences(
            self,
            "Sequences",
            step_function=functions.functions[specs.SEQUENCE_STEP_FUNCTION.name],
            cleanup_function=functions.functions[specs.SEQUENCE_CLEANUP_FUNCTION.name],
            cleanup_dead_letters=messaging.failure_queues[specs.SEQUENCE_CLEANUP_FAILURES],
            log_retention=config.log_retention,
        )
        Engagement(
            self,
            "Engagement",
            config=config,
            functions=functions,
            topics=messaging.topics,
            configuration_sets=sending.configuration_sets,
            mail_from_subdomain=config.mail_from_subdomain,
            inbound_domain=config.inbound_domain,
        )
        Hygiene(
            self,
            "Hygiene",
            function=functions.functions[specs.HYGIENE_FUNCTION.name],
            dead_letters=messaging.failure_queues[specs.HYGIENE_FAILURES],
        )
        alarms = Alarms(
            self,
            "Alarms",
            config=config,
            dead_letter_queues=messaging.dead_letter_queues,
            failure_queues=messaging.failure_queues,
        )
        alarms.watch_state_machines(sequences.state_machines)
        alarms.guard_reputation(  # docs/reputation.md
            sending.configuration_sets[specs.PAUSABLE_CONFIGURATION_SET],
            messaging.topics[specs.REPUTATION_TOPIC],
            bounce_rate=config.reputation_bounce_percent / 100,
            complaint_rate=config.reputation_complaint_percent / 100,
        )
        broadcasts = Broadcasts(
            self,
            "Broadcasts",
            queues=messaging.queues,
            dead_letter_queues=messaging.dead_letter_queues,
            log_retention=config.log_retention,
        )
        settings["broadcast_schedule_arn"] = broadcasts.schedule.state_machine_arn
        # Every granted resource is bound to its ARN; the inbound bucket exists only with replies on.
        unbound = set(functions.unbound()) - ({specs.INBOUND_OBJECTS} if not config.inbound_domain else set())
        if unbound:
            raise ValueError(f"granted resources with no ARN in the stack: {sorted(unbound)}")

        _depend_on_role_policies_only(self)
        CfnOutput(self, specs.API_URL_OUTPUT, value=api.url, description="Base URL of the mailstep HTTP API")
        for key, setting in specs.stack_outputs().items():
            CfnOutput(self, key, value=settings[setting], description=f"settings field {setting}")


def _depend_on_role_policies_only(stack: Stack) -> None:
    """A function or state machine must wait for its role's policy (CloudFormation cannot see that
    it needs it); CDK also lists the role, which its GetAtt already orders (cfn-lint W3005). Each
    one's DependsOn becomes its role's DefaultPolicy alone."""
    for construct in stack.node.find_all():
        if not isinstance(construct, lambda_.Function | sfn.StateMachine):
            continue
        role = construct.role
        policy = role.node.try_find_child("DefaultPolicy") if role is not None else None
        resource = construct.node.default_child
        if isinstance(policy, iam.Policy) and isinstance(resource, CfnResource):
            resource.add_override(
                "DependsOn", [stack.get_logical_id(cast(CfnResource, policy.node.default_child))]
            )


def cdk_json_context(root: Path = PROJECT_ROOT) -> dict[str, Any]:
    """The context defaults in cdk.json (the CDK CLI passes them itself; ``python app.py`` does not)."""
    return dict(json.loads((root / "cdk.json").read_text())["context"])


def build_app(context: dict[str, Any] | None = None, outdir: str | None = None) -> tuple[App, MailstepStack]:
    """The app with its one stack and the cdk-nag AwsSolutions checks (findings fail synthesis).

    Context precedence: ``context`` argument > CDK CLI (``-c``, cdk.json) > cdk.json defaults.
    """
    if outdir is None and "CDK_OUTDIR" not in os.environ:
        outdir = str(PROJECT_ROOT / "cdk.out")
    app = App(context={**cdk_json_context(), **(context or {})}, outdir=outdir)
    for key, value in (context or {}).items():
        app.node.set_context(key, value)
    config = MailstepConfig.from_context(app.node)
    stack = MailstepStack(app, config.stack_name, config=config)
    Tags.of(stack).add("app", specs.APP_NAME)
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app, stack
