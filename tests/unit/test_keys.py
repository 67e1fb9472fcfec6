from __future__ import annotations

from collections import Counter

import pytest

from shared.store import keys


def test_key_shapes_match_the_data_model() -> None:
    assert keys.sub_pk("a@b.co") == "SUB#a@b.co"
    assert keys.tag_pk("pro") == "TAG#pro"
    assert keys.exec_sk("onboarding") == keys.exec_pk("onboarding") == "EXEC#onboarding"
    assert keys.stats_pk("onboarding") == "STATS#onboarding"
    assert (
        keys.sent_sk("2026-01-01T00:00:00Z", "onboarding", "s1") == "SENT#2026-01-01T00:00:00Z#onboarding#s1"
    )
    assert keys.event_sk("2026-01-01T00:00:00Z", "open", "x").startswith("EVT#2026-01-01T00:00:00Z#open#")


@pytest.mark.parametrize("builder", [keys.sub_pk, keys.tag_pk, keys.exec_sk, keys.stats_pk])
def test_builders_refuse_separators_and_empty_parts(builder) -> None:
    for bad in ("", "a#b", "#"):
        with pytest.raises(ValueError):
            builder(bad)


def test_parsers_round_trip() -> None:
    assert keys.email_from_sub(keys.sub_pk("x@y.co")) == "x@y.co"
    assert keys.sequence_from_exec(keys.exec_sk("trial")) == "trial"
    with pytest.raises(ValueError):
        keys.email_from_sub("TAG#x")


def test_counter_shards_keep_shard_zero_on_the_plain_key_and_parse_back() -> None:
    pks = keys.counter_shard_pks(keys.stats_pk("b1"))
    assert pks[0] == "STATS#b1" and pks[7] == "STATS#b1#7" and len(set(pks)) == keys.COUNTER_SHARDS
    assert [keys.counter_scope(pk) for pk in pks] == [("b1", n) for n in range(keys.COUNTER_SHARDS)]
    with pytest.raises(ValueError):
        keys.counter_shard_pk("STATS#b1", keys.COUNTER_SHARDS)


def test_an_address_keeps_its_index_shard_and_addresses_spread_over_all_shards() -> None:
    shards = {keys.index_shard(f"reader{i}@example.com") for i in range(400)}
    assert shards == set(range(keys.INDEX_SHARDS))
    assert keys.index_shard("ann@example.com") == keys.index_shard("ann@example.com")
    # consecutive addresses (an import's, a page of the directory in address order) spread too:
    # 96 of them, 6 a shard on average, none holds more than 3 times that
    for start in range(0, 2000, 96):
        run = Counter(keys.index_shard(f"reader{i:05d}@example.com") for i in range(start, start + 96))
        assert max(run.values()) <= 18, (start, run)
    assert keys.index_key("b1", 3) == "b1#03" and len(set(keys.index_keys("b1"))) == keys.INDEX_SHARDS
    with pytest.raises(ValueError):
        keys.index_key("b#1", 0)
