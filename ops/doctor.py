"""``mailstep doctor``: is this deployment able to send, and is anything piling up?

Each check reports pass, fail or skip with a detail and, when it fails, a hint.

- ses-identity: SES v2 GetEmailIdentity of the sender's domain (else the address):
  ``VerifiedForSendingStatus``. Not yet verified (DKIM PENDING: the CNAMEs are not seen yet)
  warns and says what happens meanwhile (``HELD_MEANWHILE``); no identity, or DKIM FAILED,
  fails. Local runtime: skip (the local SES accepts every sender).
- ses-dkim: the same identity's ``DkimAttributes.Status`` is SUCCESS and signing is on; else
  the CNAME records to publish (from ``DkimAttributes.Tokens``). Local: skip.
- ses-production: GetAccount says production access (not the sandbox), sending enabled,
  enforcement HEALTHY; in the sandbox it says what the sandbox allows and how to leave it.
  Local: emulated (production, or the sandbox with ``mailstep dev --ses-sandbox``).
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
- table-warm-throughput: each table's warm throughput (DescribeTable ``WarmThroughput``: the
  units per second it serves at once, raised by ``mailstep:expectedPeakMailsPerSecond`` or by
  use; docs/deploy.md, "Warm tables for a known peak"), "not reported" where the endpoint
  leaves it out. Informational: passes whenever a table answers. Local: moto reports a new
  table's 12,000/4,000.
- lambda-concurrency: the account's Lambda concurrency (``lambda:GetAccountSettings``:
  ``AccountLimit.ConcurrentExecutions``, ``UnreservedConcurrentExecutions``) against what the
  stack's functions need at least (:func:`concurrency_needed`: the SQS mappings'
  ``ScalingConfig.MaximumConcurrency``, read live from ``ListEventSourceMappings``, plus a
  floor for the uncapped SQS mappings, the stream mappings and the functions without a
  mapping); warns below it, and lists reserved concurrency. Local: skip while the endpoint does
  not answer GetAccountSettings (moto does not).
- inbound-identity, receipt-rule-set: with replies on (the stack has a receipt rule set), the
  inbound domain's SES identity exists and is verified, and the stack's rule set is the active
  one (SES v1 ``DescribeActiveReceiptRuleSet``: one per account and region). Skip with replies
  off.

Statuses: pass, warn (look soon; does not fail the report), fail, skip.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
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
# What happens to mail while the sending identity is not verified (docs/deploy.md, "Day one").
HELD_MEANWHILE = (
    "mail is held, not lost: sequence steps wait, confirmations and transactional mail stay queued,"
    " broadcasts hold with status `held` (reason identity_unverified) and resume by themselves once"
    " verified"
)
SANDBOX = (
    "the SES sandbox: mail goes only to verified addresses and domains (and the mailbox simulator),"
    " at most 200 messages in 24 hours and 1 per second"
)
PRODUCTION_ACCESS = (
    "request production access: SES console, Account dashboard, 'Request production access', or"
    " aws sesv2 put-account-details --production-access-enabled --mail-type MARKETING"
    " --website-url https://... --use-case-description '...' (AWS answers within about a day;"
    " docs/deploy.md, 'Day one')"
)
# Lambda concurrency (lambda-concurrency): an SQS mapping without a maximum concurrency counts
# as at least the smallest maximum Lambda allows (2); a stream mapping as its parallelization
# factor (one shard at least); a function without a mapping (the API's, the pages', the
# schedules', the sequence steps') as one.
UNCAPPED_SQS_FLOOR = 2
CONCURRENCY_QUOTA_CODE = "L-B99A9384"  # Service Quotas: Lambda "Concurrent executions"
CONCURRENCY_REQUEST = (
    "ask for a higher Lambda concurrency (at least 1,000): aws service-quotas"
    f" request-service-quota-increase --service-code lambda --quota-code {CONCURRENCY_QUOTA_CODE}"
    " --desired-value 1000 (docs/deploy.md, 'Day one'); until then invocations beyond the limit are"
    " throttled: queue messages wait and are retried, API requests may answer 429"
)
# Errors of an endpoint that does not implement a call (moto, the local runtime) rather than of AWS.
NOT_ANSWERED = ("404", "NotImplemented", "UnknownOperationException", "InvalidAction")


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


def dkim_records(name: str, identity: dict[str, Any]) -> list[str]:
    """The Easy DKIM CNAME records of a domain identity, as ``name CNAME value``."""
    tokens = (identity.get("DkimAttributes") or {}).get("Tokens") or []
    return [f"{t}._domainkey.{name} CNAME {t}.dkim.amazonses.com" for t in tokens]


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
    verified = bool(identity.get("VerifiedForSendingStatus"))
    dkim = identity.get("DkimAttributes") or {}
    status, signing = dkim.get("Status", "NOT_STARTED"), dkim.get("SigningEnabled", False)
    records = dkim_records(name, identity)
    publish = (
        "publish these DNS records: " + "; ".join(records)
        if records
        else f"publish the DKIM CNAME records: aws sesv2 get-email-identity --email-identity {name}"
    )
    state = f"VerifiedForSendingStatus {str(verified).lower()}, DKIM {status}"
    checks = []
    if verified:
        checks.append(Check("ses-identity", PASS, f"{name} verified for sending ({state})"))
    elif status in ("FAILED", "TEMPORARY_FAILURE"):
        hint = (
            f"SES could not find the DKIM records ({status}): correct them, then SES checks again"
            f" (FAILED: restart verification in the SES console); meanwhile {HELD_MEANWHILE}"
        )
        checks.append(Check("ses-identity", FAIL, f"{name} not verified ({state})", hint))
    else:
        waiting = (
            "waiting for the link SES mailed to the address to be clicked"
            if identity.get("IdentityType") == "EMAIL_ADDRESS"
            else "waiting for SES to see the DKIM records (minutes to 72 hours)"
        )
        hint = f"{waiting}; meanwhile {HELD_MEANWHILE}"
        checks.append(Check("ses-identity", WARN, f"{name} not verified yet ({state})", hint))
    detail = f"{name}: DKIM {status}, signing {'on' if signing else 'off'}"
    if status == "SUCCESS" and signing:
        checks.append(Check("ses-dkim", PASS, detail))
    elif status == "PENDING" and not verified:
        checks.append(Check("ses-dkim", WARN, detail, publish))
    else:
        checks.append(Check("ses-dkim", FAIL, detail, publish))
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
            PRODUCTION_ACCESS
            if not production
            else "sending is paused or the account is under review: see the SES account dashboard"
        )
        detail = f"{mode}, sending {'enabled' if enabled else 'disabled'}, {enforcement}"
        if not production:
            detail = f"{detail}; {SANDBOX}"
        checks.append(Check("ses-production", FAIL, detail, hint))
    quota = account.get("SendQuota", {})
    rate, daily, sent = (
        float(quota.get("MaxSendRate", 0)),
        float(quota.get("Max24HourSend", 0)),
        float(quota.get("SentLast24Hours", 0)),
    )
    detail = f"MaxSendRate {rate:g}/s, SentLast24Hours {sent:g} of Max24HourSend {daily:g}"
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


@dataclass(frozen=True)
class ConcurrencyNeed:
    """What the stack's functions need at least at once (see ``UNCAPPED_SQS_FLOOR``)."""

    capped: dict[str, int]  # function -> the sum of its SQS mappings' MaximumConcurrency
    uncapped_sqs: int  # SQS mappings without a maximum concurrency
    streams: int  # the stream mappings' parallelization factors
    unmapped: int  # functions without an event source mapping

    @property
    def total(self) -> int:
        return (
            sum(self.capped.values()) + self.uncapped_sqs * UNCAPPED_SQS_FLOOR + self.streams + self.unmapped
        )

    def describe(self) -> str:
        capped = ", ".join(
            f"{name} {n}" for name, n in sorted(self.capped.items(), key=lambda kv: (-kv[1], kv[0]))
        )
        return (
            f"{sum(self.capped.values())} for the capped SQS mappings ({capped or 'none'}),"
            f" {self.uncapped_sqs * UNCAPPED_SQS_FLOOR} for {self.uncapped_sqs} uncapped SQS mappings,"
            f" {self.streams} for the stream mappings, {self.unmapped} for {self.unmapped} functions"
            " without a mapping (API, pages, schedules, sequence steps)"
        )


