"""Domain errors. Adapters translate AWS errors into these; the HTTP mapping lives in
``shared/web/http.py`` and nowhere else."""

from __future__ import annotations

from dataclasses import dataclass


class MailstepError(Exception):
    """Base class of every error mailstep raises on purpose."""


@dataclass
class FieldProblem:
    field: str
    message: str


class InvalidInput(MailstepError):
    """A client (HTTP body, YAML file, CSV row, CLI argument) sent something invalid."""

    def __init__(self, message: str, problems: list[FieldProblem] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.problems = problems or []


class Unauthorized(MailstepError):
    pass


class PayloadTooLarge(MailstepError):
    pass


class Conflict(MailstepError):
    pass


class NotFound(MailstepError):
    pass


class SubscriberNotFound(NotFound):
    pass


class ExecutionAlreadyActive(Conflict):
    pass


class AlreadyEntered(Conflict):
    """The subscriber entered this sequence before and it may be entered only once."""


class ConcurrentModification(MailstepError):
    """Optimistic concurrency gave up after several retries: answered 503 with Retry-After
    (``shared/web/http.py``); the same request succeeds when retried."""


class QuotaExceeded(MailstepError):
    """An AWS quota refused a request past its retries (a throttled StartExecution, the open
    Step Functions executions): answered 503 with Retry-After (``shared/web/http.py``). The
    caller undid its own writes, so the same request succeeds once the quota allows it."""
