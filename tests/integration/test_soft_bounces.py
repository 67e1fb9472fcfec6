"""Soft-bounce escalation in the engagement consumer, on moto.

Given a subscriber whose mails soft-bounce (SES ``bounceType: Transient``), when the consumer
writes the bounces, then the address is suppressed with reason ``soft_bounce_escalation`` once
``limit`` mails soft-bounced within ``window_days`` (default 3 within 30) and not before,
whatever the order the events came in, and however often SQS delivered them.
"""

from __future__ import annotations

import pytest

from shared.engagement.consumer import EngagementContext, process_body
from shared.engagement.soft_bounces import SOFT_BOUNCE_ESCALATION, SoftBouncePolicy, escalates
from shared.engagement.suppression import Suppressions
from shared.sending.jobs import SendJob
from shared.sending.pipeline import SendContext, send
from shared.sequences.engine import SequenceEngine
from shared.sequences.validate import Catalog
from shared.store.subscribers import SubscriberStore
from tests.integration.test_engagement import EMAIL, Stopper, arn, event, sns


def soft(message_id: str, day: int, sub_type: str = "MailboxFull") -> str:
    """The SNS body of a transient bounce of mail ``message_id`` on January ``day``."""
    at = f"2026-01-{day:02d}T10:00:00.000Z"
    return sns(event("bounce", message_id=message_id, at=at, bounceType="Transient", bounceSubType=sub_type))


def suppressed(store: SubscriberStore) -> bool:
    profile = store.get_profile(EMAIL)
    assert profile is not None
    return profile.suppressed


def subscribed_in_onboarding(store: SubscriberStore) -> None:
    """The subscriber, in a running execution of the onboarding sequence."""
    store.upsert(EMAIL)
    store.put_execution(EMAIL, "onboarding", arn("onboarding"))


@pytest.fixture
def stopper(store: SubscriberStore) -> Stopper:
    return Stopper(SequenceEngine(catalog=Catalog(), arn_prefix="", store=store))


@pytest.fixture
def ctx(store: SubscriberStore, stopper: Stopper) -> EngagementContext:
    return EngagementContext(store=store, suppressions=Suppressions(store, stopper), stopper=stopper)


def test_the_third_soft_bounced_mail_within_30_days_suppresses_and_later_sends_skip(
    ctx: EngagementContext, store: SubscriberStore, send_ctx: SendContext
) -> None:
    subscribed_in_onboarding(store)
    process_body(soft("m-1", 1), ctx)
    outcome = process_body(soft("m-2", 12), ctx)
    assert not suppressed(store) and outcome.suppressed == 0

    outcome = process_body(soft("m-3", 30), ctx)

    assert suppressed(store) and outcome.suppressed == 1
    record = ctx.suppressions.get(EMAIL)
    assert record is not None and record.reason == SOFT_BOUNCE_ESCALATION
    assert record.ses_message_id == "m-3" and record.source == "onboarding"
    assert "3 soft-bounced mails" in record.detail
    assert store.list_executions(EMAIL) == []
    later = send(SendJob(email=EMAIL, template="onboarding/welcome", source="spring-sale"), send_ctx)
    assert (later.status, later.reason) == ("skipped", "suppressed")


def test_one_mail_reported_or_delivered_many_times_counts_once(
    ctx: EngagementContext, store: SubscriberStore
) -> None:
    store.upsert(EMAIL)
    body = soft("m-1", 1)
    for _ in range(3):  # SQS delivers one record three times
        process_body(body, ctx)
    process_body(soft("m-1", 2, "MessageTooLarge"), ctx)  # the same mail reported again
    process_body(soft("m-2", 3), ctx)
    assert not suppressed(store)
    assert len([e for e in store.list_events(EMAIL) if e["type"] == "bounce"]) == 3


def test_soft_bounces_further_apart_than_the_window_do_not_suppress(
    ctx: EngagementContext, store: SubscriberStore
) -> None:
    store.upsert(EMAIL)
    for message, day in (("m-1", 1), ("m-2", 20)):
        process_body(soft(message, day), ctx)
    process_body(
        sns(event("bounce", message_id="m-3", at="2026-02-05T10:00:00.000Z", bounceType="Transient")), ctx
    )
    assert not suppressed(store)  # 1 Jan to 5 Feb: 35 days; 20 Jan to 5 Feb: two mails


def test_the_last_written_of_out_of_order_bounces_decides(
    ctx: EngagementContext, store: SubscriberStore
) -> None:
    store.upsert(EMAIL)
    process_body(soft("m-3", 25), ctx)
    process_body(soft("m-1", 2), ctx)
    assert not suppressed(store)
    process_body(soft("m-2", 10), ctx)  # the middle one comes last: it sees both others
    assert suppressed(store)


def test_permanent_bounces_and_delays_are_not_soft_bounces(
    ctx: EngagementContext, store: SubscriberStore
) -> None:
    store.upsert(EMAIL)
    process_body(soft("m-1", 1), ctx)
    process_body(sns(event("delivery-delay", message_id="m-2")), ctx)
    process_body(soft("m-3", 3), ctx)
    assert not suppressed(store)


def test_a_crash_while_suppressing_is_repaired_by_the_redelivery(
    ctx: EngagementContext, store: SubscriberStore, stopper: Stopper
) -> None:
    subscribed_in_onboarding(store)
    process_body(soft("m-1", 1), ctx)
    process_body(soft("m-2", 2), ctx)
    third = soft("m-3", 3)
    stopper.fail = True
    with pytest.raises(RuntimeError):
        process_body(third, ctx)  # the event is written; stopping its executions failed
    stopper.fail = False
    outcome = process_body(third, ctx)  # SQS delivers it again: a duplicate, checked again
    assert outcome.duplicates == 1 and suppressed(store)
    assert store.list_executions(EMAIL) == []


def test_a_policy_of_two_within_a_week() -> None:
    policy = SoftBouncePolicy(limit=2, window_days=7)
    assert escalates(["2026-01-01T00:00:00.000Z", "2026-01-08T00:00:00.000Z"], policy)
    assert not escalates(["2026-01-01T00:00:00.000Z", "2026-01-08T00:00:00.001Z"], policy)
    assert not escalates(["2026-01-01T00:00:00.000Z"], policy)
