"""Suppression: a permanent bounce or a complaint stops all mail to an address, everywhere.

What "suppressed" means, and who reads it:
- the profile flag ``suppressed`` (one optimistic-concurrency transaction with the
  profile's tag partners) is THE gate: the send pipeline skips the subscriber with reason
  ``suppressed``, the sequence engine starts nothing for them, broadcast audiences leave
  them out; an upsert never clears it;
- ``SUB#<email>`` / ``SUPPRESSION`` records why (reason, detail, when, which mail): it
  never expires and is what ``mailstep suppression list`` shows. An address that is no
  subscriber (a bounce of other mail sent through the configuration set) gets only this
  item, no profile; a profile created for it later starts suppressed
  (``SubscriberStore.mutate`` reads the item when it creates a profile);
- every execution of the subscriber is stopped, transactional ones too (DESIGN.md 5).

Order of :meth:`Suppressions.suppress`, and why a crash anywhere is safe: (1) the flag,
(2) the SUPPRESSION item, (3) stop executions. Each step is idempotent, and the engagement
consumer writes its deduplicating event item only AFTER all three, so a crash before that
leaves the SQS record unacknowledged and the redelivery runs the missing steps; a crash
after (1) already stops all sending. Removal runs the other way round (item, then flag):
a crash in between leaves the address suppressed, never half-allowed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Protocol

from shared.core.observability import logger, redact_email
from shared.store import keys
from shared.store.dynamo import from_dynamo
from shared.store.subscribers import Profile, SubscriberStore

BOUNCE, COMPLAINT, MANUAL = "bounce", "complaint", "manual"


class ExecutionStopper(Protocol):
    """What suppression needs from the sequences capability (``SequenceEngine`` is one)."""

    def stop_all(self, email: str, *, reason: str, transactional_too: bool = True) -> list[str]: ...


@dataclass(frozen=True)
class Suppression:
    email: str
    reason: str  # bounce | complaint | manual
    detail: str
    at: str
    source: str | None = None
    template: str | None = None
    ses_message_id: str | None = None

    def public(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass(frozen=True)
class SuppressResult:
    newly_suppressed: bool  # the flag changed now (False: it was already set)
    stopped: list[str]  # sequence ids whose executions were stopped


class Suppressions:
    def __init__(self, store: SubscriberStore, stopper: ExecutionStopper | None = None) -> None:
        self.store = store
        self.stopper = stopper

    def suppress(self, record: Suppression) -> SuppressResult:
        email = record.email
        change = self.store.mutate(email, _flag_existing)  # no profile: none is created
        self._put(record)
        stopped: list[str] = []
        if self.stopper is not None:
            stopped = self.stopper.stop_all(
                email, reason=f"suppressed: {record.reason}", transactional_too=True
            )
        logger.info(
            "subscriber suppressed",
            subscriber=redact_email(email),
            reason=record.reason,
            newly=change.changed,
            executions_stopped=len(stopped),
        )
        return SuppressResult(newly_suppressed=change.changed, stopped=stopped)

    def _put(self, record: Suppression) -> None:
        self.store.put_suppression(record.public())  # the first reason is kept

    def get(self, email: str) -> Suppression | None:
        item = self.store.get_suppression(email)
        return _from_item(item) if item else None

    def remove(self, email: str) -> bool:
        """Lift a suppression (an operator decision). True when there was one to lift."""
        record = self.get(email)
        self.store.delete_suppression(email)
        profile = self.store.get_profile(email)
        changed = False
        if profile is not None and profile.suppressed:
            changed = self.store.set_suppressed(email, False).changed
        logger.info("suppression removed", subscriber=redact_email(email), had_record=record is not None)
        return record is not None or changed

    def list(self) -> list[Suppression]:
        """Every SUPPRESSION item (a filtered scan: an operator command, not a hot path)."""
        found = [_from_item(item) for item in self.store.suppression_items()]
        return sorted(found, key=lambda s: (s.at, s.email))


def _flag_existing(current: Profile | None, now: str) -> Profile | None:
    """Set the flag of an existing profile; an unknown address gets no profile."""
    if current is None or current.suppressed:
        return None
    return replace(current, suppressed=True)


def _from_item(item: dict[str, Any]) -> Suppression:
    item = from_dynamo(item)
    return Suppression(
        email=keys.email_from_sub(item["PK"]),
        reason=str(item.get("reason", "")),
        detail=str(item.get("detail", "")),
        at=str(item.get("at", "")),
        source=item.get("source"),
        template=item.get("template"),
        ses_message_id=item.get("ses_message_id"),
    )
