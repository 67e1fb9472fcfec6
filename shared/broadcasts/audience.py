"""Paged audience resolution: which subscribers a broadcast goes to, one bounded page at a time.

The driving read depends on the filter:

- ``--tag`` (all of): the first tag's ``TAG#`` partition (Query, keys only);
- only ``--any-tag``: each any-tag partition in turn; a member already found under an
  earlier any-tag is skipped, so everyone comes up once;
- no tag filter ("everyone"): a parallel Scan of the main table (``SCAN_SEGMENTS`` segments,
  ``Segment``/``TotalSegments``) with ``SK = PROFILE`` as the filter, every open segment read
  at once (one thread each) in each round of a page. A Scan reads (and bills) every item of
  the table, send claims and ``SENT#`` logs included, not only profiles: about 0.5 RRU per
  4 KB of table, e.g. ~$0.02 for a table of 100k subscribers with 20 sends each, once per
  broadcast (docs/broadcasts.md). Events live in the events table and are not scanned;
- a resend (``recipients_of``): the original broadcast's checkpointed pages (``PAGE#`` items of
  its last round), each reader's profile read by key.

Engagement conditions (``shared.broadcasts.engagement``) narrow the candidates a read found and
the tags and attributes matched, checked by key for all of them at once; they never drive.

Candidates from a ``TAG#`` partition are read in Queries of up to ``QUERY_CHUNK`` keys (as
many as the page still lacks, scaled by the share of keys that became recipients so far) and
checked against their profile: BatchGetItem, 100 keys a call, every call of a Query's keys at
once (one thread each), so a page of 1,000 costs one Query and one round of 10 BatchGetItem
when the tag's members mostly match. The checks: every other tag condition, the ``--where``
conditions, eligibility (subscribed, not suppressed) and, for a topic broadcast, whether the
reader receives the topic (``TopicCatalog.receives``: their choice, else the topic's default).
The position between pages is a small JSON cursor, so a page is resolved in one short
Lambda invocation and the next one continues where it stopped: ``part`` = which driving
read and ``key`` = DynamoDB's LastEvaluatedKey for the tag reads, or the key of the last
``TAG#`` item taken when the page filled up inside a Query's answer; for the Scan,
``segments`` (TotalSegments) and ``open``, each segment not yet exhausted with the key it
continues after (null: not started). A page ends inside a segment's (or a Query's) answer
when it is full: the read continues after the last item taken, so a page never holds more
than ``page_size`` recipients and no item is taken twice or skipped.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shared.broadcasts.engagement import EngagementReader
from shared.broadcasts.model import Audience
from shared.broadcasts.records import BroadcastStore
from shared.core.models import SUBSCRIBED
from shared.core.topics import TopicCatalog
from shared.store import keys
from shared.store.dynamo import TableAdapter, batch_get, deserialize, from_dynamo, key, page_start, values

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


PAGE_SIZE = 1000  # recipients per page (a page is split into batches for the workers)
CHUNK = 100  # keys per BatchGetItem (DynamoDB's maximum)
# TAG# keys per Query at most: a page's worth, so that a tag whose members mostly match fills a
# page in one Query. Keys only (a TAG# item is ~120 bytes): far below the 1 MB a Query answers.
QUERY_CHUNK = 1000
SCAN_CHUNK = 1000  # items evaluated per Scan call at most (a segment's share of a page, usually less)
# Segments of the "everyone" Scan, read concurrently: fixed, not derived from the table's size
# (DescribeTable's ItemCount is refreshed about every six hours, so a table just imported
# would read as empty). 16 keeps a round of a page to one Scan latency whatever the table's
# size; on a small table the extra segments cost a Scan call each (0.5 RRU) per page.
SCAN_SEGMENTS = 16
MAX_EVALUATED = 5000  # candidates looked at per page at most (bounds a page's run time)
_PROJECTION = "email, tags, attributes, #status, suppressed, topics_in, topics_out"
_SCAN_PROJECTION = "PK, SK, " + _PROJECTION  # the Scan also needs where a page may stop


@dataclass(frozen=True)
class Candidate:
    email: str
    tags: frozenset[str]
    attributes: dict[str, Any]
    status: str
    suppressed: bool
    topics_in: frozenset[str] = frozenset()
    topics_out: frozenset[str] = frozenset()
    key: dict[str, Any] | None = None  # the item's key (Scan): a page may stop after it

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> Candidate:
        data = deserialize(item)
        return cls(
            key={"PK": item["PK"], "SK": item["SK"]} if "PK" in item and "SK" in item else None,
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
        page_size: int = PAGE_SIZE,  # recipients per page, split into batches for the workers
        max_evaluated: int = MAX_EVALUATED,
        topics: TopicCatalog | None = None,
        segments: int = SCAN_SEGMENTS,
        events_table: str = "",  # the engagement conditions' ENGAGEMENT items and events
    ) -> None:
        super().__init__(table_name, client)
        self.events_table = events_table
        self.topics = topics or TopicCatalog()
        self.page_size = page_size
        self.max_evaluated = max_evaluated
        self.segments = segments

    @staticmethod
    def parts(audience: Audience) -> list[str | None]:
        """The driving reads in order: a tag partition each, or None for the profile Scan (a
        resend's ``recipients_of`` reads that broadcast's pages instead: :meth:`_recipients_page`)."""
        if audience.tags:
            return [audience.tags[0]]
        if audience.any_tags:
            return list(audience.any_tags)
        return [None]

    def page(self, audience: Audience, cursor: str | None) -> Page:
        """Resolve from ``cursor`` (None: the start) up to ``page_size`` recipients."""
        parts = self.parts(audience)
        position: dict[str, Any] = json.loads(cursor) if cursor else {"part": 0, "key": None}
        threads = max(self.segments, QUERY_CHUNK // CHUNK)  # a Scan round, or a Query's BatchGetItems
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="read") as pool:
            if audience.recipients_of is not None:
                return self._recipients_page(audience, audience.recipients_of, position, pool)
            if parts == [None]:
                return self._scan_page(audience, position, pool)
            return self._tag_page(audience, parts, position, pool)

    def _tag_page(
        self, audience: Audience, parts: list[str | None], position: dict[str, Any], pool: ThreadPoolExecutor
    ) -> Page:
        """A page of the tag-driven read: Queries of the part's ``TAG#`` partition, each of as
        many keys as the page still lacks divided by the share of keys that became recipients
        so far (at most ``QUERY_CHUNK``), their profiles read at once; a page that fills up
        inside a Query's answer continues after the last key taken."""
        part, start = int(position["part"]), position.get("key")
        emails: list[str] = []
        excluded: dict[str, int] = {}
        evaluated = 0
        while part < len(parts):
            if len(emails) >= self.page_size or evaluated >= self.max_evaluated:
                cursor = json.dumps({"part": part, "key": start}, sort_keys=True)
                return Page(emails, cursor, evaluated, excluded)
            tag = parts[part]
            assert tag is not None  # the Scan is _scan_page's
            density = len(emails) / evaluated if evaluated else 1.0
            wanted = (self.page_size - len(emails)) / max(density, 1 / QUERY_CHUNK)
            limit = max(1, min(QUERY_CHUNK, self.max_evaluated - evaluated, math.ceil(wanted)))
            found, after = self._tag_chunk(tag, start, limit, pool)
            earlier = set(parts[:part]) if audience.any_tags and not audience.tags else set()
            engaged = self._engaged(audience, [c for _, c in found if c is not None], pool)
            stop: dict[str, Any] | None = None
            for i, (item_key, candidate) in enumerate(found):
                evaluated += 1
                if candidate is not None and not candidate.tags & earlier:
                    self._take(candidate, audience, emails, excluded, engaged)
                if len(emails) >= self.page_size and i < len(found) - 1:
                    stop = item_key  # full inside this answer: continue after this key
                    break
            start = stop if stop is not None else after
            if start is None:
                part += 1
        return Page(emails, None, evaluated, excluded)

    def _engaged(
        self, audience: Audience, candidates: list[Candidate], pool: ThreadPoolExecutor
    ) -> set[str] | None:
        """Those of ``candidates`` matching the tags and attributes that also meet the engagement
        conditions (None: the audience has none), read for all of them at once."""
        if not audience.engagement:
            return None
        matching = [c.email for c in candidates if audience.matches(c.tags, c.attributes)]
        reader = EngagementReader(self.client, self.table, self.events_table)
        return reader.passing(audience, matching, pool)

    def _take(
        self,
        candidate: Candidate,
        audience: Audience,
        emails: list[str],
        excluded: dict[str, int],
        engaged: set[str] | None,
    ) -> None:
        """Add ``candidate`` to the page's recipients or to its exclusions, if the filters (and
        the engagement conditions: ``engaged``, None when there are none) match."""
        if not audience.matches(candidate.tags, candidate.attributes):
            return
        if engaged is not None and candidate.email not in engaged:
            return
        if audience.split is not None and not audience.split.keeps(candidate.email):
            return  # the other side of an A/B test (shared.broadcasts.abtest)
        reason = self._excluded(candidate, audience.topic)
        if reason is None:
            emails.append(candidate.email)
        else:
            excluded[reason] = excluded.get(reason, 0) + 1

    def _scan_page(self, audience: Audience, position: dict[str, Any], pool: ThreadPoolExecutor) -> Page:
        """A page of the "everyone" Scan: rounds of one Scan call per open segment, all at once,
        until the page is full, ``max_evaluated`` candidates were looked at or every segment is
        exhausted. Each call's ``Limit`` is the segment's share of what the page still lacks,
        scaled by the share of profiles among the items scanned so far (the Scan reads claims
        and logs too), at most ``SCAN_CHUNK``."""
        total, open_ = _scan_position(position, self.segments)
        emails: list[str] = []
        excluded: dict[str, int] = {}
        evaluated = scanned = returned = 0
        while open_ and len(emails) < self.page_size and evaluated < self.max_evaluated:
            density = returned / scanned if scanned else 1.0
            wanted = min(self.page_size - len(emails), self.max_evaluated - evaluated)
            share = wanted / len(open_) / max(density, 1 / SCAN_CHUNK)
            limit = max(1, min(SCAN_CHUNK, math.ceil(share)))
            order = sorted(open_)
            answers = self._scan_round([(s, open_[s]) for s in order], total, limit, pool)
            engaged = self._engaged(audience, [c for found, _, _ in answers for c in found], pool)
            for segment, (candidates, start, count) in zip(order, answers, strict=True):
                scanned += count
                returned += len(candidates)
                stop: dict[str, Any] | None = None
                for i, candidate in enumerate(candidates):
                    evaluated += 1
                    self._take(candidate, audience, emails, excluded, engaged)
                    if len(emails) >= self.page_size and i < len(candidates) - 1:
                        stop = candidate.key  # full inside this answer: continue after this item
                        break
                if stop is not None:
                    open_[segment] = stop
                elif start is None:
                    del open_[segment]
                else:
                    open_[segment] = start
                if len(emails) >= self.page_size:
                    break  # later segments' answers of this round are read again next page
        if not open_:
            return Page(emails, None, evaluated, excluded)
        cursor = {"part": 0, "segments": total, "open": {str(s): k for s, k in open_.items()}}
        return Page(emails, json.dumps(cursor, sort_keys=True), evaluated, excluded)

    def _recipients_page(
        self, audience: Audience, original: str, position: dict[str, Any], pool: ThreadPoolExecutor
    ) -> Page:
        """A page of a resend: the recipients the ``original`` broadcast's pages of its last
        round hold (its ``PAGE#`` items, each up to a page of addresses), in their order, each
        checked against their profile and the conditions. The cursor holds the round (read from
        the original's record on the first page, so every page reads the same round), the
        original's page and the offset in it."""
        records = BroadcastStore(self.table, self.client)
        round_ = position.get("round")
        if round_ is None:
            record = records.get(original)
            if record is None:
                return Page([], None, 0, {})
            round_ = record.round
        number, offset = int(position.get("page", 0)), int(position.get("offset", 0))
        emails: list[str] = []
        excluded: dict[str, int] = {}
        evaluated = 0
        while len(emails) < self.page_size and evaluated < self.max_evaluated:
            stored = records.get_page(original, int(round_), number)
            if stored is None:
                return Page(emails, None, evaluated, excluded)
            addresses, last = stored.emails, stored.exhausted
            chunk = addresses[offset : offset + min(QUERY_CHUNK, self.max_evaluated - evaluated)]
            profiles = self._profiles(chunk, pool)
            engaged = self._engaged(audience, list(profiles.values()), pool)
            for email in chunk:
                evaluated += 1
                offset += 1
                candidate = profiles.get(email)
                if candidate is not None:
                    self._take(candidate, audience, emails, excluded, engaged)
                if len(emails) >= self.page_size:
                    break
            if offset >= len(addresses):
                if last:
                    return Page(emails, None, evaluated, excluded)
                number, offset = number + 1, 0
        cursor = {"part": 0, "round": int(round_), "page": number, "offset": offset}
        return Page(emails, json.dumps(cursor, sort_keys=True), evaluated, excluded)

    def _scan_round(
        self,
        positions: list[tuple[int, dict[str, Any] | None]],
        total: int,
        limit: int,
        pool: ThreadPoolExecutor,
    ) -> list[tuple[list[Candidate], dict[str, Any] | None, int]]:
        """One Scan call per (segment, start), concurrently (boto3 clients are thread-safe)."""
        if len(positions) == 1:
            segment, start = positions[0]
            return [self._scan_chunk(start, limit, segment, total)]
        futures = [pool.submit(self._scan_chunk, start, limit, s, total) for s, start in positions]
        return [f.result() for f in futures]

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
    def _scan_chunk(
        self, start: dict[str, Any] | None, limit: int, segment: int, total: int
    ) -> tuple[list[Candidate], dict[str, Any] | None, int]:
        """(profiles, where the segment continues or None when exhausted, items scanned)."""
        segmented: dict[str, int] = {"Segment": segment, "TotalSegments": total} if total > 1 else {}
        response = self.client.scan(
            TableName=self.table,
            Limit=limit,
            FilterExpression="SK = :profile",
            ProjectionExpression=_SCAN_PROJECTION,
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues=values(profile=keys.PROFILE),
            **segmented,  # type: ignore[arg-type]
            **page_start(start),
        )
        items = [Candidate.from_item(i) for i in response.get("Items", []) if "email" in i]
        return items, response.get("LastEvaluatedKey"), int(response.get("ScannedCount", len(items)))

    def _tag_chunk(
        self, tag: str, start: dict[str, Any] | None, limit: int, pool: ThreadPoolExecutor
    ) -> tuple[list[tuple[dict[str, Any], Candidate | None]], dict[str, Any] | None]:
        """Up to ``limit`` keys of ``TAG#<tag>`` after ``start``, in the partition's order, each
        with its profile (None: no profile); and where the partition continues (None: done)."""
        response = self.client.query(
            TableName=self.table,
            KeyConditionExpression="PK = :pk",
            ExpressionAttributeValues=values(pk=keys.tag_pk(tag)),
            ProjectionExpression="SK",
            Limit=limit,
            **page_start(start),
        )
        pk = keys.tag_pk(tag)
        found = [(i["SK"]["S"], keys.email_from_sub(i["SK"]["S"])) for i in response.get("Items", [])]
        profiles = self._profiles([email for _, email in found], pool)
        return [(key(pk, sk), profiles.get(email)) for sk, email in found], response.get("LastEvaluatedKey")

    def _profiles(self, emails: list[str], pool: ThreadPoolExecutor) -> dict[str, Candidate]:
        """The profiles of ``emails`` that exist, by address: one BatchGetItem per ``CHUNK``
        keys, all of them at once."""
        chunks = [emails[i : i + CHUNK] for i in range(0, len(emails), CHUNK)]
        if len(chunks) <= 1:
            return self._profile_chunk(chunks[0]) if chunks else {}
        found: dict[str, Candidate] = {}
        for answer in [pool.submit(self._profile_chunk, chunk) for chunk in chunks]:
            found.update(answer.result())
        return found

    def _profile_chunk(self, emails: list[str]) -> dict[str, Candidate]:
        wanted = [key(keys.sub_pk(e), keys.PROFILE) for e in emails]
        names = {"#status": "status"}
        items = batch_get(
            self.client, self.table, wanted, ProjectionExpression=_PROJECTION, ExpressionAttributeNames=names
        )
        return {c.email: c for c in map(Candidate.from_item, items)}


def _scan_position(position: dict[str, Any], segments: int) -> tuple[int, dict[int, dict[str, Any] | None]]:
    """(TotalSegments, open segment -> the key it continues after) of a Scan cursor. A cursor
    written before the Scan was segmented (``key`` only) goes on as one sequential Scan."""
    if "open" in position:
        return int(position["segments"]), {int(s): k for s, k in position["open"].items()}
    if position.get("key"):
        return 1, {0: position["key"]}
    return segments, dict.fromkeys(range(segments))