def _function_name(arn: str) -> str:
    """``arn:aws:lambda:<region>:<account>:function:<name>[:<qualifier>]`` -> ``<name>``."""
    return arn.split(":function:", 1)[-1].split(":", 1)[0]


def concurrency_needed(target: Target) -> ConcurrencyNeed:
    """The stack's event source mappings as deployed (ListEventSourceMappings; the broadcast
    workers' maximum concurrency depends on ``mailstep:sesMaxSendRate``), summed per kind."""
    functions = set(target.resources.get("functions", ()))
    mapped: set[str] = set()
    capped: dict[str, int] = {}
    uncapped = streams = 0
    for page in target.client("lambda").get_paginator("list_event_source_mappings").paginate():
        for mapping in page.get("EventSourceMappings", []):
            function = _function_name(str(mapping.get("FunctionArn", "")))
            if function not in functions:
                continue  # another stack's, or the account's
            mapped.add(function)
            source = str(mapping.get("EventSourceArn", ""))
            if source.startswith("arn:aws:sqs:") or ":sqs:" in source:
                maximum = int((mapping.get("ScalingConfig") or {}).get("MaximumConcurrency") or 0)
                if maximum:
                    capped[function] = capped.get(function, 0) + maximum
                else:
                    uncapped += 1
            else:  # a DynamoDB stream: one shard at least, its parallelization factor each
                streams += int(mapping.get("ParallelizationFactor") or 1)
    return ConcurrencyNeed(capped, uncapped, streams, len(functions - mapped))


