"""Engagement: the SES sending identity and the inbound (reply) path.

Spec-driven constructs already build the rest of the engagement pipeline from
``shared.core.specs``: the configuration set with its event destination (``Sending``), the SES
events topic, ``ENGAGEMENT_QUEUE`` with its dead-letter queue and subscription
(``Messaging``), and the engagement function with its event source mapping (``Functions``).
This construct adds:

- the domain identity (``mailstep:sesDomain``) with Easy DKIM, signing on, mailstep's
  configuration set as its default, and an optional custom MAIL FROM subdomain; its three
  DKIM CNAME records are stack outputs (``DkimRecord<n>Name`` / ``DkimRecord<n>Value``) to
  publish in DNS. With ``mailstep:useExistingIdentity`` the stack leaves an identity the
  account already has alone (it would fail to create it again);
- replies (opt-in, ``inbound_domain``): a bucket for received mail and an SES receipt rule
  set whose rule stores mail for that domain in the bucket and notifies ``INBOUND_TOPIC``
  (consumed by the inbound function, which may read the bucket). The bucket policy lets SES
  put objects and the topic policy lets SES publish, both only for this account's receipt
  rule set. SES receives mail only
  through the ACTIVE rule set: activate it once (``aws ses set-active-receipt-rule-set``; it
  replaces the region's active rule set, docs/engagement.md) and point the domain's MX record at
  ``inbound-smtp.<region>.amazonaws.com``;
- with replies on, a CloudFormation rule that stops the deploy in a region where SES does not
  receive email (``SES_RECEIVING_REGIONS``), and the reply domain's own SES identity (Easy DKIM;
  its CNAME records are stack outputs ``InboundDkimRecord<n>Name`` / ``Value``) when it is not the
  sending domain and the stack owns identities (not ``mailstep:useExistingIdentity``).
"""

from __future__ import annotations

from typing import cast

from aws_cdk import (
    Acknowledgment,
    Aws,
    CfnOutput,
    CfnResource,
    CfnRule,
    CfnRuleAssertion,
    Duration,
    Fn,
    RemovalPolicy,
    Stack,
    Validations,
)
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_ses as ses
from aws_cdk import aws_ses_actions as ses_actions
from aws_cdk import aws_sns as sns
from constructs import Construct

from shared.core import specs
from stacks.config import MailstepConfig
from stacks.constructs.functions import Functions
from stacks.constructs.resources import allow_publish_from

INBOUND_PREFIX = "inbound/"
INBOUND_RETENTION = Duration.days(30)
DKIM_RECORDS = 3  # Easy DKIM: three CNAME records
# The regions where SES receives email: the "Email Receiving endpoints" table of "Amazon Simple
# Email Service endpoints and quotas" (AWS General Reference,
# https://docs.aws.amazon.com/general/latest/gr/ses.html#ses_inbound_endpoints, linked from the SES
# Developer Guide's "Regions and Amazon SES"), as that table read in January 2024. AWS adds
# receiving regions over time: when it lists yours, add it here (docs/engagement.md).
SES_RECEIVING_REGIONS = (
    "us-east-1",
    "us-east-2",
    "us-west-2",
    "ca-central-1",
    "eu-west-1",
    "eu-west-2",
    "eu-central-1",
    "ap-northeast-1",
    "ap-southeast-1",
    "ap-southeast-2",
    "ap-southeast-3",
)
RECEIVING_REGION_RULE = "SesReceivingRegion"  # the template's Rules entry


def inbound_dkim_output_keys(index: int) -> tuple[str, str]:
    """Stack output keys of the reply domain's ``index``-th (1-based) DKIM CNAME record."""
    return f"InboundDkimRecord{index}Name", f"InboundDkimRecord{index}Value"


def dkim_output_keys(index: int) -> tuple[str, str]:
    """Stack output keys of the ``index``-th (1-based) DKIM CNAME record: (name, value)."""
    return f"DkimRecord{index}Name", f"DkimRecord{index}Value"


