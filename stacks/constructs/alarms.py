"""Alarms: deliverability and stuck work, to one SNS topic (``mailstep:alarmEmail``).

- SES reputation (account level, ``AWS/SES``): ``Reputation.BounceRate`` above 5 % and
  ``Reputation.ComplaintRate`` above 0.1 % (SES reviews accounts from 5 % / 0.1 %).
- Every dead-letter queue: any message visible (a record failed ``maxReceiveCount`` times).
- Every failure queue (``shared.core.specs.FAILURE_QUEUES``): any message visible (a stream batch
  skipped after its retries, an event a rule could not deliver, an asynchronous invocation that
  failed after Lambda's retries; docs/operations.md, "What could not be processed").
- The reputation guardrail (docs/reputation.md, :meth:`Alarms.guard_reputation`): the marketing
  configuration set's own ``Reputation.BounceRate`` / ``Reputation.ComplaintRate`` (dimension
  ``ses:configuration-set``) above ``mailstep:reputationBounceRatePercent`` /
  ``reputationComplaintRatePercent``, to the alarm topic AND the reputation topic, whose
  function pauses the set.
- Sign-ups a recipient domain's hourly cap held or refused with "try again" (``SignupsHeld``,
  ``SignupsDeferred`` of the sign-up function, docs/signup.md): any in five minutes.
- Failed sequence executions: the sequence step function's ``fail`` action (every Catch
  of every generated state machine ends there), and per state machine ``ExecutionsFailed``
  + ``ExecutionsTimedOut`` once :meth:`Alarms.watch_state_machines` is given them.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import ArnFormat, Duration, Stack
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_ses as ses
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from shared.core import specs
from shared.core.observability import NAMESPACE, SERVICE
from stacks.config import MailstepConfig
from stacks.constructs.messaging import dead_letter_id
from stacks.constructs.resources import allow_publish_from

BOUNCE_RATE_THRESHOLD = 0.05
COMPLAINT_RATE_THRESHOLD = 0.001
REPUTATION_PERIOD = Duration.hours(1)
# The guardrail looks at the highest value of each 15-minute period of the set's metrics: one
# period above the threshold pauses (no metric math; SES computes the rates).
GUARD_PERIOD = Duration.minutes(15)
SET_DIMENSION = "ses:configuration-set"
WORK_PERIOD = Duration.minutes(5)
SEQUENCE_FAIL_METRIC = "SequenceStep_fail"  # functions/sequence_step: SequenceStep_<action>
# The sign-up function's metrics of sign-ups a recipient domain's hourly cap held (mailed late) or
# refused with "try again" (shared.consent.signup.SIGNUP_METRICS; docs/signup.md).
SIGNUP_LIMIT_ALARMS = {
    "SignupsHeld": "Sign-ups of a recipient domain over its hourly cap were held (mailed 15 minutes late): "
    "a flood or a busy domain; see `mailstep signups held`, release with `mailstep signups release DOMAIN`",
    "SignupsDeferred": "Sign-ups of a recipient domain were refused with 'try again after the hour' (its cap "
    "and held budget spent): see `mailstep signups held`; raise mailstep:signupDomainCapPerHour if genuine",
}


def _pascal(name: str) -> str:
    return "".join(part.capitalize() for part in name.replace(".", "-").replace("_", "-").split("-"))


class Alarms(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: MailstepConfig,
        dead_letter_queues: Mapping[specs.QueueSpec, sqs.IQueue],
        failure_queues: Mapping[specs.FailureQueueSpec, sqs.IQueue],
    ) -> None:
        super().__init__(scope, construct_id)
        self.topic = sns.Topic(self, "AlarmTopic", display_name="mailstep alarms", enforce_ssl=True)
        self.allow_cloudwatch(self.topic)
        if config.alarm_email:
            self.topic.add_subscription(subscriptions.EmailSubscription(config.alarm_email))
        self.action = cw_actions.SnsAction(self.topic)
        self.alarms: dict[str, cw.Alarm] = {}
        self._add(
            "BounceRate",
            cw.Metric(
                namespace="AWS/SES",
                metric_name="Reputation.BounceRate",
                statistic="Maximum",
                period=REPUTATION_PERIOD,
            ),
            BOUNCE_RATE_THRESHOLD,
            "SES bounce rate above 5 %: find the source with `mailstep stats` before SES pauses sending",
        )
        self._add(
            "ComplaintRate",
            cw.Metric(
                namespace="AWS/SES",
                metric_name="Reputation.ComplaintRate",
                statistic="Maximum",
                period=REPUTATION_PERIOD,
            ),
            COMPLAINT_RATE_THRESHOLD,
            "SES complaint rate above 0.1 %: check consent and unsubscribe links before SES pauses sending",
        )
        for spec, dlq in dead_letter_queues.items():
            self._add(
                dead_letter_id(spec),
                dlq.metric_approximate_number_of_messages_visible(period=WORK_PERIOD, statistic="Maximum"),
                0,
                f"{spec.id} dead letters: records failed {spec.max_receives} times; inspect, fix, redrive",
            )
        for failure_spec, queue in failure_queues.items():
            self._add(
                failure_spec.id,
                queue.metric_approximate_number_of_messages_visible(period=WORK_PERIOD, statistic="Maximum"),
                0,
                f"{failure_spec.id}: {failure_spec.holds}",
            )
        self._add(
            "SequenceFailures",
            cw.Metric(
                namespace=NAMESPACE,
                metric_name=SEQUENCE_FAIL_METRIC,
                dimensions_map={"service": SERVICE},
                statistic="Sum",
                period=WORK_PERIOD,
            ),
            0,
            "A sequence execution failed (its fail step ran): see the subscriber's sequence_failed event",
        )
        for metric_name, description in SIGNUP_LIMIT_ALARMS.items():
            self._add(
                metric_name,
                cw.Metric(
                    namespace=NAMESPACE,
                    metric_name=metric_name,
                    dimensions_map={"service": SERVICE},
                    statistic="Sum",
                    period=WORK_PERIOD,
                ),
                0,
                description,
            )

    @staticmethod
    def allow_cloudwatch(topic: sns.ITopic) -> None:
        """CloudWatch may publish to the topic for this account's alarms only."""
        alarms = Stack.of(topic).format_arn(
            service="cloudwatch",
            resource="alarm",
            resource_name="*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        allow_publish_from(topic, "AllowCloudWatchAlarms", "cloudwatch.amazonaws.com", alarms)

    def guard_reputation(
        self,
        configuration_set: ses.IConfigurationSet,
        topic: sns.ITopic,
        *,
        bounce_rate: float,
        complaint_rate: float,
    ) -> None:
        """Alarms on the marketing set's reputation metrics that notify the operator and the
        reputation-guard function (``topic``), which pauses the set (docs/reputation.md)."""
        self.allow_cloudwatch(topic)
        name = configuration_set.configuration_set_name
        for key, metric_name, threshold, what in (
            ("Bounce", "Reputation.BounceRate", bounce_rate, "bounce"),
            ("Complaint", "Reputation.ComplaintRate", complaint_rate, "complaint"),
        ):
            alarm = self._add(
                f"MarketingReputation{key}",
                cw.Metric(
                    namespace="AWS/SES",
                    metric_name=metric_name,
                    dimensions_map={SET_DIMENSION: name},
                    statistic="Maximum",
                    period=GUARD_PERIOD,
                ),
                threshold,
                f"Marketing {what} rate above {threshold:.4%}: marketing sending is paused "
                "(transactional mail goes on); see `mailstep reputation status`",
            )
            alarm.add_alarm_action(cw_actions.SnsAction(topic))

    def _add(self, name: str, metric: cw.IMetric, threshold: float, description: str) -> cw.Alarm:
        alarm = cw.Alarm(
            self,
            f"{name}Alarm",
            metric=metric,
            threshold=threshold,
            evaluation_periods=1,
            comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
            treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            alarm_description=description,
        )
        alarm.add_alarm_action(self.action)
        self.alarms[name] = alarm
        return alarm

    def watch_state_machines(self, machines: Mapping[str, sfn.CfnStateMachine]) -> None:
        """One alarm per sequence machine: ExecutionsFailed + ExecutionsTimedOut above 0."""
        for sequence_id, machine in machines.items():
            metrics: dict[str, cw.IMetric] = {
                key: cw.Metric(
                    namespace="AWS/States",
                    metric_name=metric_name,
                    dimensions_map={"StateMachineArn": machine.attr_arn},
                    statistic="Sum",
                    period=WORK_PERIOD,
                )
                for key, metric_name in (("failed", "ExecutionsFailed"), ("timedOut", "ExecutionsTimedOut"))
            }
            total = cw.MathExpression(
                expression="failed + timedOut", using_metrics=metrics, period=WORK_PERIOD
            )
            self._add(
                f"Sequence{_pascal(sequence_id)}Failed",
                total,
                0,
                f"Executions of sequence {sequence_id} failed or timed out",
            )
