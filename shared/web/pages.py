"""HTML pages of the public link routes (the handlers wire these to Powertools routes): the
preference centre (``/u/<token>``: topics, unsubscribe from everything, resubscribe) here, the
sign-up confirmation pages (``/c/<token>``) in ``shared.web.signup``.

Every answer is a small HTML page with ``Cache-Control: no-store``, ``noindex`` and
``Referrer-Policy: no-referrer`` (the token is in the URL). Domain errors map to statuses
through ``shared.web.http.status_for`` (invalid or expired token: 400; unknown subscriber: 404).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools.event_handler import Response, content_types

from shared.consent.preferences import current_choices, parse_choices, save_choices
from shared.core.errors import MailstepError
from shared.core.models import SUBSCRIBED
from shared.core.observability import logger
from shared.core.topics import TopicCatalog
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


def sender_name(default_from: str) -> str:
    """What the pages call the sender: the display name of ``default_from``, else its address."""
    name, address = parse_mailbox(default_from, "default_from")
    return name or address


def page(pages: Renderer | None, name: str, status: int = 200, **context: Any) -> Response[str]:
    """``templates/_pages/<name>.html`` as an answer with the link pages' headers."""
    html = (pages or renderer()).render_page(name, context)
    return Response(
        status_code=status, content_type=content_types.TEXT_HTML, body=html, headers=dict(HEADERS)
    )


def link_status(exc: Exception) -> int:
    """The status of a link page answering ``exc``: a domain error's, anything else 500."""
    return status_for(exc)[0] if isinstance(exc, MailstepError) else 500


def refused_link(exc: Exception, *, expired: str, gone: tuple[str, str]) -> tuple[str, str]:
    """Heading and message of the page for a link refused with ``exc`` (a 4xx): ``expired``
    says how long such links work; ``gone`` is for a link with nothing left behind it."""
    if isinstance(exc, ExpiredToken):
        return "This link has expired", expired
    if isinstance(exc, InvalidToken):
        return "This link is not valid", "It may have been cut off or changed."
    return gone


@dataclass(frozen=True)
class UnsubscribePages:
    store: SubscriberStore
    secret: Callable[[], str]
    sender_name: str
    data_ttl_days: int = 180
    pages: Renderer | None = None
    sequences: ExecutionStopper | None = None
    topics: TopicCatalog = field(default_factory=TopicCatalog)

    @classmethod
    def create(
        cls,
        store: SubscriberStore,
        secret: Callable[[], str],
        default_from: str,
        data_ttl_days: int,
        sequences: ExecutionStopper | None = None,
        topics: TopicCatalog | None = None,
    ) -> UnsubscribePages:
        return cls(
            store=store,
            secret=secret,
            sender_name=sender_name(default_from),
            data_ttl_days=data_ttl_days,
            sequences=sequences,
            topics=topics or TopicCatalog(),
        )

    def _ctx(self) -> UnsubscribeContext:
        return UnsubscribeContext(
            store=self.store, secret=self.secret(), data_ttl_days=self.data_ttl_days, sequences=self.sequences
        )

    def _page(self, name: str, status: int = 200, **context: Any) -> Response[str]:
        return page(self.pages, name, status, sender_name=self.sender_name, **context)

    def confirm(self, token: str, *, saved: bool = False) -> Response[str]:
        """GET: the preference centre (the reader's topics and "unsubscribe from everything");
        verifies the token and reads the profile, changes nothing."""
        claims = inspect(token, self.secret())
        profile = self.store.get_profile(claims.email) if len(self.topics) else None
        return self._page(
            "preferences",
            masked_email=mask_email(claims.email),
            choices=current_choices(profile, self.topics) if profile is not None else [],
            unsubscribed=profile is not None and profile.status != SUBSCRIBED,
            saved=saved and profile is not None,
            save_action=f"{token}/preferences",  # relative to /u/<token>
            unsubscribe_action="",  # this very URL: POST /u/<token>
        )

    def save_preferences(self, token: str, body: str | None) -> Response[str]:
        """POST /u/<token>/preferences: store the checked topics (nothing else changes), then
        show the page again through a redirect (a reload does not post twice)."""
        claims = inspect(token, self.secret())
        chosen = parse_choices(body, self.topics)
        save_choices(claims.email, chosen, self.store, self.topics, data_ttl_days=self.data_ttl_days)
        # relative to /u/<token>/preferences: back to GET /u/<token>
        return Response(status_code=303, headers={**HEADERS, "Location": f"../{token}?saved=1"})

    def unsubscribe(self, token: str, body: str | None) -> Response[str]:
        origin: Origin = "one_click" if (body or "").strip() == ONE_CLICK_BODY else "form"
        result = unsubscribe(token, self._ctx(), origin=origin)
        return self._page(
            "unsubscribed",
            masked_email=mask_email(result.claims.email),
            resubscribe_action=f"{result.resubscribe_token}/resubscribe",
            topic_name=self._topic_name(result.topic),
            preferences_href=token,  # relative to /u/<token>: the preference centre (GET)
        )

    def _topic_name(self, topic: str) -> str:
        declared = self.topics.get(topic) if topic else None
        return declared.name if declared is not None else topic

    def resubscribe(self, token: str) -> Response[str]:
        result = resubscribe(token, self._ctx())
        return self._page(
            "resubscribed",
            masked_email=mask_email(result.claims.email),
            suppressed=result.suppressed,
            topic_name=self._topic_name(result.claims.topic),
        )

    def error(self, exc: Exception) -> Response[str]:
        status = link_status(exc)
        if status >= 500:
            logger.exception("unsubscribe page failed")
            return self._page(
                "error", 500, heading="Something went wrong", message="Please try again in a minute."
            )
        heading, message = refused_link(
            exc,
            expired="Unsubscribe links stop working after a while.",
            gone=("We could not find you", "There is no subscription for this link any more."),
        )
        logger.info("unsubscribe link refused", status=status, reason=type(exc).__name__)
        return self._page("error", status, heading=heading, message=message)

    def not_found(self) -> Response[str]:
        return self._page("error", 404, heading="Page not found", message="This address does not exist.")
