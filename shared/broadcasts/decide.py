"""The decision of an A/B test (docs/broadcasts.md, "A/B tests"), made when its rest's schedule
fires: the rest's first ``broadcast.resolve`` message, before it starts resolving.

1. the test broadcast's recipients: its ``PAGE#`` items of its current round;
2. per variant (``abtest.variant_of``): delivered = recipients whose send-once claim of the
   test exists (``SEND#<test>#broadcast``), engaged = those with the human unique marker of the
   metric (``UNIQ#open#source#<test>``, a click counting as an open, or
   ``UNIQ#click#source#<test>``; machine opens and scanner clicks never write one): the
   engagement conditions' reads (``shared.broadcasts.engagement``), one BatchGetItem per 100;
3. the rule (``abtest.decide``), stored on the test's record once
   (``BroadcastStore.record_decision``: a second delivery, or a concurrent one, reads the
   stored decision instead); the stream turns that write into one ``broadcast.ab_decided``
   webhook event;
4. the rest's record takes the winning template and subject while still scheduled.

Idempotent: every step may run again after a crash and changes nothing the second time.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from shared.broadcasts.abtest import Decision, decide, variant_of
from shared.broadcasts.audience import AudienceResolver
from shared.broadcasts.engagement import EngagementReader
from shared.broadcasts.model import STEP, Audience, Broadcast
from shared.broadcasts.records import BroadcastStore
from shared.core import clock
from shared.core.observability import logger
from shared.store.send_log import SendLog

MAX_PAGES = 100_000


def test_recipients(records: BroadcastStore, test: Broadcast) -> list[str]:
    """The recipients the test resolved (its pages of its current round, in order)."""
    emails: list[str] = []
    for page in range(MAX_PAGES):
        stored = records.get_page(test.id, test.round, page)
        if stored is None:
            break
        emails += stored.emails
        if stored.exhausted:
            break
    return emails


def measure(test: Broadcast, emails: list[str], resolver: AudienceResolver) -> Decision:
    """The decision from what was sent and engaged so far."""
    assert test.ab is not None
    n = len(test.ab.variants)
    claimed = SendLog(resolver.table, resolver.client).claimed(emails, test.id, STEP)
    audience = Audience(opened=(test.id,)) if test.ab.metric == "opens" else Audience(clicked=(test.id,))
    reader = EngagementReader(resolver.client, resolver.table, resolver.events_table)
    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="ab") as pool:
        engaged = reader.passing(audience, sorted(claimed), pool)
    delivered, counted = [0] * n, [0] * n
    for email in claimed:
        i = variant_of(test.id, email, n)
        delivered[i] += 1
        counted[i] += email in engaged
    return decide(test.ab, delivered, counted, decided_at=clock.iso())


def decide_for_rest(rest: Broadcast, records: BroadcastStore, resolver: AudienceResolver) -> Broadcast:
    """Decide the test ``rest`` follows (once) and give ``rest`` the winner: the rest's record
    as it is now."""
    split = rest.audience.split
    assert split is not None and split.side == "rest"
    test = records.get(split.test_of)
    if test is None or test.ab is None:
        raise RuntimeError(f"A/B test {split.test_of!r} of {rest.id!r} not found")
    decision = test.ab_decision
    if decision is None:
        measured = measure(test, test_recipients(records, test), resolver)
        stored = records.record_decision(test, measured)
        decision = measured if stored is not None else (records.get(test.id) or test).ab_decision
        assert decision is not None
        logger.info(
            "A/B test decided", broadcast=test.id, decision=decision.describe(), first=stored is not None
        )
    winner = decision.winning(test.ab)
    if rest.template != winner.template or rest.subject != winner.subject:
        rest = records.apply_winner(rest, winner) or records.get(rest.id) or rest
    return rest
