"""Test support for the reputation guardrail on moto: the local runtime's SES emulation installed
on moto's SES v2 (moto has no PutConfigurationSetSendingOptions and never refuses a send), the
resources with their configuration sets, the target's settings, and the guardrail's alarms and
SES's rate datapoints in moto's CloudWatch."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from moto.cloudwatch.models import cloudwatch_backends
from moto.core import DEFAULT_ACCOUNT_ID
from moto.sesv2.responses import SESV2Response

from local_aws import hooks
from local_aws.provision import LocalResources, provision
from local_aws.ses import LocalSes
from shared.core import specs
from shared.core.aws import client
from shared.core.settings import Settings
from shared.sequences.steps import StepRequest

MARKETING = specs.CONFIGURATION_SET.local_name
TRANSACTIONAL = specs.TRANSACTIONAL_CONFIGURATION_SET.local_name
BOUNCE, COMPLAINT = "Reputation.BounceRate", "Reputation.ComplaintRate"


def install_local_ses(outbox: Path, monkeypatch: pytest.MonkeyPatch) -> LocalSes:
    """The local SES behind moto's SES v2 API until ``monkeypatch`` undoes it."""
    local = LocalSes(outbox, account_id="123456789012", region="us-east-1", publish=lambda t, m: None)
    monkeypatch.setattr(hooks.ACTIVE, "ses", local)
    monkeypatch.setattr(SESV2Response, "send_email", hooks._send_email)
    monkeypatch.setattr(
        SESV2Response, "put_configuration_set_sending_options", hooks._put_sending_options, raising=False
    )
    monkeypatch.setattr(SESV2Response, "get_configuration_set", hooks._get_configuration_set)
    monkeypatch.setattr(
        SESV2Response,
        "create_configuration_set_event_destination",
        hooks._create_event_destination,
        raising=False,
    )
    return local


@contextlib.contextmanager
def messaging_world() -> Iterator[LocalResources]:
    """The tables, queues, topics and both configuration sets, all deleted afterwards."""
    res = provision(api_key="k" * 24, messaging=True)
    try:
        yield res
    finally:
        ddb, sesv2, sm = client("dynamodb"), client("sesv2"), client("secretsmanager")
        for spec in specs.TABLES:
            ddb.delete_table(TableName=spec.local_name)
        for name in res.configuration_sets.values():
            sesv2.delete_configuration_set(ConfigurationSetName=name)
        for name in res.secrets.values():
            sm.delete_secret(SecretId=name, ForceDeleteWithoutRecovery=True)
        # the queues too: moto lives for the session, and a queue created again by name (another
        # test's) would still hold this test's messages
        sqs, sns = client("sqs"), client("sns")
        for queue in res.queues.values():
            sqs.delete_queue(QueueUrl=queue.url)
            sqs.delete_queue(QueueUrl=queue.dlq_url)
        for arn in res.topics.values():
            sns.delete_topic(TopicArn=arn)


def settings_of(res: LocalResources) -> Settings:
    queues = {q.setting: res.queues[q.id].url for q in specs.QUEUES if q.id in res.queues}
    return Settings.model_validate(
        {**res.tables, **res.configuration_sets, **queues, "unsubscribe_secret": "x"}
    )


def guard_alarms(bounce: float = 0.04, complaint: float = 0.0008) -> None:
    """The stack's two alarms on the marketing set's rates (what ``ops.reputation`` reads the
    thresholds from)."""
    cloudwatch = client("cloudwatch")
    for metric, threshold in ((BOUNCE, bounce), (COMPLAINT, complaint)):
        cloudwatch.put_metric_alarm(
            AlarmName=f"guard-{metric}",
            Namespace="AWS/SES",
            MetricName=metric,
            Dimensions=[{"Name": "ses:configuration-set", "Value": MARKETING}],
            Statistic="Maximum",
            Period=900,
            EvaluationPeriods=1,
            Threshold=threshold,
            ComparisonOperator="GreaterThanThreshold",
        )


def publish_rate(metric: str, value: float, configuration_set: str = MARKETING) -> None:
    """A datapoint of SES's reputation metric for the set, now."""
    cloudwatch_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].put_metric_data(
        "AWS/SES",
        [
            {
                "MetricName": metric,
                "Value": value,
                "Dimensions": [{"Name": "ses:configuration-set", "Value": configuration_set}],
            }
        ],
    )


def forget_cloudwatch() -> None:
    """No alarm and no datapoint (moto's CloudWatch lives as long as the session's mock)."""
    backend = cloudwatch_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]
    backend.alarms.clear()
    backend.metric_data.clear()


EXECUTION_ARN_PREFIX = "arn:aws:states:us-east-1:123456789012:execution:Mailstep-seq-onboarding:"


def step_request(email: str, execution: str, template: str = "welcome") -> StepRequest:
    """A one-off ``send`` step of onboarding for ``email`` in execution ``execution``."""
    return StepRequest.model_validate(
        {
            "contract": "sequence.step",
            "version": 1,
            "action": "send",
            "sequence": "onboarding",
            "step": "S1",
            "email": email,
            "execution": f"{EXECUTION_ARN_PREFIX}{execution}",
            "one_off": True,
            "template": template,
        }
    )
