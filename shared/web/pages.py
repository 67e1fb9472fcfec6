"""HTML pages of the unsubscribe routes (the handler wires these to Powertools routes).

Every answer is a small HTML page with ``Cache-Control: no-store``, ``noindex`` and
``Referrer-Policy: no-referrer`` (the token is in the URL). Domain errors map to statuses
through ``shared.web.http.status_for`` (invalid or expired token: 400; unknown subscriber: 404).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools.event_handler import Response, content_types

from shared.core.errors import MailstepError
from shared.core.observability import logger
from shared.sending.mime import parse_mailbox
from shared.sending.rendering import Renderer, renderer
from shared.sending.tokens import ExpiredToken, InvalidToken
from shared.store.subscribers import SubscriberStore
from shared.web.http import status_for
from shared.web.unsubscribe import (
    ExecutionStopper,
    Origin,
    UnsubscribeContext,
    inspect,
    mask_email,
    resubscribe,
    unsubscribe,
)

ONE_CLICK_BODY = "List-Unsubscribe=One-Click"
HEADERS = {
    "Cache-Control": "no-store",
    "X-Robots-Tag": "noindex, nofollow",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'",
}


@dataclass(frozen=True)
class UnsubscribePages:
    store: SubscriberStore
    secret: Callable[[], str]
    sender_name: str
    data_ttl_days: int = 180
    pages: Renderer | None = None
    sequences: ExecutionStopper | None = None

    @classmethod
    def create(
        cls,
        store: SubscriberStore,
        secret: Callable[[], str],
        default_from: str,
        data_ttl_days: int,
        sequences: ExecutionStopper | None = None,
    ) -> UnsubscribePages:
        name, address = parse_mailbox(default_from, "default_from")
        return cls(
            store=store,
            secret=secret,
            sender_name=name or address,
            data_ttl_days=data_ttl_days,
            sequences=sequences,
        )

    def _ctx(self) -> UnsubscribeContext:
        return UnsubscribeContext(
            store=self.store, secret=self.secret(), data_ttl_days=self.data_ttl_days, sequences=self.sequences
        )

    def _page(self, name: str, status: int = 200, **context: Any) -> Response:
        html = (self.pages or renderer()).render_page(name, {"sender_name": self.sender_name, **context})
        return Response(
            status_code=status, content_type=content_types.TEXT_HTML, body=html, headers=dict(HEADERS)
        )

    def confirm(self, token: str) -> Response:
        """GET: verify and ask; changes nothing."""
        claims = inspect(token, self.secret())
        return self._page("confirm", masked_email=mask_email(claims.email))

    def unsubscribe(self, token: str, body: str | None) -> Response:
        origin: Origin = "one_click" if (body or "").strip() == ONE_CLICK_BODY else "form"
        result = unsubscribe(token, self._ctx(), origin=origin)
        return self._page(
            "unsubscribed",
            masked_email=mask_email(result.claims.email),
            resubscribe_action=f"{result.resubscribe_token}/resubscribe",
        )

    def resubscribe(self, token: str) -> Response:
        result = resubscribe(token, self._ctx())
        return self._page(
            "resubscribed", masked_email=mask_email(result.claims.email), suppressed=result.suppressed
        )

    def error(self, exc: Exception) -> Response:
        if isinstance(exc, MailstepError):
            status, _ = status_for(exc)
        else:
            status = 500
        if status >= 500:
            logger.exception("unsubscribe page failed")
            return self._page(
                "error", 500, heading="Something went wrong", message="Please try again in a minute."
            )
        if isinstance(exc, ExpiredToken):
            heading, message = "This link has expired", "Unsubscribe links stop working after a while."
        elif isinstance(exc, InvalidToken):
            heading, message = "This link is not valid", "It may have been cut off or changed."
        else:
            heading, message = "We could not find you", "There is no subscription for this link any more."
        logger.info("unsubscribe link refused", status=status, reason=type(exc).__name__)
        return self._page("error", status, heading=heading, message=message)

    def not_found(self) -> Response:
        return self._page("error", 404, heading="Page not found", message="This address does not exist.")
