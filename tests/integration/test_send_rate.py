"""The send rate shared by broadcasts and the other mail, on moto: the other mail reserves its
sends per second and the broadcast limiter gives way by that much the next second; a send that
is not a broadcast's and that SES throttles is tried again in place (shared.sending.rate,
shared.sending.pipeline)."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from local_aws.provision import LocalResources
from shared.broadcasts.worker import WorkerContext
from shared.core.aws import client
from shared.core.settings import Settings
from shared.sending.jobs import SendJob
from shared.sending.pipeline import SendContext, send
from shared.sending.rate import BROADCAST_IDLE_S, RESERVED_SCOPE, RateLimiter, Reservations
from shared.store.dynamo import key
from shared.store.keys import rate_reserve_key
from shared.store.subscribers import SubscriberStore
from tests.integration.broadcast_support import Env, FakeSes, broadcast_env

RATE = 50.0


def test_the_broadcasts_give_way_to_the_other_mail_of_the_last_second(resources: LocalResources) -> None:
    table = resources.tables["table_name"]
    now = [1000.5]
    reservations = Reservations(table, RESERVED_SCOPE, clock=lambda: now[0])
    limiter = RateLimiter(table, RESERVED_SCOPE, RATE, clock=lambda: now[0], reservations=reservations)

    # Given no other mail: the broadcasts' leases run at the whole rate (half a second at most)
    lease = limiter.acquire(1000)
    assert lease is not None and lease.spacing == pytest.approx(1 / RATE) and lease.count == RATE / 2

    # When 30 other mails are sent in second 1001
    now[0] = 1001.5
    for _ in range(30):
        reservations.reserve()

    # Then the broadcasts' leases in second 1002 run at the other 20 a second, and at the whole
    # rate again after
    now[0] = 1002.5
    requests = reservations.requests
    lease = limiter.acquire(1000)
    assert lease is not None and lease.spacing == pytest.approx(1 / 20) and lease.count == 10
    assert limiter.acquire(5) is not None  # the same second: its count is read once
    assert reservations.requests == requests + 1
    now[0] = 1003.5
    lease = limiter.acquire(1000)
    assert lease is not None and lease.spacing == pytest.approx(1 / RATE)

    # And more other mail than the rate stops the broadcasts for that second without asking the
    # clock: no lease before a deadline within it
    reservations.reserve(80)
    now[0] = 1004.2
    asked = limiter.requests
    assert limiter.acquire(5, deadline=1004.9) is None and limiter.requests == asked


def test_the_other_mail_is_counted_only_while_a_broadcast_is_sending(resources: LocalResources) -> None:
    table = resources.tables["table_name"]
    ddb = client("dynamodb")
    now = [2000.5]
    reservations = Reservations(table, RESERVED_SCOPE, clock=lambda: now[0])
    limiter = RateLimiter(table, RESERVED_SCOPE, RATE, clock=lambda: now[0], reservations=reservations)

    def counted(second: int) -> int:
        return sum(
            int(
                ddb.get_item(TableName=table, Key=key(*rate_reserve_key(RESERVED_SCOPE, second, n)))
                .get("Item", {})
                .get("used", {})
                .get("N", 0)
            )
            for n in range(4)
        )

    # Given no broadcast: other mail writes no count (one read of the clock per second)
    for _ in range(5):
        reservations.reserve()
    assert counted(2000) == 0 and reservations.requests == 1

    # When a broadcast takes a lease, the other mail of the next second is counted
    assert limiter.acquire(10) is not None
    now[0] = 2001.5
    for _ in range(3):
        reservations.reserve()
    assert counted(2001) == 3
    now[0] = 2002.5
    assert limiter.rate_now() == RATE - 3  # and the broadcast gives way by that much

    # And a minute after its last lease it is not counted any more
    now[0] = 2001.0 + BROADCAST_IDLE_S + 1.5
    reservations.reserve()
    assert counted(int(now[0])) == 0


class ThrottledFirst:
    """sesv2 ``send_email`` that answers SES's throttling ``throttles`` times, then accepts."""

    def __init__(self, throttles: int) -> None:
        self.throttles = throttles
        self.calls = 0
        self.ses = FakeSes()

    def send_email(self, **request: Any) -> dict[str, Any]:
        self.calls += 1
        if self.calls <= self.throttles:
            error = {
                "Error": {"Code": "TooManyRequestsException", "Message": "Maximum sending rate exceeded."}
            }
            raise ClientError({**error, "ResponseMetadata": {"HTTPStatusCode": 429}}, "SendEmail")  # type: ignore[arg-type]
        return self.ses.send_email(**request)


def context(env: Env, ses: Any, reserved: list[int], slept: list[float]) -> SendContext:
    from shared.sending.sender import SesSender

    base = env.send_context()
    return SendContext(
        store=base.store,
        log=base.log,
        ses=SesSender("mailstep", client=ses),
        identity=base.identity,
        token_secret=base.token_secret,
        reserve=reserved.append,
        sleep=slept.append,
    )


def test_other_mail_reserves_before_sending_and_is_tried_again_in_place_when_throttled(
    resources: LocalResources, store: SubscriberStore
) -> None:
    store.upsert("reader@example.com")
    job = SendJob(email="reader@example.com", template="newsletter/monthly", source="receipts", step="r1")
    with broadcast_env(resources) as env:
        # Given SES throttles the first two tries
        ses, reserved, slept = ThrottledFirst(2), [], []
        outcome = send(job, context(env, ses, reserved, slept))
        # Then the mail is reserved once and sent on the third try, after two short pauses
        assert outcome.status == "sent" and ses.calls == 3 and reserved == [1]
        assert len(slept) == 2 and all(0 < s <= 1.0 for s in slept)

        # Given SES throttles for longer than the tries
        ses, reserved, slept = ThrottledFirst(10), [], []
        again = SendJob(
            email="reader@example.com", template="newsletter/monthly", source="receipts", step="r2"
        )
        outcome = send(again, context(env, ses, reserved, slept))
        # Then it is left to the caller's retry (nothing sent, the claim released)
        assert outcome.status == "retryable" and outcome.reason == "throttled" and ses.calls == 4

        # And a broadcast's sends reserve nothing and are not retried here (the worker does)
        worker = env.worker()
        assert worker.send.reserve is None and worker.send.count_sends is False


def test_the_functions_contexts_reserve_and_the_broadcast_workers_do_not(resources: LocalResources) -> None:
    settings = Settings(
        table_name=resources.tables["table_name"], events_table_name=resources.tables["events_table_name"]
    )
    assert SendContext.from_settings(settings).reserve is not None
    assert WorkerContext.from_settings(settings).send.reserve is None
    assert WorkerContext.from_settings(settings).pools.reservations is not None
