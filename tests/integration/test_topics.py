"""Topic gating on moto: the send pipeline skips a reader who does not receive the job's topic
(``topic_opt_out``, recorded), never gates transactional mail, names the topic in List-Id and
the unsubscribe token; the one-click of a topic mail leaves only that topic; audience
resolution leaves opted-out readers out with the reason; a sequence's ``topic`` reaches the
send step."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from email import policy
from email.parser import BytesParser
from pathlib import Path
from typing import Any

import pytest

from shared.broadcasts.audience import AudienceResolver
from shared.broadcasts.model import Audience
from shared.core.topics import TOPICS_FILE, require_topics
from shared.sending.jobs import SendJob
from shared.sending.pipeline import SendContext, send
from shared.sending.tokens import TokenClaims, issue, verify
from shared.sequences.validate import load_catalog
from shared.store.stats import StatsStore
from shared.store.subscribers import SubscriberStore
from shared.web.unsubscribe import UnsubscribeContext, resubscribe, unsubscribe
from tests.integration.conftest import SECRET

TOPICS = require_topics(TOPICS_FILE)  # product-updates: default on; newsletter: default off


@pytest.fixture
def ctx(send_ctx: SendContext) -> SendContext:
    return replace(send_ctx, topics=TOPICS)


def _job(email: str, step: str, **extra: Any) -> SendJob:
    return SendJob(email=email, template="welcome", source="news", step=step, **extra)


def _skips(store: SubscriberStore, email: str) -> list[str]:
    return [e["reason"] for e in store.list_events(email) if e["type"] == "send_skipped"]


def test_the_pipeline_follows_the_choice_then_the_default_and_never_gates_transactional(ctx, store, outbox):
    store.upsert("out@example.com")
    store.set_topics("out@example.com", off=["product-updates"])
    store.upsert("plain@example.com")  # no choice: product-updates on, newsletter off by default
    store.upsert("keen@example.com")
    store.set_topics("keen@example.com", on=["newsletter"])

    outcomes = {
        ("out", "updates"): send(_job("out@example.com", "a", topic="product-updates"), ctx),
        ("out", "none"): send(_job("out@example.com", "b"), ctx),
        ("out", "transactional"): send(
            _job("out@example.com", "c", topic="product-updates", transactional=True), ctx
        ),
        ("plain", "updates"): send(_job("plain@example.com", "a", topic="product-updates"), ctx),
        ("plain", "newsletter"): send(_job("plain@example.com", "b", topic="newsletter"), ctx),
        ("keen", "newsletter"): send(_job("keen@example.com", "a", topic="newsletter"), ctx),
    }

    found = {case: (o.status, o.reason) for case, o in outcomes.items()}
    assert found == {
        ("out", "updates"): ("skipped", "topic_opt_out"),
        ("out", "none"): ("sent", None),
        ("out", "transactional"): ("sent", None),
        ("plain", "updates"): ("sent", None),
        ("plain", "newsletter"): ("skipped", "topic_opt_out"),
        ("keen", "newsletter"): ("sent", None),
    }
    assert len(outbox) == 4
    assert _skips(store, "out@example.com") == ["topic_opt_out"]
    assert _skips(store, "plain@example.com") == ["topic_opt_out"]


def test_a_topic_mail_names_its_topic_in_list_id_and_in_its_unsubscribe_token(ctx, store, outbox):
    store.upsert("reader@example.com")
    assert send(_job("reader@example.com", "a", topic="product-updates"), ctx).status == "sent"
    assert send(_job("reader@example.com", "b"), ctx).status == "sent"
    topic_mail, plain_mail = (
        BytesParser(policy=policy.default).parsebytes(m.raw_data.encode()) for m in outbox
    )

    assert topic_mail["List-Id"] == '"Product updates" <product-updates.acme.test>'
    assert plain_mail["List-Id"] == '"news" <news.acme.test>'
    token = str(topic_mail["List-Unsubscribe"]).split(",")[0].strip("<> ").rsplit("/", 1)[1]
    assert verify(token, SECRET, purpose="unsubscribe").topic == "product-updates"
    token = str(plain_mail["List-Unsubscribe"]).split(",")[0].strip("<> ").rsplit("/", 1)[1]
    assert verify(token, SECRET, purpose="unsubscribe").topic == ""


def _token(email: str, topic: str = "") -> str:
    claims = TokenClaims(email=email, source="news", template="welcome", send_id="s1", topic=topic)
    return issue(claims, SECRET, ttl_seconds=3600)


def test_one_click_of_a_topic_mail_leaves_that_topic_only_and_a_repeat_changes_nothing(store, resources):
    store.upsert("reader@example.com")
    store.set_topics("reader@example.com", on=["newsletter"])
    ctx = UnsubscribeContext(store=store, secret=SECRET)
    token = _token("reader@example.com", "newsletter")

    first = unsubscribe(token, ctx, origin="one_click")
    again = unsubscribe(token, ctx, origin="one_click")

    assert (first.changed, first.topic, again.changed) == (True, "newsletter", False)
    profile = store.require_profile("reader@example.com")
    assert (profile.status, profile.topics_in, profile.topics_out) == ("subscribed", set(), {"newsletter"})
    events = [e for e in store.list_events("reader@example.com") if "unsubscribe" in e["type"]]
    assert [(e["type"], e["topic"]) for e in events] == [("topic_unsubscribe", "newsletter")]
    stats = StatsStore(resources.tables["table_name"], resources.tables["events_table_name"])
    assert stats.source("news").total("unsubscribe") == 1  # counted once, for the real change

    # "Subscribe again" on the page turns the topic back on, and only the topic
    back = resubscribe(first.resubscribe_token, ctx)
    assert back.changed and back.claims.topic == "newsletter"
    profile = store.require_profile("reader@example.com")
    assert (profile.status, profile.topics_in, profile.topics_out) == ("subscribed", {"newsletter"}, set())


def test_the_page_button_of_a_topic_mail_still_unsubscribes_from_everything(store):
    store.upsert("reader@example.com")
    result = unsubscribe(
        _token("reader@example.com", "product-updates"), UnsubscribeContext(store, SECRET), origin="form"
    )
    assert (result.changed, result.topic) == (True, "")
    profile = store.require_profile("reader@example.com")
    assert (profile.status, profile.topics_out) == ("unsubscribed", frozenset())


def test_audience_resolution_leaves_out_who_does_not_receive_the_topic(store, resources):
    for name in ("a", "b", "c", "d"):
        store.upsert(f"{name}@example.com", add_tags=["t"])
    store.set_topics("b@example.com", off=["product-updates"])
    store.set_topics("c@example.com", on=["newsletter"])
    store.unsubscribe("d@example.com")
    resolver = AudienceResolver(resources.tables["table_name"], topics=TOPICS)

    def resolve(topic: str | None) -> tuple[set[str], dict[str, int]]:
        page = resolver.page(Audience(tags=("t",), topic=topic), None)
        return {e.split("@")[0] for e in page.emails}, page.excluded

    assert resolve(None) == ({"a", "b", "c"}, {"unsubscribed": 1})
    assert resolve("product-updates") == ({"a", "c"}, {"unsubscribed": 1, "topic_opt_out": 1})
    assert resolve("newsletter") == ({"c"}, {"unsubscribed": 1, "topic_opt_out": 2})


def _sequence(tmp_path: Path, body: str) -> tuple[Any, list[str]]:
    (tmp_path / "sequences").mkdir()
    (tmp_path / "sequences" / "news.yaml").write_text(body)
    catalog, problems = load_catalog(tmp_path / "sequences", templates=lambda key, subject: [], topics=TOPICS)
    return catalog, [str(p) for p in problems]


def test_a_sequence_topic_must_be_declared_and_a_transactional_sequence_takes_none(tmp_path: Path):
    base = "trigger: subscriber.subscribed\nsteps:\n  - send: welcome\n"
    catalog, problems = _sequence(tmp_path, "topic: product-updates\n" + base)
    assert problems == [] and catalog.get("news").topic == "product-updates"

    for body, message in (
        ("topic: nope\n" + base, "sequences/news.yaml:1: topic 'nope' is not declared in topics.yaml"),
        (
            "transactional: true\ntopic: newsletter\n" + base,
            "sequences/news.yaml:2: a transactional sequence takes no topic",
        ),
    ):
        for child in (tmp_path / "sequences").iterdir():
            child.unlink()
        (tmp_path / "sequences").rmdir()
        _, problems = _sequence(tmp_path, body)
        assert len(problems) == 1 and problems[0].startswith(message), problems


def test_a_topic_reaches_the_compiled_send_step(tmp_path: Path) -> None:
    from shared.sequences.compiler import compile_sequence

    catalog, problems = _sequence(
        tmp_path, "topic: newsletter\ntrigger: subscriber.subscribed\nsteps:\n  - send: welcome\n"
    )
    assert problems == []
    definition = compile_sequence(catalog.get("news"))
    sends = [s for s in _states(definition) if s.get("Parameters", {}).get("action") == "send"]
    assert sends and all(s["Parameters"]["topic"] == "newsletter" for s in sends)


def _states(definition: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for state in definition.get("States", {}).values():
        yield state
        for branch in state.get("Branches", []):
            yield from _states(branch)
