"""Engagement: the SES sending identity and the inbound (reply) path.

Spec-driven constructs already build the rest of the engagement pipeline from
``shared.specs``: the configuration set with its event destination (``Sending``), the SES
events topic, ``ENGAGEMENT_QUEUE`` with its dead-letter queue and subscription
(``Messaging``), and the engagement function with its event source mapping (``Functions``).
This construct adds:

- the domain identity (``mailstep:sesDomain``) with Easy DKIM, signing on, mailstep's
  configuration set as its default, and an optional custom MAIL FROM subdomain;
- replies (opt-in, ``inbound_domain``): a bucket for received mail and an SES receipt rule
  set whose rule stores mail for that domain in the bucket and notifies ``INBOUND_TOPIC``
  (consumed by the inbound function, which may read the bucket). SES receives mail only
  through the ACTIVE rule set: activate it once (``aws ses set-active-receipt-rule-set``)
  and point the domain's MX record at ``inbound-smtp.<region>.amazonaws.com``.
"""

from __future__ import annotations

from typing import cast

from aws_cdk import Acknowledgment, CfnResource, Duration, RemovalPolicy, Stack, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_ses as ses
from aws_cdk import aws_ses_actions as ses_actions
from aws_cdk import aws_sns as sns
from constructs import Construct

from shared import specs
from stacks.config import MailstepConfig

INBOUND_PREFIX = "inbound/"
INBOUND_RETENTION = Duration.days(30)


class Engagement(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: MailstepConfig,
        functions: dict[str, lambda_.Function],
        topics: dict[specs.TopicSpec, sns.Topic],
        configuration_sets: dict[specs.ConfigurationSetSpec, ses.ConfigurationSet],
        mail_from_subdomain: str = "",
        inbound_domain: str = "",
    ) -> None:
        super().__init__(scope, construct_id)
        self.identity: ses.EmailIdentity | None = None
        if config.ses_domain:
            mail_from = f"{mail_from_subdomain}.{config.ses_domain}" if mail_from_subdomain else None
            self.identity = ses.EmailIdentity(
                self,
                "DomainIdentity",
                identity=ses.Identity.domain(config.ses_domain),
                dkim_identity=ses.DkimIdentity.easy_dkim(),
                dkim_signing=True,
                configuration_set=configuration_sets[specs.CONFIGURATION_SET],
                mail_from_domain=mail_from,
                mail_from_behavior_on_mx_failure=ses.MailFromBehaviorOnMxFailure.USE_DEFAULT_VALUE
                if mail_from
                else None,
            )
        self.inbound_bucket: s3.Bucket | None = None
        self.receipt_rules: ses.ReceiptRuleSet | None = None
        if inbound_domain:
            self._inbound(inbound_domain, functions[specs.INBOUND_FUNCTION.name], topics[specs.INBOUND_TOPIC])

    def _inbound(self, domain: str, fn: lambda_.Function, topic: sns.Topic) -> None:
        bucket = s3.Bucket(
            self,
            "InboundMail",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            lifecycle_rules=[s3.LifecycleRule(expiration=INBOUND_RETENTION)],
            removal_policy=RemovalPolicy.RETAIN,
        )
        Validations.of(bucket).acknowledge(
            Acknowledgment(
                id="AwsSolutions-S1",
                reason="Only SES writes received replies here and only the inbound function reads them; "
                "objects expire after 30 days. Access logs would record subscribers' mail metadata twice.",
            )
        )
        self.receipt_rules = ses.ReceiptRuleSet(
            self,
            "ReceiptRules",
            rules=[
                ses.ReceiptRuleOptions(
                    recipients=[domain],
                    scan_enabled=True,
                    tls_policy=ses.TlsPolicy.REQUIRE,
                    actions=[ses_actions.S3(bucket=bucket, object_key_prefix=INBOUND_PREFIX, topic=topic)],
                )
            ],
        )
        # GetObject on received mail only (no List, no other prefixes).
        fn.add_to_role_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject"], resources=[bucket.arn_for_objects(f"{INBOUND_PREFIX}*")]
            )
        )
        bucket_id = Stack.of(self).get_logical_id(cast(CfnResource, bucket.node.default_child))
        if fn.role is not None:
            Validations.of(fn.role).acknowledge(
                Acknowledgment(
                    id=f"AwsSolutions-IAM5[Resource::<{bucket_id}.Arn>/{INBOUND_PREFIX}*]",
                    reason="Reads the received replies SES stores under the inbound/ prefix; object keys "
                    "are SES message ids, unknown until mail arrives.",
                )
            )
        self.inbound_bucket = bucket
