"""Paged audience resolution: which subscribers a broadcast goes to, one bounded page at a time.

The driving read depends on the filter:

- ``--tag`` (all of): the first tag's ``TAG#`` partition (Query, keys only);
- only ``--any-tag``: each any-tag partition in turn; a member already found under an
  earlier any-tag is skipped, so everyone comes up once;
- no tag filter ("everyone"): a paged Scan of the main table with ``SK = PROFILE`` as the
  filter. A Scan reads (and bills) every item of the table, send claims and ``SENT#`` logs
  included, not only profiles: about 0.5 RRU per 4 KB of table, e.g. ~$0.02 for a table of
  100k subscribers with 20 sends each, once per broadcast (docs/broadcasts.md). Events live
  in the events table and are never read.

Candidates from a ``TAG#`` partition are checked against their profile (BatchGetItem, 100
per call): every other tag condition, the ``--where`` conditions, eligibility (subscribed,
not suppressed) and, for a topic broadcast, whether the reader receives the topic
(``TopicCatalog.receives``: their choice, else the topic's default).
The position between pages is a small JSON cursor
(``part`` = which driving read, ``key`` = DynamoDB's LastEvaluatedKey), so a page is
resolved in one short Lambda invocation and the next one continues where it stopped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shared.broadcasts.model import Audience
from shared.core.models import SUBSCRIBED
from shared.core.topics import TopicCatalog
from shared.store import keys
from shared.store.dynamo import TableAdapter, batch_get, deserialize, from_dynamo, key, page_start, values

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


PAGE_SIZE = 1000  # recipients per page (a page is split into batches for the workers)
CHUNK = 100  # keys per Query/BatchGetItem round trip
SCAN_CHUNK = 500  # items evaluated per Scan call
MAX_EVALUATED = 5000  # candidates looked at per page at most (bounds a page's run time)
_PROJECTION = "email, tags, attributes, #status, suppressed, topics_in, topics_out"


@dataclass(frozen=True)
class Candidate:
    email: str
    tags: frozenset[str]
    attributes: dict[str, Any]
    status: str
    suppressed: bool
    topics_in: frozenset[str] = frozenset()
    topics_out: frozenset[str] = frozenset()

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> Candidate:
        data = deserialize(item)
        return cls(
            email=data["email"],
            tags=frozenset(data.get("tags", set())),
            attributes=from_dynamo(data.get("attributes", {})),
            status=data.get("status", SUBSCRIBED),
            suppressed=bool(data.get("suppressed", False)),
            topics_in=frozenset(data.get("topics_in", set())),
            topics_out=frozenset(data.get("topics_out", set())),
        )


@dataclass(frozen=True)
class Page:
    emails: list[str]
    cursor: str | None  # where the next page starts; None when exhausted
    evaluated: int
    # Subscribers the filters matched but who may not get marketing mail, by reason
    # (``suppressed``, ``unsubscribed``, ``topic_opt_out``): recorded on the broadcast as
    # skipped, never sent.
    excluded: dict[str, int] = field(default_factory=dict)

    @property
    def exhausted(self) -> bool:
        return self.cursor is None


class AudienceResolver(TableAdapter):
    def __init__(
        self,
        table_name: str,
        client: DynamoDBClient | None = None,
        *,
        page_size: int = PAGE_SIZE,
        max_evaluated: int = MAX_EVALUATED,
        topics: TopicCatalog | None = None,
    ) -> None:
        super().__init__(table_name, client)
        self.topics = topics or TopicCatalog()
        self.page_size = page_size
        self.max_evaluated = max_evaluated

    @staticmethod
    def parts(audience: Audience) -> list[str | None]:
        """The driving reads in order: a tag partition each, or None for the profile Scan."""
        if audience.tags:
            return [audience.tags[0]]
        if audience.any_tags:
            return list(audience.any_tags)
        return [None]

    def page(self, audience: Audience, cursor: str | None) -> Page:
        """Resolve from ``cursor`` (None: the start) up to about ``page_size`` recipients."""
        parts = self.parts(audience)
        position: dict[str, Any] = json.loads(cursor) if cursor else {"part": 0, "key": None}
        part, start = int(position["part"]), position.get("key")
        emails: list[str] = []
        excluded: dict[str, int] = {}
        evaluated = 0
        while part < len(parts):
            if len(emails) >= self.page_size or evaluated >= self.max_evaluated:
                cursor = json.dumps({"part": part, "key": start}, sort_keys=True)
                return Page(emails, cursor, evaluated, excluded)
            tag = parts[part]
            if tag is None:
                candidates, start = self._scan_chunk(start)
            else:
                candidates, start = self._tag_chunk(tag, start)
            evaluated += len(candidates)
            earlier = set(parts[:part]) if audience.any_tags and not audience.tags else set()
            for candidate in candidates:
                if candidate.tags & earlier or not audience.matches(candidate.tags, candidate.attributes):
                    continue
                reason = self._excluded(candidate, audience.topic)
                if reason is None:
                    emails.append(candidate.email)
                else:
                    excluded[reason] = excluded.get(reason, 0) + 1
            if start is None:
                part += 1
        return Page(emails, None, evaluated, excluded)

    def _excluded(self, candidate: Candidate, topic: str | None) -> str | None:
        """Why a matching candidate gets no marketing mail (None: they do)."""
        if candidate.suppressed:
            return "suppressed"
        if candidate.status != SUBSCRIBED:
            return "unsubscribed"
        if topic and not self.topics.receives(topic, candidate.topics_in, candidate.topics_out):
            return "topic_opt_out"
        return None

    def iterate(self, audience: Audience) -> Iterator[str]:
        """Every recipient (the CLI's dry run and tests)."""
        cursor: str | None = None
        while True:
            page = self.page(audience, cursor)
            yield from page.emails
            if page.exhausted:
                return
            cursor = page.cursor

    # ----- reads ------------------------------------------------------------------------------
    def _scan_chunk(self, start: dict[str, Any] | None) -> tuple[list[Candidate], dict[str, Any] | None]:
        response = self.client.scan(
            TableName=self.table,
            Limit=SCAN_CHUNK,
            FilterExpression="SK = :profile",
            ProjectionExpression=_PROJECTION,
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues=values(profile=keys.PROFILE),
            **page_start(start),
        )
        items = [Candidate.from_item(i) for i in response.get("Items", []) if "email" in i]
        return items, response.get("LastEvaluatedKey")

    def _tag_chunk(
        self, tag: str, start: dict[str, Any] | None
    ) -> tuple[list[Candidate], dict[str, Any] | None]:
        response = self.client.query(
            TableName=self.table,
            KeyConditionExpression="PK = :pk",
            ExpressionAttributeValues=values(pk=keys.tag_pk(tag)),
            ProjectionExpression="SK",
            Limit=CHUNK,
            **page_start(start),
        )
        emails = [keys.email_from_sub(i["SK"]["S"]) for i in response.get("Items", [])]
        return self._profiles(emails), response.get("LastEvaluatedKey")

    def _profiles(self, emails: list[str]) -> list[Candidate]:
        if not emails:
            return []
        found: dict[str, Candidate] = {}
        wanted = [key(keys.sub_pk(e), keys.PROFILE) for e in emails]
        names = {"#status": "status"}
        for item in batch_get(
            self.client, self.table, wanted, ProjectionExpression=_PROJECTION, ExpressionAttributeNames=names
        ):
            candidate = Candidate.from_item(item)
            found[candidate.email] = candidate
        # TAG# order (the partition's sort order) keeps pages deterministic.
        return [found[e] for e in emails if e in found]
