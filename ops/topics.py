"""Topics and pending sign-ups for operators: what ``mailstep topics list``, ``mailstep
subscribers topics``, ``mailstep signups pending`` and their MCP tools do.

- :meth:`TopicAdmin.counts`: every declared topic with how many subscribers receive it (by
  the one rule, ``Profile.receives``) and how many chose it explicitly, in or out. It reads
  the whole main table once: a paged, filtered Scan (``SubscriberStore.iter_profiles``),
  charged for every item of the table (profiles, tag and execution pairs, send log, ...), not
  only the profiles: about 0.5 read units per 4 KB scanned, so a table of 1 GB costs about
  130,000 read units. An operator command, never a hot path.
- :meth:`TopicAdmin.subscriber` / :meth:`TopicAdmin.change`: one reader's topics (each
  declared topic, received or not, by their choice or by default); a change goes through
  ``shared.consent.preferences.change_topics``, the write the preference centre uses.
- :meth:`TopicAdmin.pending`: the live pending sign-ups (``PendingSignups.live``: a filtered
  Scan of the same cost; expired ones are filtered by their ``expires_at``, never left to
  TTL deletion), newest first.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ops.admin import email_arg
from shared.consent.preferences import change_topics
from shared.core import clock
from shared.core.errors import FieldProblem, InvalidInput, SubscriberNotFound
from shared.core.models import SUBSCRIBED
from shared.core.topics import TOPICS_FILE, Topic, TopicCatalog, require_topics
from shared.store.pending import PendingSignup, PendingSignups
from shared.store.subscribers import Profile, SubscriberStore

if TYPE_CHECKING:
    from ops.targets import Target

MAX_PENDING = 1000
CHOICE, DEFAULT = "choice", "default"


def _on_off(value: bool) -> str:
    return "on" if value else "off"


@dataclass(frozen=True)
class TopicCount:
    topic: Topic
    receiving: int  # subscribed, not suppressed readers who receive it (choice or default)
    opted_in: int  # of those readers, how many chose it explicitly
    opted_out: int  # ... and how many left it explicitly

    def public(self) -> dict[str, Any]:
        return {
            "id": self.topic.id,
            "name": self.topic.name,
            "default": _on_off(self.topic.default),
            "receiving": self.receiving,
            "opted_in": self.opted_in,
            "opted_out": self.opted_out,
        }


@dataclass(frozen=True)
class TopicCounts:
    subscribers: int  # subscribed and not suppressed: who can receive marketing mail at all
    topics: tuple[TopicCount, ...]

    def public(self) -> dict[str, Any]:
        return {"subscribers": self.subscribers, "topics": [t.public() for t in self.topics]}


@dataclass(frozen=True)
class TopicState:
    topic: Topic
    receives: bool
    source: str  # CHOICE: the reader's own choice; DEFAULT: the topic's default

    def public(self) -> dict[str, Any]:
        return {
            "id": self.topic.id,
            "name": self.topic.name,
            "receives": self.receives,
            "source": self.source,
            "default": _on_off(self.topic.default),
        }


@dataclass(frozen=True)
class SubscriberTopics:
    email: str
    status: str
    suppressed: bool
    topics: tuple[TopicState, ...]
    # Choices about topics topics.yaml does not declare (any more): kept, shown apart.
    undeclared_in: tuple[str, ...] = ()
    undeclared_out: tuple[str, ...] = ()
    changed: bool | None = None  # after a change: whether it changed anything

    @classmethod
    def of(cls, profile: Profile, catalog: TopicCatalog, changed: bool | None = None) -> SubscriberTopics:
        declared = {t.id for t in catalog}
        states = tuple(
            TopicState(
                topic,
                profile.receives(topic.id, catalog),
                CHOICE if topic.id in profile.topics_in | profile.topics_out else DEFAULT,
            )
            for topic in catalog
        )
        return cls(
            email=profile.email,
            status=profile.status,
            suppressed=profile.suppressed,
            topics=states,
            undeclared_in=tuple(sorted(profile.topics_in - declared)),
            undeclared_out=tuple(sorted(profile.topics_out - declared)),
            changed=changed,
        )

    def public(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "email": self.email,
            "status": self.status,
            "suppressed": self.suppressed,
            "topics": [t.public() for t in self.topics],
        }
        if self.undeclared_in or self.undeclared_out:
            out["undeclared"] = {"in": list(self.undeclared_in), "out": list(self.undeclared_out)}
        if self.changed is not None:
            out["changed"] = self.changed
        return out


def _iso(epoch_seconds: int) -> str:
    return clock.iso(datetime.fromtimestamp(epoch_seconds, UTC))


def pending_public(pending: PendingSignup) -> dict[str, Any]:
    """A pending sign-up as operators see it (no first name: the reader has not confirmed)."""
    return {
        "email": pending.email,
        "form": pending.form,
        "created_at": pending.created_at,
        "expires_at": _iso(pending.expires_at),
        "last_mail_at": _iso(pending.last_mail_at) if pending.last_mail_at else None,
        "topics": list(pending.topics) if pending.topics is not None else None,
    }


@dataclass(frozen=True)
class PendingPage:
    total: int  # live pending sign-ups in all
    signups: tuple[PendingSignup, ...]  # the newest ``limit`` of them

    def public(self) -> dict[str, Any]:
        return {"total": self.total, "pending": [pending_public(p) for p in self.signups]}


class TopicAdmin:
    def __init__(
        self,
        store: SubscriberStore,
        pending: PendingSignups,
        catalog: TopicCatalog,
        *,
        data_ttl_days: int = 180,
    ) -> None:
        self.store = store
        self.pending_signups = pending
        self.catalog = catalog
        self.data_ttl_days = data_ttl_days

    @classmethod
    def of(cls, target: Target, topics_file: Path = TOPICS_FILE) -> TopicAdmin:
        """Wired to ``target``; the catalog is the project's ``topics.yaml`` (the file the
        Lambda asset ships), an invalid one an error naming file and line."""
        settings = target.settings
        return cls(
            target.subscriber_store(),
            PendingSignups(settings.table_name, client=target.client("dynamodb")),
            require_topics(topics_file),
            data_ttl_days=settings.data_ttl_days,
        )

    def counts(self) -> TopicCounts:
        """Every declared topic with its readers (see the module docstring for the cost)."""
        receiving: Counter[str] = Counter()
        opted_in: Counter[str] = Counter()
        opted_out: Counter[str] = Counter()
        readers = 0
        for profile, _ in self.store.iter_profiles(status=SUBSCRIBED):
            if profile.suppressed:
                continue
            readers += 1
            for topic in self.catalog:
                receiving[topic.id] += profile.receives(topic.id, self.catalog)
                opted_in[topic.id] += topic.id in profile.topics_in
                opted_out[topic.id] += topic.id in profile.topics_out
        return TopicCounts(
            subscribers=readers,
            topics=tuple(
                TopicCount(t, receiving[t.id], opted_in[t.id], opted_out[t.id]) for t in self.catalog
            ),
        )

    def subscriber(self, email: str) -> SubscriberTopics:
        """One reader's topics (one GetItem)."""
        profile = self.store.require_profile(email_arg(email))
        return SubscriberTopics.of(profile, self.catalog)

    def change(
        self, email: str, on: list[str] | tuple[str, ...], off: list[str] | tuple[str, ...]
    ) -> SubscriberTopics:
        """Turn topics on and off for one reader (validated first: nothing is written for an
        unknown topic); the others keep their choice or default."""
        address = email_arg(email)
        change = change_topics(address, on, off, self.store, self.catalog, data_ttl_days=self.data_ttl_days)
        if change.profile is None:  # the store found no profile to change
            raise SubscriberNotFound("no such subscriber")
        return SubscriberTopics.of(change.profile, self.catalog, changed=change.changed)

    def pending(self, *, limit: int = 100, now: datetime | None = None) -> PendingPage:
        """The live pending sign-ups, newest first (at most ``limit``; ``total`` counts all)."""
        if not 1 <= limit <= MAX_PENDING:
            raise InvalidInput(f"limit must be 1..{MAX_PENDING}", [FieldProblem("limit", str(limit))])
        moment = clock.epoch(now)
        live = sorted(self.pending_signups.live(now=moment), key=lambda p: p.created_at, reverse=True)
        return PendingPage(total=len(live), signups=tuple(live[:limit]))
