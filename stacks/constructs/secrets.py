"""Secrets: generated credentials described by ``shared.core.specs.SECRETS`` (the API key)."""

from __future__ import annotations

from aws_cdk import Acknowledgment, Validations
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from shared.core import specs
from stacks.constructs.resources import pin_logical_id

SECRET_LENGTH = 40


class Secrets(Construct):
    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.secrets = {spec: self._secret(spec) for spec in specs.SECRETS}  # by spec, for the grants

    def _secret(self, spec: specs.SecretSpec) -> secretsmanager.Secret:
        secret = secretsmanager.Secret(
            self,
            spec.id,
            description=f"mailstep: {spec.description}",
            generate_secret_string=secretsmanager.SecretStringGenerator(
                exclude_punctuation=True, password_length=SECRET_LENGTH
            ),
        )
        pin_logical_id(secret, spec.id)
        Validations.of(secret).acknowledge(
            Acknowledgment(
                id="AwsSolutions-SMG4",  # cdk-nag: a secret without scheduled rotation
                reason="Rotating a mailstep secret invalidates what was issued with it: the API key held "
                "by the operator's app, or unsubscribe links already in recipients' inboxes. Rotation is a "
                "deliberate manual step (docs/deploy.md), not a scheduled rotation Lambda.",
            )
        )
        return secret
