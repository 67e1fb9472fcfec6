"""Lifting a suppression with the operator's reason: ``Suppressions.remove`` (as
``mailstep suppression remove`` does), and the reason kept as a ``suppression_removed`` event
in the address's timeline."""

from __future__ import annotations

from shared.core import clock
from shared.core.errors import FieldProblem, InvalidInput
from shared.engagement.suppression import Suppressions

EVENT = "suppression_removed"
MAX_REASON = 500


def lift(suppressions: Suppressions, email: str, reason: str, *, data_ttl_days: int) -> bool:
    """Lift ``email``'s suppression (True: there was one), recording ``reason``."""
    reason = reason.strip()
    if not reason or len(reason) > MAX_REASON:
        raise InvalidInput(f"give a reason (1-{MAX_REASON} characters)", [FieldProblem("reason", "required")])
    removed = suppressions.remove(email)
    if removed:
        suppressions.store.add_event(
            email, EVENT, at=clock.utc_now(), ttl_days=data_ttl_days, origin="operator", reason=reason
        )
    return removed
