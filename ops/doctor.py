"""``mailstep doctor``: is this deployment able to send, and is anything piling up?

Each check reports pass, fail or skip with a detail and, when it fails, a hint.

- ses-identity: SES v2 GetEmailIdentity of the sender's domain (else the address) is
  verified for sending. Local runtime: skip (the local SES accepts every sender).
- ses-dkim: the same identity's DKIM status is SUCCESS and signing is on. Local: skip.
- ses-production: GetAccount says production access (not the sandbox), sending enabled,
  enforcement HEALTHY. Local: emulated (always production).
- ses-quota: GetAccount SendQuota (max send rate, 24-hour quota); fails at >= 90 % used.
  Local: meaningful (``mailstep dev --max-send-rate/--max-24-hour-send``).
- configuration-set: exists with an enabled SNS event destination for BOUNCE, COMPLAINT and
  DELIVERY. Local: meaningful.
- alarms: the stack's CloudWatch alarms exist and none is in ALARM. Local: skip (none).
- dlqs: every queue's dead-letter queue is empty. Local: meaningful.
- open-executions: RUNNING executions of the sequence state machines against the
  account's open-executions quota (1,000,000 per region by default; ``executions_quota`` for
  a raised one), counted with ListExecutions up to ``executions_counted`` (then "at least
  N": a million executions are a thousand calls of a 2-5/s quota). Fails at 80 % of the
  quota, warns at 50 % or when the count stopped early. Local: meaningful.
- webhooks: fails when an endpoint is disabled (410 Gone, or failing for 5 days) and says
  why; warns when one has been failing (no success since). Local: meaningful.

Statuses: pass, warn (look soon; does not fail the report), fail, skip.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import parseaddr
from typing import Any

from botocore.exceptions import ClientError

from ops.targets import LOCAL, Target, sequence_state_machines
from shared.core.specs import broadcast_workers
from shared.sequences.sfn import OPEN_EXECUTIONS_QUOTA, StepFunctions

PASS, WARN, FAIL, SKIP = "pass", "warn", "fail", "skip"
REQUIRED_EVENTS = ("BOUNCE", "COMPLAINT", "DELIVERY")
QUOTA_WARN = 0.9
# Open executions: fail at 80 % of the quota (a drip keeps a subscriber open for its whole
# length, so the count only falls as drips end), warn from 50 %.
EXECUTIONS_FAIL = 0.8
EXECUTIONS_WARN = 0.5
# How many open executions doctor counts at most: 20 ListExecutions pages of 1,000, within the
# call's smallest burst (100 tokens, refilled at 2/s outside the three largest regions).
EXECUTIONS_COUNTED = 20_000
EXECUTIONS_GUIDANCE = (
    "the quota is per account and region, shared with every other workflow; at it StartExecution"
    " fails (ExecutionLimitExceeded) and new subscribers enter no sequence (the events API answers"
    " 503, an import lists the rows). Request a higher open-executions quota for Step Functions"
    " (Service Quotas console, or Support Center), or shorten long drips: each subscriber in a"
    " drip is one open execution for the drip's whole length"
)


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # PASS | FAIL | SKIP
    detail: str
    hint: str = ""

    def public(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status, "detail": self.detail, "hint": self.hint}


@dataclass(frozen=True)
class Report:
    target: str
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(c.status != FAIL for c in self.checks)

    def public(self) -> dict[str, Any]:
        return {"target": self.target, "ok": self.ok, "checks": [c.public() for c in self.checks]}


def sender_of(target: Target) -> str:
    """The default From address: the settings, or (for a stack) a function's environment."""
    if target.kind == LOCAL:
        return target.settings.default_from
    from shared.core.specs import ENV

    for function in target.resources.get("functions", ()):
        env = target.client("lambda").get_function_configuration(FunctionName=function).get("Environment", {})
        value = env.get("Variables", {}).get(ENV["default_from"])
        if value:
            return str(value)
    return target.settings.default_from


def _identity(target: Target, sender: str) -> tuple[str, dict[str, Any] | None]:
    """(identity name, GetEmailIdentity answer) for the sender's domain, else its address."""
    address = parseaddr(sender)[1]
    domain = address.rpartition("@")[2]
    ses = target.client("sesv2")
    for name in (domain, address):
        if not name:
            continue
        try:
            return name, dict(ses.get_email_identity(EmailIdentity=name))
        except ClientError as exc:
            if exc.response["Error"]["Code"] not in ("NotFoundException", "BadRequestException"):
                raise
    return domain or address, None