class Engagement(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: MailstepConfig,
        functions: Functions,
        topics: dict[specs.TopicSpec, sns.Topic],
        configuration_sets: dict[specs.ConfigurationSetSpec, ses.ConfigurationSet],
        mail_from_subdomain: str = "",
        inbound_domain: str = "",
    ) -> None:
        super().__init__(scope, construct_id)
        self.identity: ses.EmailIdentity | None = None
        if config.ses_domain and not config.use_existing_identity:
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
            records = self.identity.dkim_records
            for index, record in enumerate(records[:DKIM_RECORDS], start=1):
                name_key, value_key = dkim_output_keys(index)
                stack = Stack.of(self)
                CfnOutput(stack, name_key, value=record.name, description=f"DKIM CNAME record {index}: name")
                CfnOutput(
                    stack, value_key, value=record.value, description=f"DKIM CNAME record {index}: value"
                )
        self.inbound_bucket: s3.Bucket | None = None
        self.receipt_rules: ses.ReceiptRuleSet | None = None
        self.inbound_identity: ses.EmailIdentity | None = None
        if inbound_domain:
            self._receiving_region_rule()
            if inbound_domain != config.ses_domain and not config.use_existing_identity:
                self.inbound_identity = self._inbound_identity(inbound_domain)
            self._inbound(inbound_domain, functions, topics[specs.INBOUND_TOPIC])

    def _receiving_region_rule(self) -> None:
        """Stop the deploy (before any resource is made) in a region where SES does not receive
        email: the receipt rule set would be created and never receive anything."""
        regions = ", ".join(SES_RECEIVING_REGIONS)
        CfnRule(
            Stack.of(self),
            RECEIVING_REGION_RULE,
            assertions=[
                CfnRuleAssertion(
                    assert_=Fn.condition_contains(list(SES_RECEIVING_REGIONS), Aws.REGION),
                    assert_description="mailstep:inboundDomain (replies) needs SES email receiving, "
                    f"which this region does not have; deploy to one of: {regions} (or leave "
                    "mailstep:inboundDomain unset). See docs/engagement.md.",
                )
            ],
        )

    def _inbound_identity(self, domain: str) -> ses.EmailIdentity:
        """SES receives mail only for a verified domain: the reply domain's identity (Easy DKIM:
        publishing its three CNAME records verifies it), when it is not the sending domain."""
        identity = ses.EmailIdentity(
            self,
            "InboundIdentity",
            identity=ses.Identity.domain(domain),
            dkim_identity=ses.DkimIdentity.easy_dkim(),
        )
        stack = Stack.of(self)
        for index, record in enumerate(identity.dkim_records[:DKIM_RECORDS], start=1):
            name_key, value_key = inbound_dkim_output_keys(index)
            CfnOutput(
                stack, name_key, value=record.name, description=f"reply domain DKIM CNAME {index}: name"
            )
            CfnOutput(
                stack, value_key, value=record.value, description=f"reply domain DKIM CNAME {index}: value"
            )
        return identity

    def _inbound(self, domain: str, functions: Functions, topic: sns.Topic) -> None:
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
        stack = Stack.of(self)
        rule_arns = stack.format_arn(
            service="ses",
            resource="receipt-rule-set",
            resource_name=f"{self.receipt_rules.receipt_rule_set_name}:receipt-rule/*",
        )
        # SES may publish for this rule set only.
        allow_publish_from(topic, "AllowSesReceiptRules", "ses.amazonaws.com", rule_arns)
        # SES checks that it may publish to the topic when the rule is created: the rule waits
        # for the topic policy (as CDK's S3 action makes it wait for the bucket policy).
        policy = topic.node.try_find_child("Policy")
        assert policy is not None, "the inbound topic's resource policy was not created"
        for rule in self.receipt_rules.node.children:
            if isinstance(rule, ses.ReceiptRule):
                rule.node.add_dependency(policy)
        # Objects only: GetObject on received mail (no List, no other prefixes).
        bucket_id = stack.get_logical_id(cast(CfnResource, bucket.node.default_child))
        functions.grant(
            specs.INBOUND_OBJECTS,
            [bucket.arn_for_objects(f"{INBOUND_PREFIX}*")],
            nag_reason="Reads the received replies SES stores under the inbound/ prefix; object keys "
            "are SES message ids, unknown until mail arrives.",
            nag_resource=f"<{bucket_id}.Arn>/{INBOUND_PREFIX}*",
        )
        self.inbound_bucket = bucket
