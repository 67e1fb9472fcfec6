"""Streaming CSV import and export of subscribers (``mailstep subscribers import|export``).

Import file format (a header row is required; UTF-8, a BOM is fine):
- ``email`` (required); ``first_name``; ``tags`` (names separated by ``;``, ``,`` or spaces);
  ``attributes`` (a JSON object); ``status`` (``subscribed`` or ``unsubscribed``);
- any other column becomes a string attribute of that name (an empty cell sets nothing);
- ``suppressed``, ``created_at`` and ``updated_at`` (written by export) are read-only and
  ignored, so an exported file imports back with no change.

Every row is validated exactly like an event POSTed to /v1/events (``InboundEvent``), and
the profile it makes against the per-subscriber limits (at most 50 tags, 50 attributes and
8 KiB of attributes once merged with the stored profile; ``SubscriberStore.upsert`` refuses
a write past one). A rejected row is reported with its line number and reason (bad email,
bad tag, bad attribute, bad first name, bad status, duplicate row) and never stops the import.

Guarantees:
- streaming: the file is read row by row; memory holds one window of rows plus the set of
  emails seen (to report duplicates);
- each window of rows first reads its addresses' profiles and suppressions (consistent
  BatchGetItem, 50 addresses a request); a row that would change nothing of its profile
  makes no other request, so a re-run reads the file 50 rows at a time and writes nothing;
- writes go through ``SubscriberStore.upsert_many`` started from that read: the window's rows
  in ``workers`` runs written at once, each run in shared transactions of whole subscribers
  (a profile and its TAG# partners always in the same one, at most 100 actions each), and no
  read of their own unless a transaction finds a profile changed meanwhile (then each of its
  subscribers is written on its own, the changed one read again);
- an import never resubscribes an unsubscribed subscriber (upsert never clears the
  opt-out) and never lifts a suppression;
- it starts no sequence unless ``trigger`` is given (then the sequences triggered by
  ``subscriber.subscribed`` start through the sequence engine, with execution names derived
  from the address, so a re-run starts nothing twice);
- starts are paced under the StartExecution quota (``start_rate`` a second, default
  ``DEFAULT_START_RATE``) and a throttled start is retried (``shared.sequences.sfn``); a start
  still refused after that is never dropped: its row is listed in ``starts_failed`` (its
  profile is written) and the checkpoint keeps its line, so the next run starts it;
- resumable: after each window the checkpoint file records the last line whose rows are all
  written, and the lines whose start failed; a run that finds a checkpoint for the same file
  skips the writes up to that line except those lines (a plain re-run from the start is just
  as correct, only slower). A run that ends with starts failed keeps its checkpoint.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import IO, Any, BinaryIO, TextIO

from pydantic import ValidationError

from ops.admin import SubscriberAdmin
from shared.core.errors import FieldProblem, InvalidInput, QuotaExceeded
from shared.core.models import SUBSCRIBE_EVENT, SUBSCRIBED, UNSUBSCRIBED, InboundEvent, problems_from
from shared.core.observability import logger
from shared.core.public import public_fields
from shared.sequences.engine import SequenceEngine
from shared.sequences.sfn import StartPolicy, StepFunctions
from shared.sequences.validate import Catalog
from shared.store.subscribers import Change, Known, Profile, ProfileChange, SubscriberStore, Upsert

EXPORT_COLUMNS = (
    "email",
    "first_name",
    "status",
    "tags",
    "attributes",
    "suppressed",
    "created_at",
    "updated_at",
)
READ_ONLY_COLUMNS = frozenset({"suppressed", "created_at", "updated_at"})
KNOWN_COLUMNS = frozenset({"email", "first_name", "tags", "attributes", "status"}) | READ_ONLY_COLUMNS
TAG_SPLIT = re.compile(r"[;,\s]+")
WINDOW = 256
DEFAULT_WORKERS = 8
# StartExecution calls a second with --trigger: two thirds of the smallest regional refill
# (150/s outside us-east-1, us-west-2 and eu-west-1), leaving the rest of the account's
# bucket to the events API and sign-ups that start executions meanwhile (docs/sequences.md).
DEFAULT_START_RATE = 100.0
# How long one start may keep retrying a throttled StartExecution before its row is reported.
IMPORT_START_PATIENCE_S = 60.0

REASONS = {
    "email": "bad email",
    "tags": "bad tag",
    "attributes": "bad attribute",
    "first_name": "bad first name",
}


@dataclass(frozen=True)
class Row:
    line: int
    event: InboundEvent  # validated like POST /v1/events
    unsubscribed: bool


@dataclass(frozen=True)
class Rejected:
    line: int  # the CSV reader's line number (the header is line 1)
    reason: str


@dataclass(frozen=True)
class StartFailed:
    """A written row whose sequence start was refused by a quota past the retries: the next
    run (same file, its checkpoint) starts it."""

    line: int
    sequences: tuple[str, ...]
    reason: str

    def public(self) -> dict[str, Any]:
        return {"line": self.line, "sequences": list(self.sequences), "reason": self.reason}


@dataclass(frozen=True)
class Triggered:
    """What a trigger did for one subscriber: starts made, and the sequences whose start failed."""

    started: int = 0
    failed: tuple[str, ...] = ()
    reason: str = ""


# ImportReport.public(): its keys, in order.
_REPORT_KEYS = (
    "file dry_run rows valid created updated unchanged skipped_before_checkpoint"
    " resumed_after_line sequences_started starts_failed rejected seconds rows_per_second"
)


@dataclass
class ImportReport:
    file: str
    dry_run: bool = False
    rows: int = 0  # data rows read
    valid: int = 0
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    skipped_before_checkpoint: int = 0
    resumed_after_line: int = 0
    sequences_started: int = 0
    starts_failed: list[StartFailed] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def written(self) -> int:
        return self.created + self.updated + self.unchanged

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0

    def public(self) -> dict[str, Any]:
        return public_fields(
            self,
            _REPORT_KEYS,
            rejected=[{"line": r.line, "reason": r.reason} for r in self.rejected],
            starts_failed=[f.public() for f in self.starts_failed],
            seconds=round(self.seconds, 3),
            rows_per_second=round(self.rows_per_second, 1),
        )


class _CountingReader(io.RawIOBase):
    """Counts the bytes read from a binary stream (progress without knowing the row count)."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.raw.read(len(buffer))
        buffer[: len(data)] = data
        self.count += len(data)
        return len(data)