def check_identity(target: Target, sender: str) -> list[Check]:
    if target.kind == LOCAL:
        reason = "not emulated: the local SES accepts every sender"
        return [Check("ses-identity", SKIP, reason), Check("ses-dkim", SKIP, reason)]
    name, identity = _identity(target, sender)
    if identity is None:
        hint = f"create and verify the identity: aws sesv2 create-email-identity --email-identity {name}"
        return [
            Check("ses-identity", FAIL, f"{name}: no SES identity", hint),
            Check("ses-dkim", FAIL, f"{name}: no SES identity", hint),
        ]
    checks = []
    if identity.get("VerifiedForSendingStatus"):
        checks.append(Check("ses-identity", PASS, f"{name} verified for sending"))
    else:
        checks.append(
            Check("ses-identity", FAIL, f"{name} not verified", "publish the DKIM CNAMEs (or click the link)")
        )
    dkim = identity.get("DkimAttributes") or {}
    status, signing = dkim.get("Status", "NOT_STARTED"), dkim.get("SigningEnabled", False)
    if status == "SUCCESS" and signing:
        checks.append(Check("ses-dkim", PASS, f"{name}: DKIM {status}, signing on"))
    else:
        checks.append(
            Check(
                "ses-dkim",
                FAIL,
                f"{name}: DKIM {status}, signing {'on' if signing else 'off'}",
                "publish the three DKIM CNAME records SES lists for the domain",
            )
        )
    return checks


def check_account(target: Target) -> list[Check]:
    account = target.client("sesv2").get_account()
    checks = []
    production = bool(account.get("ProductionAccessEnabled"))
    enabled = bool(account.get("SendingEnabled", True))
    enforcement = account.get("EnforcementStatus", "HEALTHY")
    mode = "production" if production else "sandbox"
    if production and enabled and enforcement == "HEALTHY":
        checks.append(Check("ses-production", PASS, f"{mode}, sending enabled, {enforcement}"))
    else:
        hint = (
            "request production access (SES console: Account dashboard)"
            if not production
            else "sending is paused or the account is under review: see the SES account dashboard"
        )
        checks.append(
            Check(
                "ses-production",
                FAIL,
                f"{mode}, sending {'enabled' if enabled else 'disabled'}, {enforcement}",
                hint,
            )
        )
    quota = account.get("SendQuota", {})
    rate, daily, sent = (
        float(quota.get("MaxSendRate", 0)),
        float(quota.get("Max24HourSend", 0)),
        float(quota.get("SentLast24Hours", 0)),
    )
    detail = f"max {rate:g}/s, {sent:g} of {daily:g} sent in the last 24 h"
    if daily > 0 and sent / daily < QUOTA_WARN and rate > 0:
        checks.append(Check("ses-quota", PASS, detail))
    else:
        checks.append(
            Check("ses-quota", FAIL, detail, "ask AWS for a higher sending quota before sending more")
        )
    return checks


def check_configuration_sets(target: Target, names: tuple[str, ...]) -> Check:
    if not names:
        return Check("configuration-set", FAIL, "no configuration set found", "deploy the stack (cdk deploy)")
    ses = target.client("sesv2")
    problems, fine = [], []
    for name in names:
        try:
            ses.get_configuration_set(ConfigurationSetName=name)
            destinations = ses.get_configuration_set_event_destinations(ConfigurationSetName=name)
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "NotFoundException":
                raise
            problems.append(f"{name}: missing")
            continue
        covered: set[str] = set()
        for destination in destinations.get("EventDestinations", []):
            if destination.get("Enabled") and (destination.get("SnsDestination") or {}).get("TopicArn"):
                covered |= set(destination.get("MatchingEventTypes", []))
        missing = [e for e in REQUIRED_EVENTS if e not in covered]
        if missing:
            problems.append(f"{name}: no enabled SNS event destination for {', '.join(missing)}")
        else:
            fine.append(f"{name}: events to SNS ({len(covered)} types)")
    if problems:
        hint = "redeploy the stack; without event publishing bounces and complaints are never suppressed"
        return Check("configuration-set", FAIL, "; ".join(problems), hint)
    return Check("configuration-set", PASS, "; ".join(fine))


