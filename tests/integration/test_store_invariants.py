"""Property test: no sequence of store operations can make inverted items drift.

Hypothesis drives random operation sequences (subscribe with tags, tag, untag,
unsubscribe, resubscribe, erase, put/delete execution) against moto and, after EACH
step, scans both tables and checks every pair, plus a model of what each profile
should hold.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from shared.core.aws import client
from shared.core.errors import ExecutionAlreadyActive, SubscriberNotFound
from shared.core.specs import EVENTS_TABLE, MAIN_TABLE, STATS_FOLD_FUNCTION
from shared.store.stats import StatsStore
from shared.store.stream_counts import StreamCountFold
from shared.store.subscribers import SubscriberStore, keys
from tests.integration.conftest import fold_batches, fold_stream, scan_all
from tests.integration.webhook_support import Streams

EMAILS = st.sampled_from(["ann@example.com", "Bob@example.com", "cy@example.org"])
TAGS = st.sets(st.sampled_from(["pro", "beta", "trial", "vip.1", "a-b"]), max_size=3)
SEQUENCES = st.sampled_from(["onboarding", "trial-expiring"])


def _clear() -> None:
    ddb = client("dynamodb")
    for table in (MAIN_TABLE.local_name, EVENTS_TABLE.local_name):
        for item in scan_all(table):
            ddb.delete_item(TableName=table, Key={"PK": {"S": item["PK"]}, "SK": {"S": item["SK"]}})


def check_pairs(erased: set[str] = frozenset()) -> None:  # type: ignore[assignment]
    main = scan_all(MAIN_TABLE.local_name)
    events = scan_all(EVENTS_TABLE.local_name)
    by_key = {(i["PK"], i["SK"]): i for i in main}
    profiles = {i["PK"]: i for i in main if i["SK"] == keys.PROFILE}
    for pk, profile in profiles.items():
        for tag in profile.get("tags", set()):
            assert (keys.tag_pk(tag), pk) in by_key, f"profile tag {tag} has no TAG# partner"
    for (pk, sk), item in by_key.items():
        if pk.startswith("TAG#"):
            tag = pk[len("TAG#") :]
            assert sk in profiles and tag in profiles[sk].get("tags", set()), f"orphan TAG# item {pk}/{sk}"
        if sk.startswith(keys.EXEC_PREFIX) and pk.startswith("SUB#"):
            partner = by_key.get((sk, pk))
            assert partner is not None, f"EXEC item {pk}/{sk} has no partner"
            assert partner["execution_arn"] == item["execution_arn"]
        if pk.startswith(keys.EXEC_PREFIX):
            partner = by_key.get((sk, pk))
            assert partner is not None, f"inverted EXEC item {pk}/{sk} has no partner"
            assert sk in profiles, "execution pair without a profile"
    # the directory: exactly one item per profile, under the profile's key, with its status;
    # and one more in the sparse directory of its status when it is not subscribed
    entries = [i for i in main if i["PK"].startswith(f"{keys.DIR}#")]
    everyone = {i["email"]: i for i in entries if i["PK"] in keys.directory_pks()}
    sparse = {i["email"]: i for i in entries if i["PK"] not in keys.directory_pks()}
    assert len(everyone) + len(sparse) == len(entries), "two directory items of one address"
    assert set(everyone) == {keys.email_from_sub(pk) for pk in profiles}, "directory drifted"
    for email, entry in everyone.items():
        status = profiles[keys.sub_pk(email)]["status"]
        assert (entry["PK"], entry["SK"]) == keys.directory_key(email) and entry["status"] == status
    assert set(sparse) == {
        keys.email_from_sub(pk) for pk, p in profiles.items() if p["status"] != "subscribed"
    }, "the sparse directory drifted"
    for email, entry in sparse.items():
        status = profiles[keys.sub_pk(email)]["status"]
        assert (entry["PK"], entry["SK"]) == keys.directory_key(email, status) and entry["status"] == status
    for email in erased:
        sub = keys.sub_pk(email)
        assert not [k for k in by_key if sub in k], f"erased subscriber left items: {email}"
        assert not [e for e in events if e["PK"] == sub]


class StoreMachine(RuleBasedStateMachine):
    store: SubscriberStore

    @initialize()
    def setup(self) -> None:
        _clear()
        self.stream = Streams(STATS_FOLD_FUNCTION)  # what the stats fold reads from now on
        self.stream.skip()
        self.store = SubscriberStore(MAIN_TABLE.local_name, EVENTS_TABLE.local_name)
        self.tags: dict[str, set[str]] = {}
        self.status: dict[str, str] = {}
        self.execs: dict[tuple[str, str], str] = {}
        self.erased: set[str] = set()
        self.counter = 0

    @rule(email=EMAILS, tags=TAGS)
    def subscribe(self, email: str, tags: set[str]) -> None:
        change = self.store.upsert(email, add_tags=tags, first_name="X")
        self.tags[email] = self.tags.get(email, set()) | tags
        self.status.setdefault(email, "subscribed")
        self.erased.discard(email)
        assert change.profile is not None and change.profile.tags == self.tags[email]

    @rule(email=EMAILS, add=TAGS, remove=TAGS)
    def retag(self, email: str, add: set[str], remove: set[str]) -> None:
        remove = remove - add
        self.store.upsert(email, add_tags=add, remove_tags=remove)
        self.tags[email] = (self.tags.get(email, set()) | add) - remove
        self.status.setdefault(email, "subscribed")
        self.erased.discard(email)

    @rule(email=EMAILS)
    def unsubscribe(self, email: str) -> None:
        self.store.unsubscribe(email)
        self.tags.setdefault(email, set())
        self.status[email] = "unsubscribed"
        self.erased.discard(email)

    @rule(email=EMAILS)
    def resubscribe(self, email: str) -> None:
        try:
            self.store.resubscribe(email)
        except SubscriberNotFound:
            assert email not in self.status
            return
        self.status[email] = "subscribed"

    @rule(email=EMAILS)
    def erase(self, email: str) -> None:
        self.store.record_event(email, {"SK": keys.event_sk("2026-01-01T00:00:00Z", "x", "s1"), "type": "x"})
        self.store.erase(email)
        self.tags.pop(email, None)
        self.status.pop(email, None)
        for k in [k for k in self.execs if k[0] == email]:
            del self.execs[k]
        self.erased.add(email)

    @rule(email=EMAILS, sequence=SEQUENCES)
    def start(self, email: str, sequence: str) -> None:
        self.counter += 1
        arn = f"arn:aws:states:us-east-1:123456789012:execution:{sequence}:x{self.counter}"
        try:
            self.store.put_execution(email, sequence, arn)
        except SubscriberNotFound:
            assert email not in self.status
            return
        except ExecutionAlreadyActive:
            assert (email, sequence) in self.execs
            return
        assert (email, sequence) not in self.execs
        self.execs[(email, sequence)] = arn

    @rule(email=EMAILS, sequence=SEQUENCES, stale=st.booleans())
    def finish(self, email: str, sequence: str, stale: bool) -> None:
        arn = "arn:stale" if stale else self.execs.get((email, sequence), "arn:none")
        deleted = self.store.delete_execution(email, sequence, arn)
        assert deleted == (not stale and (email, sequence) in self.execs)
        if deleted:
            del self.execs[(email, sequence)]

    @invariant()
    def pairs_never_drift(self) -> None:
        if not hasattr(self, "store"):
            return
        check_pairs(self.erased)
        for email, tags in self.tags.items():
            profile = self.store.get_profile(email)
            assert profile is not None and profile.tags == tags and profile.status == self.status[email]
        assert {
            (e.email, e.sequence_id) for em in self.status for e in self.store.list_executions(em)
        } == set(self.execs)
        # each sequence's active-executions count, folded from the stream, moves only with its pairs
        fold_batches(StreamCountFold(MAIN_TABLE.local_name), self.stream)
        stats = StatsStore(MAIN_TABLE.local_name, EVENTS_TABLE.local_name)
        assert stats.active_of(["onboarding", "trial-expiring"]) == {
            s: sum(1 for _, seq in self.execs if seq == s) for s in ("onboarding", "trial-expiring")
        }


# Random runs of 12 steps each: 40 in the suite (480 random writes, every rule many times over),
# 300 in `make bench` (its full size).
EXAMPLES = [pytest.param(40, id="40"), pytest.param(300, id="300", marks=pytest.mark.bench)]


@pytest.mark.parametrize("examples", EXAMPLES)
def test_store_pairs_never_drift(resources, examples: int) -> None:
    run_state_machine_as_test(
        StoreMachine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=12,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )


def test_a_writer_that_loses_the_race_retries_and_keeps_both_changes(
    resources, store: SubscriberStore
) -> None:
    """Deterministic interleaving: another writer commits between our read and our write."""
    store.upsert("race@example.com", add_tags=["base", "old"])
    calls: list[frozenset[str]] = []

    def add_mine(current, now):
        calls.append(current.tags)
        if len(calls) == 1:  # the concurrent writer wins the race
            store.upsert("race@example.com", add_tags=["theirs"], remove_tags=["old"])
        return replace(current, tags=(current.tags | {"mine"}))

    change = store.mutate("race@example.com", add_mine)
    assert calls == [frozenset({"base", "old"}), frozenset({"base", "theirs"})]  # re-read after losing
    assert change.profile.tags == {"base", "theirs", "mine"}
    assert store.get_profile("race@example.com").tags == {"base", "theirs", "mine"}
    check_pairs()
    assert sorted(store.tag_members("old")) == []


def test_erase_removes_every_item_and_partner(resources, store: SubscriberStore) -> None:
    store.upsert("gone@example.com", add_tags=["a", "b"])
    store.upsert("stay@example.com", add_tags=["a"])
    store.put_execution("gone@example.com", "onboarding", "arn:1")
    stats_store = StatsStore(MAIN_TABLE.local_name, EVENTS_TABLE.local_name)
    assert fold_stream(resources).executions == 1
    assert stats_store.active_of(["onboarding"]) == {"onboarding": 1}
    store.record_event(
        "gone@example.com", {"SK": keys.event_sk("2026-01-01T00:00:00Z", "open", "1"), "type": "open"}
    )
    report = store.erase("gone@example.com")
    # profile + its directory item + 2 TAG# partners + the EXEC pair + its ENTERED# marker; the
    # event and the list-hygiene item (ENGAGEMENT) in the events table
    assert report.event_items == 2 and report.main_items == 7
    check_pairs({"gone@example.com"})
    assert store.tag_members("a") == ["stay@example.com"]
    assert fold_stream(resources).executions == 1
    counts: dict[str, int] = defaultdict(int)
    for item in scan_all(MAIN_TABLE.local_name):
        counts[item["PK"].split("#")[0]] += 1
    # the erase is remembered by a tombstone that holds a hash of the address, never the address;
    # the sequence's active-executions count (STATS#onboarding / ACTIVE shards) went +1 with the
    # pair's insert and -1 with its delete (on one of its shards each), each folded under a run's
    # mark (FOLD#...): neither holds an address
    assert 1 <= counts.pop("STATS") <= 2 and counts.pop("FOLD") == 2
    assert counts == {"SUB": 1, "TAG": 1, "DIR": 1, "ERASED": 1}  # stay@: profile, tag, directory
    assert stats_store.active_of(["onboarding"]) == {"onboarding": 0}
    assert not [i for i in scan_all(MAIN_TABLE.local_name) if "gone@" in str(i)]


WRITES = ("PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem")


def test_a_failure_after_the_first_write_of_a_change_leaves_nothing_half_visible(
    resources, store: SubscriberStore
) -> None:
    """Fault injection in the real request path: the first DynamoDB write of a change goes
    through, any further write of the same change fails. A store that writes a profile and its
    TAG# partners in one transaction shows all of the change or none of it; one that writes
    them separately is caught with a profile whose tags have no partners (or the reverse)."""
    from shared.core.aws import register_hook, unregister_hook

    _clear()
    store.upsert("ann@example.com", add_tags=["pro", "beta"])
    writes: list[str] = []

    def fail_after_first_write(model: object, **_: object) -> None:
        name = getattr(model, "name", "")
        if name in WRITES:
            writes.append(name)
            if len(writes) > 1:
                raise RuntimeError(f"injected failure before write #{len(writes)} ({name})")

    register_hook("before-call.dynamodb", fail_after_first_write)
    try:
        with contextlib.suppress(RuntimeError):  # the injected failure, if the change had a second write
            store.upsert("ann@example.com", add_tags=["trial", "vip.1"], remove_tags=["beta"])
    finally:
        unregister_hook("before-call.dynamodb", fail_after_first_write)

    check_pairs()  # every profile tag has its TAG# partner and every TAG# item its profile tag
    profile = store.get_profile("ann@example.com")
    assert profile is not None and set(profile.tags) in ({"pro", "beta"}, {"pro", "trial", "vip.1"})
