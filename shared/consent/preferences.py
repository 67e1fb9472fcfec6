"""The reader's topic choices from the preference centre (``/u/<token>``).

- :func:`current_choices` is what the page shows: every declared topic with whether the
  reader receives it (their choice, else the topic's default); it reads only.
- :func:`parse_choices` reads the page's form (``topics`` repeated, one per checked box, and a
  hidden empty value so that "none checked" is a choice): every value must be a declared topic.
- :func:`save_choices` stores the whole choice on the profile (``topics_in``: the checked
  topics, ``topics_out``: every other declared topic) through the store, and records one
  ``preferences.updated`` event when something changed. Saving never subscribes or
  unsubscribes anyone: "unsubscribe from everything" is its own form on the page.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from urllib.parse import parse_qs

from shared.core import clock
from shared.core.errors import FieldProblem, InvalidInput, PayloadTooLarge, SubscriberNotFound
from shared.core.observability import logger, redact_email
from shared.core.topics import MAX_TOPICS, Topic, TopicCatalog, choices_from
from shared.store.events import event_record
from shared.store.subscribers import Profile, SubscriberStore

PREFERENCES_EVENT = "preferences.updated"
FIELD = "topics"
MAX_BODY_BYTES = 8 * 1024


@dataclass(frozen=True)
class Choice:
    topic: Topic
    wanted: bool


def current_choices(profile: Profile | None, catalog: TopicCatalog) -> list[Choice]:
    """Every declared topic, in file order, with whether the reader receives it."""
    reader = profile or Profile(email="")
    return [Choice(topic, reader.receives(topic.id, catalog)) for topic in catalog]


def parse_choices(
    body: str | None, catalog: TopicCatalog, *, max_bytes: int = MAX_BODY_BYTES
) -> frozenset[str]:
    """The checked topics of a preference form post; unknown topics are a 400 naming them."""
    raw = body or ""
    if len(raw.encode()) > max_bytes:
        raise PayloadTooLarge(f"request body exceeds {max_bytes} bytes")
    try:
        fields = parse_qs(raw, keep_blank_values=True, max_num_fields=MAX_TOPICS + 10)
    except ValueError:
        raise InvalidInput(
            "the form has too many fields", [FieldProblem("body", "too many fields")]
        ) from None
    if FIELD not in fields:
        message = "the form must send its topics (a hidden empty value when none is checked)"
        raise InvalidInput(message, [FieldProblem(FIELD, "missing")])
    chosen = {value for value in fields[FIELD] if value != ""}
    unknown = sorted(chosen - {t.id for t in catalog})
    if unknown:
        problem = f"unknown topics {', '.join(repr(u[:64]) for u in unknown[:5])}"
        raise InvalidInput(problem, [FieldProblem(FIELD, problem)])
    return frozenset(chosen)


def save_choices(
    email: str,
    chosen: frozenset[str],
    store: SubscriberStore,
    catalog: TopicCatalog,
    *,
    data_ttl_days: int = 180,
    now: datetime | None = None,
) -> bool:
    """Store the whole choice on ``email``'s profile; True when it changed something.
    A reader without a profile (erased) is a 404: there is nobody to hold the choice."""
    moment = now or clock.utc_now()
    topics_in, topics_out = choices_from(chosen, catalog)

    def apply(current: Profile | None, _now: str) -> Profile:
        if current is None:
            raise SubscriberNotFound("no such subscriber")
        return replace(current, topics_in=topics_in, topics_out=topics_out)

    change = store.mutate(email, apply)
    if change.changed:
        record = event_record(
            email,
            PREFERENCES_EVENT,
            at=moment,
            ttl_days=data_ttl_days,
            origin="preferences",
            data={"topics_in": sorted(topics_in), "topics_out": sorted(topics_out)},
        )
        store.record_event(email, record)
    logger.info(
        "preferences saved", subscriber=redact_email(email), changed=change.changed, topics_in=len(topics_in)
    )
    return change.changed