def _reason(exc: ValidationError) -> str:
    problems = problems_from(exc)
    first = problems[0]
    head = first.field.split(".", 1)[0].split("[", 1)[0]
    return f"{REASONS.get(head, 'bad ' + head)}: {first.message}"


def parse_rows(text: TextIO, extra_tags: tuple[str, ...] = ()) -> Iterator[Row | Rejected]:
    """Validate the rows of a CSV stream one by one (the header is line 1)."""
    reader = csv.DictReader(text)
    header = [h.strip() for h in reader.fieldnames or []]
    if "email" not in header:
        raise InvalidInput(
            "the CSV header must name an 'email' column", [FieldProblem("header", "no email column")]
        )
    reader.fieldnames = header
    seen: dict[str, int] = {}
    for record in reader:
        line = reader.line_num
        if None in record:
            yield Rejected(line, "bad row: more cells than header columns")
            continue
        cells = {k: (v or "").strip() for k, v in record.items() if k}
        status = cells.get("status", "") or SUBSCRIBED
        if status not in (SUBSCRIBED, UNSUBSCRIBED):
            yield Rejected(line, f"bad status: {status[:40]!r} (subscribed or unsubscribed)")
            continue
        attributes: dict[str, Any] = {}
        if cells.get("attributes"):
            try:
                attributes = json.loads(cells["attributes"])
            except ValueError:
                yield Rejected(line, "bad attribute: the attributes column is not JSON")
                continue
            if not isinstance(attributes, dict):
                yield Rejected(line, "bad attribute: the attributes column must be a JSON object")
                continue
        for name, value in cells.items():
            if name not in KNOWN_COLUMNS and value:
                attributes[name] = value
        tags = [t for t in TAG_SPLIT.split(cells.get("tags", "")) if t]
        tags = list(dict.fromkeys([*tags, *extra_tags]))
        body: dict[str, Any] = {"type": SUBSCRIBE_EVENT, "email": cells.get("email", "")}
        if cells.get("first_name"):
            body["first_name"] = cells["first_name"]
        if attributes:
            body["attributes"] = attributes
        if tags:
            body["tags"] = tags
        try:
            event = InboundEvent.model_validate(body)
        except ValidationError as exc:
            yield Rejected(line, _reason(exc))
            continue
        first = seen.get(event.email)
        if first is not None:
            yield Rejected(line, f"duplicate row: {event.email} is on line {first} already")
            continue
        seen[event.email] = line
        yield Row(line, event, unsubscribed=status == UNSUBSCRIBED)


def import_starts(start_rate: float = DEFAULT_START_RATE) -> StartPolicy:
    """The start policy of an import: paced to ``start_rate`` a second, patient with throttling."""
    if not start_rate > 0:
        raise InvalidInput(
            "the start rate must be a positive number of starts a second",
            [FieldProblem("start_rate", "must be > 0")],
        )
    return StartPolicy(rate_per_s=start_rate, patience_s=IMPORT_START_PATIENCE_S, max_delay_s=8.0)


