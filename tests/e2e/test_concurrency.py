"""Many concurrent events for the same few subscribers, through the HTTP API of the local
runtime (each request in an execution environment of its own): no answer is a server error,
contention is answered 503 with Retry-After (and the retry applies), and afterwards every
pair invariant holds: each profile's tags are exactly its TAG# partners, each EXEC item
has its partner."""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tests.e2e.conftest import Local
from tests.e2e.helpers import scan_all

SUBSCRIBERS = [f"race{i}@example.com" for i in range(4)]
TAGS = ["race-a", "race-b", "race-c"]
REQUESTS = 120


def event(rng: random.Random, n: int) -> dict[str, Any]:
    email = rng.choice(SUBSCRIBERS)
    kind = rng.random()
    if kind < 0.1:
        return {"type": "subscriber.unsubscribed", "email": email, "id": f"race-{n}"}
    tags = {"add": rng.sample(TAGS, rng.randint(0, 2))}
    tags["remove"] = [t for t in rng.sample(TAGS, rng.randint(0, 2)) if t not in tags["add"]]
    if not tags["add"] and not tags["remove"]:
        tags["add"] = [TAGS[0]]
    return {"type": "subscriber.subscribed", "email": email, "tags": tags, "id": f"race-{n}"}


def test_concurrent_events_on_a_few_subscribers_keep_every_pair_and_never_answer_5xx(local: Local) -> None:
    rng = random.Random(2026)
    events = [event(rng, n) for n in range(REQUESTS)]

    def post(body: dict[str, Any]) -> int:
        for _ in range(20):  # a client that honours 503 + Retry-After, as docs/api.md says
            status, _ = local.http("POST", "/v1/events", body, key=local.api_key)
            if status != 503:
                return status
            time.sleep(0.2)
        return 503

    with ThreadPoolExecutor(max_workers=16) as pool:
        statuses = list(pool.map(post, events))

    assert all(s == 200 for s in statuses), sorted(set(statuses))
    items = scan_all(local, local.state["tables"]["table_name"])
    for email in SUBSCRIBERS:
        profile = next(i for i in items if i["PK"]["S"] == f"SUB#{email}" and i["SK"]["S"] == "PROFILE")
        tags = set(profile.get("tags", {}).get("SS", []))
        partners = {i["PK"]["S"].removeprefix("TAG#") for i in items if i["SK"]["S"] == f"SUB#{email}"}
        partners = {p for p in partners if p in TAGS}
        assert {t for t in tags if t in TAGS} == partners, email
    pairs = {(i["PK"]["S"], i["SK"]["S"]) for i in items}
    for pk, sk in pairs:
        if pk.startswith("SUB#race") and sk.startswith("EXEC#"):
            assert (sk, pk) in pairs, (pk, sk)
        if pk.startswith("EXEC#") and sk.startswith("SUB#race"):
            assert (sk, pk) in pairs, (pk, sk)
