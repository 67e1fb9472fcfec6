from __future__ import annotations

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
