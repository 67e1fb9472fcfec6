"""Settings are read from the environment once, at the boundary, into this model.

The names of the variables live in ``shared.core.specs.ENV`` so the CDK stack, the local
runtime and the Lambdas agree on them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True)

    table_name: str
    # Only functions whose spec grants the events table receive it (sequence-cleanup does
    # not): empty means "not granted", and a DynamoDB call naming an
    # empty table fails on parameter validation before reaching AWS.
    events_table_name: str = ""
    api_key_secret: str = ""
    data_ttl_days: int = Field(default=180, ge=1, le=3650)
    idempotency_ttl_seconds: int = Field(default=86400, ge=60)
    max_body_bytes: int = Field(default=256 * 1024, ge=1024)
    configuration_set: str = ""  # SES configuration set every send names (event publishing)
    # Sending (DESIGN.md section 6): identity, footer, unsubscribe links and the send queue.
    public_base_url: str = Field(default="https://mailstep.localhost", pattern=r"^https?://[^\s/]+(/\S*)?$")
    default_from: str = "Mailstep <hello@example.com>"
    default_reply_to: str = ""
    postal_address: str = "Mailstep, 1 Example Street, 12345 Example City"
    mail_footer_reason: str = "You receive this email because you signed up for it."
    list_id_domain: str = ""  # empty: the sender's domain
    unsubscribe_mailto: str = ""  # optional mailto: target in List-Unsubscribe
    unsubscribe_secret: str = ""  # Secrets Manager name of the token signing key
    unsubscribe_token_ttl_days: int = Field(default=365, ge=1, le=3650)
    send_queue_url: str = ""
    send_claim_lease_seconds: int = Field(default=300, ge=30, le=3600)
    # Sequences: ARN of the state machines without the sequence id (shared.sequences.engine).
    state_machine_arn_prefix: str = ""
    # Callback Tasks (docs/sequences.md): the schedule group the step function creates the
    # schedules that resume them in, and the role EventBridge Scheduler calls SendTaskSuccess with.
    sequence_schedule_group: str = ""
    sequence_scheduler_role_arn: str = ""
    # Broadcasts (docs/broadcasts.md): queues, the schedule state machine and the send rate.
    broadcast_queue_url: str = ""  # broadcast.batch envelopes -> broadcast-worker
    broadcast_control_queue_url: str = ""  # broadcast.resolve envelopes -> broadcast-resolver
    broadcast_schedule_arn: str = ""  # state machine that waits until --at, then starts resolving
    broadcast_max_send_rate: float = Field(default=0.0, ge=0)  # cap (mails/s); 0: the account's rate
    broadcast_rate_share: float = Field(default=1.0, gt=0, le=1)  # of the rate (other mail goes first)
    broadcast_worker_threads: int = Field(default=8, ge=1, le=32)  # sends in flight per worker
    # Back-pressure (docs/broadcasts.md): the resolver resolves its next page only while the batch
    # queue holds at most this many seconds of sending at the broadcast's rate (at least 20
    # batches; shared.broadcasts.fanout.queue_limit); 0: no back-pressure.
    broadcast_resolver_ahead_s: int = Field(default=120, ge=0, le=3600)
    # Warm-up (shared.sending.warmup, docs/sending.md): the sending domain's daily volumes of day
    # 1, 2, ... (no limit after the last); "off" or empty: no ramp.
    warmup_schedule: str = "off"

    # The stack checks these five deploy values with the same bounds (stacks/config.py): keep both alike.
    # List hygiene (docs/hygiene.md): this many soft-bounced mails within this many days
    # suppress the address (shared/engagement/soft_bounces.py).
    soft_bounce_limit: int = Field(default=3, ge=2, le=100)
    soft_bounce_window_days: int = Field(default=30, ge=1, le=365)
    # Sunset (shared/engagement/sunset.py): days without a human open or click that make a
    # subscriber cold (the second while younger than the first); days cold before unsubscribing.
    cold_after_days: int = Field(default=90, ge=7, le=730)
    new_subscriber_cold_after_days: int = Field(default=30, ge=7, le=730)
    sunset_grace_days: int = Field(default=30, ge=1, le=365)

    # Reputation guardrail (docs/reputation.md): transactional mail's own configuration set
    # (empty: transactional mail uses ``configuration_set`` too).
    transactional_configuration_set: str = ""

    # Webhooks (shared/webhooks, docs/webhooks.md): the delivery queue; http receivers on loopback
    # (the local runtime's template only: a deployment delivers to public https URLs).
    webhook_queue_url: str = ""
    webhook_allow_loopback_http: bool = False

    # Replies (shared/engagement/replies.py): forward every recorded reply to this address (empty: no).
    reply_forward_to: str = ""

    # Sign-up and consent (shared/consent, docs/signup.md).
    signup_double_opt_in: bool = True  # False: every form subscribes directly (method "single")
    signup_single_opt_in_forms: str = ""  # comma-separated form ids that subscribe directly
    signup_allowed_origins: str = ""  # comma-separated origins (https://acme.test) for redirects and CORS
    signup_pending_days: int = Field(default=7, ge=1, le=60)  # a sign-up not confirmed by then is gone
    signup_cooldown_seconds: int = Field(default=3600, ge=0, le=7 * 86400)  # one confirmation mail per window
    # confirmation mails per recipient domain per UTC hour (shared.store.pending.DOMAIN_CAP_PER_HOUR)
    signup_domain_cap_per_hour: int = Field(default=1000, ge=1, le=1_000_000)
    # sign-ups held (mailed 15 minutes later) above that cap, per domain and hour; then "try later"
    signup_domain_held_per_hour: int = Field(default=100, ge=0, le=1_000_000)
    # sign-ups per client address (API Gateway's sourceIp) per UTC hour
    signup_source_cap_per_hour: int = Field(default=100, ge=1, le=1_000_000)
    signup_max_body_bytes: int = Field(default=8 * 1024, ge=512, le=64 * 1024)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        from shared.core.specs import ENV

        source = os.environ if env is None else env
        values = {field: source[name] for field, name in ENV.items() if name in source}
        return cls.model_validate(values)