def check_alarms(target: Target) -> Check:
    if target.kind == LOCAL:
        return Check("alarms", SKIP, "not emulated: the local runtime creates no alarms")
    names = list(target.resources.get("alarms", ()))
    if not names:
        return Check(
            "alarms", FAIL, "the stack has no CloudWatch alarms", "deploy a stack version with alarms"
        )
    cloudwatch = target.client("cloudwatch")
    found: list[dict[str, Any]] = []
    for start in range(0, len(names), 100):
        paginator = cloudwatch.get_paginator("describe_alarms")
        for page in paginator.paginate(AlarmNames=names[start : start + 100]):
            found += page.get("MetricAlarms", []) + page.get("CompositeAlarms", [])
    firing = sorted(a["AlarmName"] for a in found if a.get("StateValue") == "ALARM")
    missing = sorted(set(names) - {a["AlarmName"] for a in found})
    if missing:
        return Check("alarms", FAIL, f"missing: {', '.join(missing)}", "redeploy the stack")
    if firing:
        return Check("alarms", FAIL, f"in ALARM: {', '.join(firing)}", "look at the alarm's metric and logs")
    return Check("alarms", PASS, f"{len(found)} alarms, none in ALARM")


def dead_letter_queues(target: Target, queue_urls: tuple[str, ...]) -> dict[str, str]:
    """DLQ ARN -> its URL, for every queue with a redrive policy."""
    sqs = target.client("sqs")
    by_arn: dict[str, str] = {}
    targets: set[str] = set()
    for url in queue_urls:
        attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn", "RedrivePolicy"])[
            "Attributes"
        ]
        by_arn[attributes["QueueArn"]] = url
        if attributes.get("RedrivePolicy"):
            targets.add(json.loads(attributes["RedrivePolicy"])["deadLetterTargetArn"])
    return {arn: by_arn[arn] for arn in sorted(targets) if arn in by_arn}


def check_dlqs(target: Target, queue_urls: tuple[str, ...]) -> Check:
    dlqs = dead_letter_queues(target, queue_urls)
    if not dlqs:
        return Check("dlqs", FAIL, "no queue with a dead-letter queue found", "deploy the stack (cdk deploy)")
    sqs = target.client("sqs")
    waiting = {}
    for arn, url in dlqs.items():
        attributes = sqs.get_queue_attributes(
            QueueUrl=url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        count = int(attributes.get("ApproximateNumberOfMessages", 0)) + int(
            attributes.get("ApproximateNumberOfMessagesNotVisible", 0)
        )
        if count:
            waiting[arn.rsplit(":", 1)[1]] = count
    if waiting:
        detail = ", ".join(f"{name}: {count}" for name, count in sorted(waiting.items()))
        hint = "inspect the messages, fix the cause, then redrive (docs/operations.md, 'DLQ redrive')"
        return Check("dlqs", FAIL, detail, hint)
    return Check("dlqs", PASS, f"{len(dlqs)} dead-letter queues, all empty")


def check_open_executions(
    target: Target, quota: int = OPEN_EXECUTIONS_QUOTA, at_most: int = EXECUTIONS_COUNTED
) -> Check:
    """Open (RUNNING) executions of the target's sequence state machines against ``quota``,
    counted up to ``at_most`` in all."""
    machines = sequence_state_machines(target.settings.state_machine_arn_prefix, target.aws)
    if not machines:
        return Check("open-executions", SKIP, "no sequence state machine deployed")
    sfn = StepFunctions(target.client("stepfunctions"))
    parts: list[str] = []
    total, complete = 0, True
    for sequence_id, arn in sorted(machines.items()):
        left = at_most - total
        if left <= 0:
            parts.append(f"{sequence_id}: not counted")
            complete = False
            continue
        count, whole = sfn.count_running(arn, left)
        total += count
        complete = complete and whole
        parts.append(f"{sequence_id}: {count:,}" if whole else f"{sequence_id}: at least {count:,}")
    share = total / quota if quota > 0 else 1.0
    counted = f"{total:,}" if complete else f"at least {total:,}"
    detail = f"{counted} open of the {quota:,} quota ({share:.0%}; " + ", ".join(parts) + ")"
    if share >= EXECUTIONS_FAIL:
        return Check("open-executions", FAIL, detail, EXECUTIONS_GUIDANCE)
    if share >= EXECUTIONS_WARN:
        return Check("open-executions", WARN, detail, EXECUTIONS_GUIDANCE)
    if not complete:
        hint = (
            f"counting stopped at {at_most:,}: `mailstep doctor --executions-counted N` counts"
            " further (one ListExecutions call per 1,000)"
        )
        return Check("open-executions", WARN, detail, hint)
    return Check("open-executions", PASS, detail)


def check_broadcast_workers(target: Target, account_rate: float | None = None) -> Check:
    """The broadcast workers' maximum concurrency (the template's, from
    ``mailstep:sesMaxSendRate``) against what the account's SES rate needs
    (``shared.core.specs.broadcast_workers``): too few and a broadcast sends slower than SES
    allows."""
    queue_url = target.settings.broadcast_queue_url
    if not queue_url:
        return Check("broadcast-workers", SKIP, "no broadcast queue deployed")
    if account_rate is None:
        quota = target.client("sesv2").get_account().get("SendQuota", {})
        account_rate = float(quota.get("MaxSendRate", 0))
    arn = target.client("sqs").get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])
    mappings = target.client("lambda").list_event_source_mappings(
        EventSourceArn=arn["Attributes"]["QueueArn"]
    )["EventSourceMappings"]
    if not mappings:
        return Check(
            "broadcast-workers", FAIL, "the broadcast queue has no worker", "deploy the stack (cdk deploy)"
        )
    workers = int((mappings[0].get("ScalingConfig") or {}).get("MaximumConcurrency") or 0)
    needed = broadcast_workers(account_rate)
    detail = f"{workers} workers; the account's {account_rate:g} mails/s needs {needed}"
    if workers >= needed:
        return Check("broadcast-workers", PASS, detail)
    hint = (
        f"deploy with the account's rate: cdk deploy -c mailstep:sesMaxSendRate={account_rate:g} "
        "(docs/broadcasts.md, Sizing)"
    )
    return Check("broadcast-workers", WARN, detail, hint)


