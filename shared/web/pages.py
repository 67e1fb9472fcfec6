"""HTML pages of the public link routes (the handlers wire these to Powertools routes): the
preference centre (``/u/<token>``: topics, unsubscribe from everything, resubscribe) here, the
sign-up confirmation pages (``/c/<token>``) in ``shared.web.signup``.

The reader's choice is the button they pressed: each form on the pages says what it does in
a field of its own. ``POST /u/<token>`` unsubscribes from everything when the page's form sends
``unsubscribe=everything``; RFC 8058's one-click (``List-Unsubscribe=One-Click``, form-urlencoded
or multipart/form-data, as the RFC allows) leaves what the link names (a topic mail's topic,
else everything). A post that says neither changes nothing (400 naming ``unsubscribe``).

Every answer is a small HTML page with ``Cache-Control: no-store``, ``noindex`` and
``Referrer-Policy: no-referrer`` (the token is in the URL). Domain errors map to statuses
through ``shared.web.http.status_for`` (invalid or expired token, or a form the page did not
send: 400; unknown or erased subscriber: 404), each refusal with its own words.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools.event_handler import Response, content_types

from shared.consent.preferences import current_choices, parse_choices, save_choices
from shared.core.errors import FieldProblem, InvalidInput, MailstepError, PayloadTooLarge, SubscriberNotFound
from shared.core.models import SUBSCRIBED
from shared.core.observability import logger
from shared.core.topics import TopicCatalog
from shared.sending.mime import parse_mailbox
from shared.sending.rendering import Renderer, renderer
from shared.sending.tokens import ExpiredToken, InvalidToken
from shared.store.subscribers import SubscriberStore
from shared.web.http import form_fields, status_for
from shared.web.unsubscribe import (
    AddressErased,
    ExecutionStopper,
    Origin,
    UnsubscribeContext,
    inspect,
    mask_email,
    refuse_if_erased,
    resubscribe,
    unsubscribe,
)

# RFC 8058: the one-click POST's one parameter, in either form encoding
ONE_CLICK_FIELD, ONE_CLICK_VALUE = "List-Unsubscribe", "One-Click"
# The page's "Unsubscribe from everything" form: its own field (templates/_pages/preferences.html)
UNSUBSCRIBE_FIELD, EVERYTHING = "unsubscribe", "everything"
MAX_UNSUBSCRIBE_FIELDS = 10
ERASED_HEADING = "We no longer hold your data"
ERASED_MESSAGE = (
    "This address was erased at your request: there is nothing to change, and nothing will be "
    "sent to it. To get our emails again, sign up again."
)
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
    says how long such links work; ``gone`` is for a link with nothing left behind it. A
    refused form (the link is fine, what was posted is not) says what was wrong with it."""
    if isinstance(exc, ExpiredToken):
        return "This link has expired", expired
    if isinstance(exc, InvalidToken):
        return "This link is not valid", "It may have been cut off or changed."
    if isinstance(exc, AddressErased):
        return ERASED_HEADING, ERASED_MESSAGE
    if isinstance(exc, InvalidInput):
        problems = "; ".join(
            p.message if p.field == "body" else f"{p.field}: {p.message}" for p in exc.problems
        )
        return "We could not use this form", problems or str(exc)
    if isinstance(exc, PayloadTooLarge):
        return "We could not use this form", "It sent more data than a form of this page does."
    return gone


def _hint(exc: Exception) -> dict[str, str]:
    """The error page's last line for ``exc``; none given: the page's default (use the link
    of a recent email), which fits a refused link."""
    if isinstance(exc, InvalidToken):
        return {}
    if isinstance(exc, AddressErased):
        return {"hint": ""}
    if isinstance(exc, InvalidInput | PayloadTooLarge):
        return {"hint": "Go back, reload the page and try again."}
    return {}


def unsubscribe_origin(body: str | None, content_type: str | None) -> Origin:
    """Which button sent this ``POST /u/<token>``: ``form`` for the page's "Unsubscribe from
    everything" (``unsubscribe=everything``), ``one_click`` for RFC 8058's parameter
    (``List-Unsubscribe=One-Click``, form-urlencoded or multipart). Anything else is a 400
    naming the field, and nothing changes."""
    fields = form_fields(body, content_type, max_fields=MAX_UNSUBSCRIBE_FIELDS)
    if UNSUBSCRIBE_FIELD in fields:
        _only(fields, UNSUBSCRIBE_FIELD, EVERYTHING)
        return "form"
    if ONE_CLICK_FIELD in fields:
        _only(fields, ONE_CLICK_FIELD, ONE_CLICK_VALUE)
        return "one_click"
    message = f"must be {EVERYTHING!r} (or send RFC 8058's {ONE_CLICK_FIELD}={ONE_CLICK_VALUE})"
    raise InvalidInput(
        f"{UNSUBSCRIBE_FIELD}: missing; {message}", [FieldProblem(UNSUBSCRIBE_FIELD, "missing")]
    )


def _only(fields: dict[str, list[str]], name: str, expected: str) -> None:
    values = [v.strip() for v in fields[name]]
    if len(values) > 1:
        raise InvalidInput(f"{name}: given more than once", [FieldProblem(name, "given more than once")])
    if values != [expected]:
        raise InvalidInput(f"{name}: must be {expected!r}", [FieldProblem(name, f"must be {expected!r}")])


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
        if profile is None and self.store.is_erased(claims.email):
            return self._page("preferences", erased=True, masked_email=mask_email(claims.email))
        return self._page(
            "preferences",
            erased=False,
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
        try:
            save_choices(claims.email, chosen, self.store, self.topics, data_ttl_days=self.data_ttl_days)
        except SubscriberNotFound:
            refuse_if_erased(self.store, claims.email)
            raise
        # relative to /u/<token>/preferences: back to GET /u/<token>
        return Response(status_code=303, headers={**HEADERS, "Location": f"../{token}?saved=1"})

    def unsubscribe(self, token: str, body: str | None, content_type: str | None) -> Response[str]:
        """POST /u/<token>: the page's "Unsubscribe from everything" or RFC 8058's one-click
        (:func:`unsubscribe_origin`); the link is checked before the form."""
        inspect(token, self.secret())
        result = unsubscribe(token, self._ctx(), origin=unsubscribe_origin(body, content_type))
        return self._page(
            "unsubscribed",
            erased=result.erased,
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
        return self._page("error", status, heading=heading, message=message, **_hint(exc))

    def not_found(self) -> Response[str]:
        return self._page("error", 404, heading="Page not found", message="This address does not exist.")
