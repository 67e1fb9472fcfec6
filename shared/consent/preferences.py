"""The reader's topic choices from the preference centre (``/u/<token>``).

- :func:`current_choices` is what the page shows: every declared topic with whether the
  reader receives it (their choice, else the topic's default); it reads only.
- :func:`parse_choices` reads the page's form (``topics`` repeated, one per checked box, and a
  hidden empty value so that "none checked" is a choice): every value must be a declared topic.
- :func:`save_choices` stores the whole choice on the profile (``topics_in``: the checked
  topics, ``topics_out``: every other declared topic) through the store, and records one
  ``preferences.updated`` event when something changed. Saving never subscribes or
  unsubscribes anyone: "unsubscribe from everything" is its own form on the page.
- :func:`change_topics` is the operator's change of some topics (``mailstep subscribers
  topics --on/--off``, the MCP tool): the named topics are validated against the catalog
  (an unknown one is an error naming it, nothing is written), the others keep their choice
  or default.

Both write through ONE path (:func:`_store_choice`): ``SubscriberStore.set_topics`` (the
profile's optimistic transaction), then the ``preferences.updated`` event (its ``origin``
says who: ``preferences`` or ``operator``) when something changed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import parse_qs

from shared.core import clock
from shared.core.errors import FieldProblem, InvalidInput, PayloadTooLarge
from shared.core.observability import logger, redact_email
from shared.core.topics import MAX_TOPICS, Topic, TopicCatalog, choices_from
from shared.store.subscribers import Change, Profile, SubscriberStore

PREFERENCES_EVENT = "preferences.updated"
PREFERENCES_ORIGIN, OPERATOR_ORIGIN = "preferences", "operator"
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
    topics_in, topics_out = choices_from(chosen, catalog)
    change = _store_choice(
        email, topics_in, topics_out, store, origin=PREFERENCES_ORIGIN, data_ttl_days=data_ttl_days, now=now
    )
    return change.changed


def change_topics(
    email: str,
    on: Iterable[str],
    off: Iterable[str],
    store: SubscriberStore,
    catalog: TopicCatalog,
    *,
    origin: str = OPERATOR_ORIGIN,
    data_ttl_days: int = 180,
    now: datetime | None = None,
) -> Change:
    """Turn the ``on`` topics on and the ``off`` topics off for ``email``; every other topic
    keeps the reader's choice or its default. Every named topic must be declared: an unknown
    one (or one named both on and off) is an :class:`InvalidInput` naming it, before anything
    is read or written. A reader without a profile is :class:`SubscriberNotFound`."""
    turn_on, turn_off = frozenset(t.strip() for t in on), frozenset(t.strip() for t in off)
    unknown = sorted((turn_on | turn_off) - {t.id for t in catalog})
    if unknown:
        declared = ", ".join(t.id for t in catalog) or "none"
        names = ", ".join(repr(u[:64]) for u in unknown[:5])
        problem = f"unknown topic{'s' if len(unknown) > 1 else ''} {names} (declared: {declared})"
        raise InvalidInput(problem, [FieldProblem(FIELD, problem)])
    both = sorted(turn_on & turn_off)
    if both:
        problem = f"topics both on and off: {', '.join(both)}"
        raise InvalidInput(problem, [FieldProblem(FIELD, problem)])
    if not turn_on and not turn_off:
        raise InvalidInput("nothing to change: name topics to turn on or off", [FieldProblem(FIELD, "empty")])
    return _store_choice(email, turn_on, turn_off, store, origin=origin, data_ttl_days=data_ttl_days, now=now)


def _store_choice(
    email: str,
    on: frozenset[str],
    off: frozenset[str],
    store: SubscriberStore,
    *,
    origin: str,
    data_ttl_days: int,
    now: datetime | None,
) -> Change:
    """The one write of a reader's topic choices: the store's optimistic transaction, then one
    ``preferences.updated`` event holding the stored choice when it changed."""
    moment = now or clock.utc_now()
    change = store.set_topics(email, on=on, off=off)
    if change.changed and change.profile is not None:
        store.add_event(
            email,
            PREFERENCES_EVENT,
            at=moment,
            ttl_days=data_ttl_days,
            origin=origin,
            data={
                "topics_in": sorted(change.profile.topics_in),
                "topics_out": sorted(change.profile.topics_out),
            },
        )
    logger.info(
        "preferences saved",
        subscriber=redact_email(email),
        origin=origin,
        changed=change.changed,
        topics_on=len(on),
        topics_off=len(off),
    )
    return change