def check_webhooks(target: Target) -> Check:
    """Disabled and failing webhook endpoints (docs/webhooks.md)."""
    from ops.webhooks import Webhooks

    if not target.settings.webhook_queue_url:
        return Check("webhooks", SKIP, "no webhook queue deployed")
    endpoints = Webhooks.for_target(target).endpoints()
    if not endpoints:
        return Check("webhooks", PASS, "no endpoint")
    disabled = [e for e in endpoints if e.status == "disabled"]
    failing = [e for e in endpoints if e.status != "disabled" and e.failing_since]
    if disabled:
        detail = "; ".join(
            f"{e.id} ({e.url}) disabled: {e.disabled_reason} at {e.disabled_at}" for e in disabled
        )
        hint = (
            "fix the receiver, then `mailstep webhooks enable ID` and "
            "`mailstep webhooks replay ID --since TIME`"
        )
        return Check("webhooks", FAIL, detail, hint)
    if failing:
        detail = "; ".join(f"{e.id} ({e.url}) failing since {e.failing_since}" for e in failing)
        hint = "`mailstep webhooks deliveries ID` shows the answers; 5 days of failures disable it"
        return Check("webhooks", WARN, detail, hint)
    return Check("webhooks", PASS, f"{len(endpoints)} endpoints, all delivering")


def check_reputation(target: Target) -> Check:
    """The reputation guardrail paused marketing sending (docs/reputation.md): a finding."""
    from ops.reputation import doctor_finding

    if not target.settings.configuration_set:
        return Check("reputation", SKIP, "no configuration set")
    finding = doctor_finding(target)
    if finding:
        return Check("reputation", FAIL, finding, "resume once the cause is fixed (docs/reputation.md)")
    return Check("reputation", PASS, "marketing sending is on")


def _guard(name: str, run: Callable[[], list[Check]]) -> list[Check]:
    """A check whose API call fails reports that failure instead of stopping the others."""
    try:
        return run()
    except ClientError as exc:
        error = exc.response["Error"]
        return [
            Check(
                name, FAIL, f"{error.get('Code')}: {error.get('Message', '')}"[:200], "check IAM permissions"
            )
        ]


def run(
    target: Target,
    *,
    executions_quota: int = OPEN_EXECUTIONS_QUOTA,
    executions_counted: int = EXECUTIONS_COUNTED,
) -> Report:
    checks: list[Check] = []
    checks += _guard("ses-identity", lambda: check_identity(target, sender_of(target)))
    checks += _guard("ses-account", lambda: check_account(target))
    configuration_sets = tuple(target.resources.get("configuration_sets", ())) or (
        (target.settings.configuration_set,) if target.settings.configuration_set else ()
    )
    checks += _guard("configuration-set", lambda: [check_configuration_sets(target, configuration_sets)])
    checks += _guard("alarms", lambda: [check_alarms(target)])
    checks += _guard("dlqs", lambda: [check_dlqs(target, tuple(target.resources.get("queues", ())))])
    checks += _guard("broadcast-workers", lambda: [check_broadcast_workers(target)])
    checks += _guard(
        "open-executions",
        lambda: [check_open_executions(target, executions_quota, executions_counted)],
    )
    checks += _guard("webhooks", lambda: [check_webhooks(target)])
    checks += _guard("reputation", lambda: [check_reputation(target)])
    return Report(target=target.label, checks=tuple(checks))