class SequenceTrigger:
    """Starts the sequences triggered by ``subscriber.subscribed`` for an imported subscriber,
    through the sequence engine (eligibility, one active execution, idempotent names)."""

    def __init__(self, engine: SequenceEngine) -> None:
        self.engine = engine
        self.sequences = engine.catalog.by_trigger(SUBSCRIBE_EVENT)

    @classmethod
    def load(
        cls,
        store: SubscriberStore,
        arn_prefix: str,
        sequences_dir: Path,
        sfn: StepFunctions | None = None,
        *,
        start_rate: float = DEFAULT_START_RATE,  # StartExecution calls a second (--trigger)
    ) -> SequenceTrigger:
        """The trigger of an import: its starts paced to ``start_rate`` a second (one pace for
        all the import's workers) on ``sfn``'s client."""
        from shared.sequences.validate import require_catalog

        catalog: Catalog = require_catalog(sequences_dir)
        paced = (sfn or StepFunctions()).with_starts(import_starts(start_rate))
        engine = SequenceEngine(catalog=catalog, arn_prefix=arn_prefix, store=store, sfn=paced)
        return cls(engine)

    def __call__(self, profile: Profile) -> Triggered:
        """Start each triggered sequence; one refused by a quota does not stop the others."""
        event_id = "import-" + hashlib.sha256(profile.email.encode()).hexdigest()[:32]
        event = InboundEvent(type=SUBSCRIBE_EVENT, email=profile.email, id=event_id)
        started, failed, reason = 0, [], ""
        for sequence in self.sequences:
            try:
                started += self.engine.start(sequence, profile, event)
            except QuotaExceeded as exc:
                failed.append(sequence.id)
                reason = str(exc)
        return Triggered(started, tuple(failed), reason)


Progress = Callable[[int, int], None]  # (bytes read, rows read)


def _checkpoint_read(path: Path, source: Path) -> tuple[int, frozenset[int]]:
    """(last line written, lines whose sequence start is still to make) of a checkpoint."""
    if not path.exists():
        return 0, frozenset()
    data = json.loads(path.read_text())
    stat = source.stat()
    if data.get("file") != str(source.resolve()) or data.get("size") != stat.st_size:
        return 0, frozenset()  # a checkpoint of another file (or the file changed): start over
    return int(data.get("line", 0)), frozenset(int(n) for n in data.get("starts_failed", ()))


def _checkpoint_write(path: Path, source: Path, line: int, starts_failed: list[int]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    record: dict[str, Any] = {"file": str(source.resolve()), "size": source.stat().st_size, "line": line}
    if starts_failed:
        record["starts_failed"] = sorted(starts_failed)
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)


def checkpoint_path(source: Path) -> Path:
    return source.with_name(source.name + ".checkpoint")


Trigger = Callable[[Profile], Triggered]
_NOTHING = Triggered()


def _written(change: Change | InvalidInput) -> tuple[str, Profile | None]:
    """A row's outcome (``created``, ``updated``, ``unchanged`` or ``rejected: <why>``) from
    what ``SubscriberStore.upsert_many`` answered for it, and the profile it has now."""
    if isinstance(change, InvalidInput):  # a per-subscriber limit, checked on the merged profile
        problem = change.problems[0] if change.problems else FieldProblem("row", change.message)
        head = problem.field.split(".", 1)[0]
        return f"rejected: {REASONS.get(head, 'bad ' + head)}: {problem.message}", None
    return "created" if change.created else "updated" if change.changed else "unchanged", change.profile


