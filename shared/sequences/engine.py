"""Start and stop sequence executions (called by the events dispatch, suppression, erase,
the cleanup function and the CLI).

Ordering, and why no crash leaves a lasting mismatch (docs/sequences.md, "Guarantees"):

- Start: the EXEC pair is written FIRST (one transaction, naming the execution ARN that
  StartExecution will produce: the name is deterministic), THEN the execution starts.
  A crash in between leaves a pair without an execution; it is healed by (a) the retry of
  the same event (same name: the pair is recognised as ours and the start completes),
  (b) the next trigger (a pair whose execution is not RUNNING is replaced), (c)
  ``mailstep sequences reconcile``. A failed StartExecution removes the pair it wrote.
- A start the StartExecution quota still refuses after the adapter's retries
  (``QuotaExceeded``, ``shared.sequences.sfn``) is such a failed start: the pair (and a
  once-only entry marker) is removed and the error goes to the caller, who reports it instead
  of dropping it: the events API answers 503 to retry, the CSV import lists the row and its
  checkpoint brings the row back to the next run. The retry uses the same execution name.
- Stop: StopExecution FIRST, then the pair is removed (conditioned on the ARN). A crash in
  between leaves a pair naming an aborted execution; the cloud cleanup rule (execution
  status change -> cleanup function) and the healing above remove it.
- Running executions check at every step that the pair still names them and end quietly
  when it does not, so an execution whose pair was removed (erase) never sends again.
- Normal end, failure (Catch), timeout and abort: the last Task of every path and the
  ``fail`` Task remove the pair; a timeout or abort is handled by the cleanup function.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from shared.core.errors import AlreadyEntered, ExecutionAlreadyActive, SubscriberNotFound
from shared.core.models import UNSUBSCRIBE_EVENT, UNSUBSCRIBED, InboundEvent
from shared.core.observability import logger, redact_email
from shared.core.settings import Settings
from shared.sequences import SEQUENCES_DIR
from shared.sequences.compiler import tag_key
from shared.sequences.evaluate import evaluate
from shared.sequences.model import Sequence
from shared.sequences.sfn import RUNNING, StepFunctions, execution_arn
from shared.sequences.validate import Catalog, require_catalog, templates_checked_at_synth
from shared.store.subscribers import Execution, Profile, SubscriberStore

STOP_ERROR = "mailstep.stopped"
STALE_PAIR_AGE = timedelta(minutes=5)  # reconcile leaves younger orphan pairs alone (a start in flight)


def execution_name(sequence_id: str, email: str, event_key: str) -> str:
    """Deterministic, <= 80 chars: ``<sequence id, <= 38 chars>-<40 hex of sha256>``."""
    digest = hashlib.sha256(f"{sequence_id}\n{email}\n{event_key}".encode()).hexdigest()[:40]
    return f"{sequence_id[:38]}-{digest}"


@dataclass(frozen=True)
class SequenceEngine:
    catalog: Catalog
    arn_prefix: str  # state machine ARN without the sequence id: arn:aws:states:<r>:<a>:stateMachine:<prefix>
    store: SubscriberStore
    sfn: StepFunctions = field(default_factory=StepFunctions)

    def state_machine_arn(self, sequence_id: str) -> str:
        return f"{self.arn_prefix}{sequence_id}"

    # ----- events -----------------------------------------------------------------------
    def on_event(self, event: InboundEvent, profile: Profile | None) -> tuple[list[str], list[str]]:
        """Stop what the event ends, then start what it triggers: (started, stopped) ids."""
        stopped: list[str] = []
        exiting = {s.id for s in self.catalog.exiting_on(event.type)}
        unsubscribe = event.type == UNSUBSCRIBE_EVENT
        if profile is not None and (exiting or unsubscribe):  # else nothing can stop: no read
            for execution in self.store.list_executions(event.email):
                if execution.sequence_id in exiting or (unsubscribe and not execution.transactional):
                    self.stop(execution, reason=f"event {event.type}")
                    stopped.append(execution.sequence_id)
        started: list[str] = []
        if profile is None:
            return started, stopped
        for sequence in self.catalog.by_trigger(event.type):
            if self.start(sequence, profile, event):
                started.append(sequence.id)
        return started, stopped

    def stop_all(self, email: str, *, reason: str, transactional_too: bool = True) -> list[str]:
        """Suppression (all executions) and unsubscribe (marketing only) from outside the API."""
        stopped = []
        for execution in self.store.list_executions(email):
            if transactional_too or not execution.transactional:
                self.stop(execution, reason=reason)
                stopped.append(execution.sequence_id)
        return stopped

    # ----- start ------------------------------------------------------------------------
    def eligible(self, sequence: Sequence, profile: Profile) -> bool:
        if profile.suppressed:
            return False
        if not sequence.transactional and profile.status == UNSUBSCRIBED:
            return False
        where = sequence.trigger_filter
        return where is None or evaluate(where, profile.tags, profile.attributes)

    def start(self, sequence: Sequence, profile: Profile, event: InboundEvent) -> bool:
        """Start ``sequence`` for the subscriber; False when nothing new was started."""
        if not self.eligible(sequence, profile):
            return False
        machine = self.state_machine_arn(sequence.id)
        name = execution_name(sequence.id, profile.email, event.id or uuid.uuid4().hex)
        arn = execution_arn(machine, name)
        payload = start_input(sequence, profile, event)
        log: dict[str, Any] = {
            "sequence": sequence.id,
            "subscriber": redact_email(profile.email),
            "execution": name,
        }
        if sequence.is_one_off:
            result = self.sfn.start(machine, name, payload)
            logger.info("one-off mail started", new=result.created, **log)
            return result.created
        claim = self._claim(sequence, profile.email, arn)
        if claim is None:
            logger.info("sequence active or already entered: re-entry ignored", **log)
            return False
        if claim == "ours" and self.sfn.status(arn) is not None:
            return False  # a retried event whose start already happened
        try:
            result = self.sfn.start(machine, name, payload)
        except Exception:
            self.store.delete_execution(profile.email, sequence.id, arn)
            self.store.forget_entry(profile.email, sequence.id, arn)
            raise
        if not result.created and result.status != RUNNING:
            # a name used before (an event id replayed after its execution ended): not a new start
            self.store.delete_execution(profile.email, sequence.id, arn)
            logger.info("execution name already used", status=result.status, **log)
            return False
        logger.info("sequence started", new=result.created, **log)
        return result.created

    def _claim(self, sequence: Sequence, email: str, arn: str) -> str | None:
        """Write the EXEC pair for ``arn``: "new", "ours" (a retry of the same event found
        its own pair), or None (an active execution keeps it; no start). Restart and stale
        pairs are handled here."""
        for _ in range(3):
            try:
                self.store.put_execution(
                    email,
                    sequence.id,
                    arn,
                    transactional=sequence.transactional,
                    once=sequence.reentry == "ignore",
                )
                return "new"
            except (SubscriberNotFound, AlreadyEntered):
                return None
            except ExecutionAlreadyActive:
                current = self._current(email, sequence.id)
                if current is None:
                    continue  # removed meanwhile: try again
                if current.execution_arn == arn:
                    return "ours"
                status = self.sfn.status(current.execution_arn)
                if status == RUNNING and sequence.reentry != "restart":
                    return None
                if status == RUNNING:
                    self.stop(current, reason="re-entry restart")
                else:
                    self.store.delete_execution(email, sequence.id, current.execution_arn)
                    if status is None:  # a start that never happened does not count as an entry
                        self.store.forget_entry(email, sequence.id, current.execution_arn)
        return None

    def _current(self, email: str, sequence_id: str) -> Execution | None:
        return next((e for e in self.store.list_executions(email) if e.sequence_id == sequence_id), None)

    # ----- stop and cleanup ---------------------------------------------------------------
    def stop(self, execution: Execution, *, reason: str) -> None:
        self.sfn.stop(execution.execution_arn, error=STOP_ERROR, cause=reason)
        self.store.delete_execution(execution.email, execution.sequence_id, execution.execution_arn)
        logger.info(
            "sequence stopped",
            sequence=execution.sequence_id,
            reason=reason,
            subscriber=redact_email(execution.email),
        )

    def reconcile(self, sequence_id: str, *, now: datetime | None = None) -> int:
        """Remove pairs whose execution is not running (older than a few minutes); returns count."""
        moment = now or datetime.now(UTC)
        removed = 0
        for email in self.store.sequence_members(sequence_id):
            current = self._current(email, sequence_id)
            if current is None or self.sfn.status(current.execution_arn) == RUNNING:
                continue
            started = _parse_ts(current.started_at)
            if started is not None and moment - started < STALE_PAIR_AGE:
                continue
            if self.store.delete_execution(email, sequence_id, current.execution_arn):
                removed += 1
        return removed


def cleanup_execution(store: SubscriberStore, execution_arn_: str, payload: dict[str, Any] | None) -> bool:
    """An execution ended (failed, timed out, aborted): remove its pair if it still names it."""
    if not payload or "email" not in payload or "sequence" not in payload:
        return False
    return store.delete_execution(str(payload["email"]), str(payload["sequence"]), execution_arn_)


def start_input(sequence: Sequence, profile: Profile, event: InboundEvent) -> dict[str, Any]:
    """Execution input: ids, the start snapshot native Choice states read, and the trigger
    event's data (immutable; templates read it as ``data``)."""
    return {
        "email": profile.email,
        "sequence": sequence.id,
        "tags": {tag_key(t): True for t in sorted(profile.tags)},
        "attributes": profile.attributes,
        "event": {"type": event.type, **({"id": event.id} if event.id else {})},
        "data": event.data or {},
    }


def _parse_ts(value: str) -> datetime | None:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def engine_from_settings(
    settings: Settings, store: SubscriberStore | None = None, sequences_dir: Path = SEQUENCES_DIR
) -> SequenceEngine | None:
    """The engine the events dispatch uses; None when no state machine prefix is configured."""
    if not settings.state_machine_arn_prefix:
        return None
    return SequenceEngine(
        catalog=require_catalog(sequences_dir, templates=templates_checked_at_synth),
        arn_prefix=settings.state_machine_arn_prefix,
        store=store or SubscriberStore(settings.table_name, settings.events_table_name),
    )