def reserved_concurrency(target: Target) -> dict[str, int]:
    """Function -> its reserved concurrency, for the stack's functions that have one."""
    lam = target.client("lambda")
    found: dict[str, int] = {}
    for function in target.resources.get("functions", ()):
        reserved = lam.get_function_concurrency(FunctionName=function).get("ReservedConcurrentExecutions")
        if reserved is not None:
            found[function] = int(reserved)
    return found


def check_concurrency(
    target: Target, account_settings: Callable[[], Mapping[str, Any]] | None = None
) -> Check:
    """The account's Lambda concurrency against what the stack needs at least.

    ``account_settings`` answers ``lambda:GetAccountSettings`` (default: the target's Lambda
    client). It is the one call a test replaces (moto does not implement it); the stack's
    mappings and functions are read from the target as always."""
    if not target.resources.get("functions"):
        return Check("lambda-concurrency", SKIP, "no function deployed")
    ask = account_settings or target.client("lambda").get_account_settings
    try:
        settings = ask()
    except ClientError as exc:
        code = str(exc.response["Error"].get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in NOT_ANSWERED or status == 404:
            return Check(
                "lambda-concurrency", SKIP, f"this endpoint does not answer GetAccountSettings ({code})"
            )
        raise
    limit = int(settings.get("AccountLimit", {}).get("ConcurrentExecutions", 0))
    unreserved = int(settings.get("AccountLimit", {}).get("UnreservedConcurrentExecutions", limit))
    need = concurrency_needed(target)
    ours = reserved_concurrency(target)
    # the stack's functions draw on the unreserved pool, except those with reserved concurrency
    available = unreserved + sum(ours.values())
    reserved = f"{limit - unreserved:,} reserved in the account"
    if ours:
        reserved += " (this stack: " + ", ".join(f"{f} {n}" for f, n in sorted(ours.items())) + ")"
    detail = (
        f"ConcurrentExecutions {limit:,}, UnreservedConcurrentExecutions {unreserved:,} ({reserved});"
        f" the stack needs at least {need.total:,}: {need.describe()}"
    )
    if available < need.total:
        return Check("lambda-concurrency", WARN, detail, CONCURRENCY_REQUEST)
    return Check("lambda-concurrency", PASS, detail)


def warm_throughput_check(tables: Mapping[str, str], describe: Callable[[str], Mapping[str, Any]]) -> Check:
    """``tables``: label -> table name; ``describe`` answers DynamoDB DescribeTable's ``Table``."""
    if not tables:
        return Check("table-warm-throughput", SKIP, "no table")
    parts = []
    for label, name in tables.items():
        warm = describe(name).get("WarmThroughput")
        if not warm:
            parts.append(f"{label} ({name}): not reported")
            continue
        parts.append(
            f"{label} ({name}): {int(warm.get('WriteUnitsPerSecond', 0)):,} WRU/s,"
            f" {int(warm.get('ReadUnitsPerSecond', 0)):,} RRU/s ({warm.get('Status', '?')})"
        )
    return Check("table-warm-throughput", PASS, "; ".join(parts))


def check_warm_throughput(target: Target) -> Check:
    """The target's tables' warm throughput (:func:`warm_throughput_check`)."""
    settings = target.settings
    tables = {"main": settings.table_name, "events": settings.events_table_name}
    ddb = target.client("dynamodb")
    return warm_throughput_check(
        {label: name for label, name in tables.items() if name},
        lambda name: ddb.describe_table(TableName=name)["Table"],
    )


def _rule_set_domains(target: Target, rule_set: str) -> list[str]:
    rules = target.client("ses").describe_receipt_rule_set(RuleSetName=rule_set).get("Rules", [])
    return sorted({r.lower() for rule in rules for r in rule.get("Recipients", []) if "@" not in r})


def check_inbound(target: Target) -> list[Check]:
    """Replies (docs/engagement.md): the inbound domain's identity and the active rule set."""
    rule_sets = tuple(target.resources.get("receipt_rule_sets", ()))
    if not rule_sets:
        off = "replies are off (no mailstep:inboundDomain)"
        return [Check("inbound-identity", SKIP, off), Check("receipt-rule-set", SKIP, off)]
    checks: list[Check] = []
    domains = [d for name in rule_sets for d in _rule_set_domains(target, name)]
    ses = target.client("sesv2")
    for domain in domains:
        try:
            identity = dict(ses.get_email_identity(EmailIdentity=domain))
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "NotFoundException":
                raise
            hint = (
                f"SES receives mail only for a verified domain: aws sesv2 create-email-identity"
                f" --email-identity {domain}, then publish its DKIM records"
            )
            checks.append(Check("inbound-identity", FAIL, f"{domain}: no SES identity", hint))
            continue
        if identity.get("VerifiedForSendingStatus"):
            checks.append(Check("inbound-identity", PASS, f"{domain} verified"))
        else:
            status = (identity.get("DkimAttributes") or {}).get("Status", "NOT_STARTED")
            records = dkim_records(domain, identity)
            hint = "publish its DKIM records" + (": " + "; ".join(records) if records else "")
            checks.append(
                Check(
                    "inbound-identity",
                    WARN,
                    f"{domain} not verified yet (DKIM {status}); no reply arrives",
                    hint,
                )
            )
    active = target.client("ses").describe_active_receipt_rule_set().get("Metadata", {}).get("Name", "")
    if active in rule_sets:
        checks.append(Check("receipt-rule-set", PASS, f"{active} is the active receipt rule set"))
    else:
        hint = (
            f"activate it (one rule set is active per account and region): aws ses"
            f" set-active-receipt-rule-set --rule-set-name {rule_sets[0]}"
        )
        now = f"the active one is {active}" if active else "no rule set is active"
        checks.append(Check("receipt-rule-set", FAIL, f"{rule_sets[0]} is not active ({now})", hint))
    return checks


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
    lambda_account_settings: Callable[[], Mapping[str, Any]] | None = None,
) -> Report:
    """Every check; ``lambda_account_settings`` answers lambda:GetAccountSettings in place of the
    target's client (:func:`check_concurrency`)."""
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
    checks += _guard("table-warm-throughput", lambda: [check_warm_throughput(target)])
    checks += _guard("lambda-concurrency", lambda: [check_concurrency(target, lambda_account_settings)])
    checks += _guard("inbound-identity", lambda: check_inbound(target))
    return Report(target=target.label, checks=tuple(checks))