def _write_window(
    window: list[Row],
    store: SubscriberStore,
    known: Mapping[str, Known],
    pool: ThreadPoolExecutor,
    workers: int,
) -> list[tuple[Row, str, Profile | None]]:
    """Upsert the rows of one window: each row, its outcome (see :func:`_written`) and its
    profile now. ``known`` holds the window's addresses read just before (profile and
    suppression, consistent BatchGetItem, 50 rows a request). The rows are split into
    ``workers`` runs of consecutive rows written at once, each with
    ``SubscriberStore.upsert_many``: a row that would change nothing of its known profile
    makes no request, the others go in shared transactions of whole subscribers (about 30
    new subscribers with a few tags each per TransactWriteItems) conditioned on what was read,
    so a profile changed meanwhile is read again, never overwritten."""
    upserts = [
        Upsert(
            row.event.email,
            known.get(row.event.email) or Known(profile=None),
            ProfileChange(
                first_name=row.event.first_name,
                attributes=row.event.attributes,
                add_tags=row.event.tags.add if row.event.tags else (),
                unsubscribe=row.unsubscribed,
            ),
        )
        for row in window
    ]
    size = -(-len(window) // max(1, workers))
    runs = [upserts[i : i + size] for i in range(0, len(upserts), size)]
    changes = [change for answered in pool.map(store.upsert_many, runs) for change in answered]
    return [(row, *_written(change)) for row, change in zip(window, changes, strict=True)]


def _triggered(trigger: Trigger, written: tuple[Row, str, Profile | None]) -> Triggered:
    """What ``trigger`` did for one written row (nothing for a rejected one)."""
    _, outcome, profile = written
    return trigger(profile) if profile is not None and not outcome.startswith("rejected: ") else _NOTHING


def _tally(report: ImportReport, row: Row, outcome: str, triggered: Triggered) -> None:
    """Count one written row (see :func:`_write`) in ``report``."""
    if outcome.startswith("rejected: "):
        report.rejected.append(Rejected(row.line, outcome.removeprefix("rejected: ")))
        report.valid -= 1
    else:
        setattr(report, outcome, getattr(report, outcome) + 1)
        report.sequences_started += triggered.started
        if triggered.failed:
            report.starts_failed.append(StartFailed(row.line, triggered.failed, triggered.reason))


def import_csv(
    source: Path,
    store: SubscriberStore,
    *,
    extra_tags: tuple[str, ...] = (),
    dry_run: bool = False,
    trigger: Trigger | None = None,
    workers: int = DEFAULT_WORKERS,
    checkpoint: Path | None = None,
    progress: Progress | None = None,
) -> ImportReport:
    """Import ``source`` (rules in the module docstring). ``checkpoint=None`` disables resuming."""
    started = time.perf_counter()
    report = ImportReport(file=str(source), dry_run=dry_run)
    resume_after, retry_starts = (
        (0, frozenset()) if dry_run or checkpoint is None else _checkpoint_read(checkpoint, source)
    )
    if trigger is None:
        retry_starts = frozenset()  # without --trigger the rows done before need nothing more
    report.resumed_after_line = resume_after

    with source.open("rb") as raw, ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        counter = _CountingReader(raw)
        text = io.TextIOWrapper(io.BufferedReader(counter), encoding="utf-8-sig", newline="")
        window: list[Row] = []
        last_line = 0

        def flush() -> None:
            nonlocal window
            known = store.known(row.event.email for row in window)
            written = _write_window(window, store, known, pool, workers)
            triggers = (
                pool.map(partial(_triggered, trigger), written) if trigger else [_NOTHING] * len(written)
            )
            for (row, outcome, _), triggered in zip(written, triggers, strict=True):
                _tally(report, row, outcome, triggered)
            window = []
            if checkpoint is not None and not dry_run:
                pending = [f.line for f in report.starts_failed]
                _checkpoint_write(checkpoint, source, max(last_line, resume_after), pending)

        for item in parse_rows(text, extra_tags):
            report.rows += 1
            last_line = item.line
            if isinstance(item, Rejected):
                report.rejected.append(item)
            else:
                report.valid += 1
                if dry_run:
                    pass
                elif item.line <= resume_after and item.line not in retry_starts:
                    report.skipped_before_checkpoint += 1
                else:
                    window.append(item)
                    if len(window) >= WINDOW:
                        flush()
            if progress and report.rows % 100 == 0:
                progress(counter.count, report.rows)
        if window:
            flush()
        if progress:
            progress(counter.count, report.rows)
    if checkpoint is not None and not dry_run and checkpoint.exists() and not report.starts_failed:
        checkpoint.unlink()  # complete: nothing to resume
    report.rejected.sort(key=lambda r: r.line)
    report.seconds = time.perf_counter() - started
    logger.info(  # counts only: no address, no cell of a row
        "subscribers imported",
        rows=report.rows,
        rows_created=report.created,
        rows_updated=report.updated,
        rows_unchanged=report.unchanged,
        rows_rejected=len(report.rejected),  # the reasons are in the report, not the log
        starts_failed=len(report.starts_failed),
        dry_run=dry_run,
        rows_per_second=round(report.rows_per_second, 1),
    )
    return report


def export_csv(
    admin: SubscriberAdmin, out: IO[str], *, tag: str | None = None, status: str | None = None
) -> int:
    """Write matching subscribers to ``out`` as CSV (streamed page by page); returns the count."""
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(EXPORT_COLUMNS)
    count = 0
    for profile in admin.iter(tag=tag, status=status):
        writer.writerow(
            [
                profile.email,
                profile.first_name or "",
                profile.status,
                " ".join(sorted(profile.tags)),
                json.dumps(profile.attributes, sort_keys=True, separators=(",", ":"))
                if profile.attributes
                else "",
                "true" if profile.suppressed else "false",
                profile.created_at,
                profile.updated_at,
            ]
        )
        count += 1
    return count
