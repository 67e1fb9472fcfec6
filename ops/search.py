"""Finding subscribers: by address prefix, tag, status and topic, a page at a time.

- A whole address is one read (GetItem).
- With a tag, the tag's ``TAG#`` partition is read (a Query; prefix filtered here), else the
  subscriber directory (``DIR#`` items, 8 partitions queried and merged in address order;
  the prefix and the status are key and filter conditions of those Queries): both through
  ``ops.admin.SubscriberAdmin.list`` and its cursor, which the result's cursor wraps. The
  topic is filtered here.
- A search filtered here (a topic; a prefix with a tag) reads at most :data:`READ_PAGES` pages
  of :data:`READ_PAGE` subscribers: a narrow filter over a large table answers with what those
  pages held and a cursor to go on, never with a read of the whole table. Otherwise one page
  of ``limit`` is read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ops.admin import SubscriberAdmin, email_arg, status_arg, tag_arg
from shared.core.errors import FieldProblem, InvalidInput
from shared.core.topics import TopicCatalog
from shared.store.subscribers import Profile

READ_PAGE = 100
READ_PAGES = 5


@dataclass(frozen=True)
class Search:
    prefix: str = ""
    tag: str | None = None
    status: str | None = None
    topic: str | None = None

    @classmethod
    def of(
        cls,
        prefix: str = "",
        tag: str = "",
        status: str = "",
        topic: str = "",
        topics: TopicCatalog | None = None,
    ) -> Search:
        """Validated form values ('' means any)."""
        chosen = topic.strip() or None
        if chosen is not None and topics is not None and chosen not in topics:
            raise InvalidInput(f"no topic {chosen!r} in topics.yaml", [FieldProblem("topic", chosen)])
        return cls(
            prefix=prefix.strip(),
            tag=tag_arg(tag.strip()) if tag.strip() else None,
            status=status_arg(status.strip() or None),
            topic=chosen,
        )

    def matches(self, profile: Profile, topics: TopicCatalog) -> bool:
        if self.prefix and not profile.email.lower().startswith(self.prefix.lower()):
            return False
        return self.topic is None or (
            profile.receives(self.topic, topics) and not profile.suppressed and profile.status == "subscribed"
        )


@dataclass(frozen=True)
class Found:
    subscribers: tuple[Profile, ...]
    cursor: str | None  # where the next search goes on (None: nothing more)

    def public(self) -> dict[str, Any]:
        return {"subscribers": [p.public() for p in self.subscribers], "cursor": self.cursor}


def _exact(prefix: str) -> str | None:
    if "@" not in prefix or prefix.endswith("@"):
        return None
    try:
        return email_arg(prefix)
    except InvalidInput:
        return None


def search(
    admin: SubscriberAdmin, query: Search, topics: TopicCatalog, *, limit: int = 50, cursor: str | None = None
) -> Found:
    """About ``limit`` matching subscribers from ``cursor`` on (see the module docstring)."""
    address = _exact(query.prefix)
    if address is not None and cursor is None:
        profile = admin.store.get_profile(address)
        hit = profile is not None and query.matches(profile, topics)
        hit = hit and (query.tag is None or query.tag in profile.tags)  # type: ignore[union-attr]
        hit = hit and (query.status is None or profile.status == query.status)  # type: ignore[union-attr]
        return Found((profile,) if hit and profile is not None else (), None)
    found: list[Profile] = []
    for _ in range(READ_PAGES):
        prefix = "" if query.tag else query.prefix
        # only a topic (or a prefix with a tag) is filtered here: without one, a page of the
        # listing is the answer, so read no more than it shows
        filtered = query.topic is not None or bool(query.tag and query.prefix)
        wanted = READ_PAGE if filtered else limit
        page = admin.list(tag=query.tag, status=query.status, prefix=prefix, limit=wanted, cursor=cursor)
        found += [p for p in page.subscribers if query.matches(p, topics)]
        cursor = page.cursor
        if cursor is None or len(found) >= limit:
            break
    # Every match of the pages read is returned (a few more than ``limit`` at most a page's
    # worth): the cursor points after the last page read, so none is skipped.
    return Found(tuple(found), cursor)
