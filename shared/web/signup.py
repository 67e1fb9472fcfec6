"""HTTP answers of the sign-up routes (the handler wires these to Powertools routes).

- ``POST /v1/signup``: a JSON request gets the JSON of ``SignupOutcome.public()`` (200, the
  same whatever happened to the address; 429 with ``Retry-After`` when the client or the
  recipient domain is over its limit); an HTML form post gets a 303 to its ``redirect`` (an
  allowed origin) or, without one or when the sign-up was held or refused, a small page. Problems are 4xx:
  JSON for JSON requests (``shared.web.http``), an HTML page for form posts.
- ``GET /c/<token>``: the confirm page (reads only: link scanners confirm nobody) with a
  form that POSTs to the same URL.
- ``POST /c/<token>``: confirms; the "you are subscribed" page.

Answers to the confirmation links carry the link pages' headers (``no-store``, ``noindex``,
no referrer: the token is in the URL).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools.event_handler import Response, content_types

from shared.consent.confirm import StaleConfirmation, confirm, inspect
from shared.consent.context import ConsentContext
from shared.consent.record import Requester
from shared.consent.signup import FORM_TYPES, SignupOutcome, SignupRules, parse_signup, signup
from shared.core.errors import InvalidInput, MailstepError
from shared.core.observability import logger
from shared.sending.rendering import Renderer
from shared.web.http import RETRY_AFTER_S, error_response, status_for
from shared.web.pages import HEADERS, link_status, page, refused_link, sender_name
from shared.web.unsubscribe import mask_email

CONFIRM_HINT = "Sign up again to get a new confirmation link."
STALE_HEADING = "This link was replaced"
STALE_MESSAGE = (
    "This address was signed up again after this link was sent, so this link no longer "
    "confirms anything. Only the link in the newest confirmation mail works."
)


def is_form(content_type: str | None) -> bool:
    return (content_type or "").split(";", 1)[0].strip().lower() in FORM_TYPES


@dataclass(frozen=True)
class SignupPages:
    ctx: ConsentContext
    sender_name: str  # shown on the pages (the display name of default_from)
    pages: Renderer | None = None  # None: the shared renderer of templates/_pages

    @classmethod
    def create(cls, ctx: ConsentContext, default_from: str) -> SignupPages:
        return cls(ctx=ctx, sender_name=sender_name(default_from))

    def _page(self, name: str, status: int = 200, **context: Any) -> Response[str]:
        return page(self.pages, name, status, sender_name=self.sender_name, **context)

    # ----- POST /v1/signup ------------------------------------------------------------
    def signup(
        self, body: str | bytes | None, content_type: str | None, *, requester: Requester
    ) -> tuple[Response[str], SignupOutcome]:
        rules = SignupRules(self.ctx.topics, self.ctx.config.origins)
        request = parse_signup(body, content_type, rules, max_bytes=self.ctx.config.max_body_bytes)
        outcome = signup(request, self.ctx, requester=requester)
        if not is_form(content_type):
            answer = Response(
                outcome.status_code,
                content_types.APPLICATION_JSON,
                json.dumps(outcome.public()),
                headers=outcome.headers,
            )
        elif outcome.redirect and not outcome.shows_page:
            answer = Response(303, headers={"Location": outcome.redirect, "Cache-Control": "no-store"})
        else:
            public = outcome.public()
            answer = self._page(
                "signup_accepted",
                outcome.status_code,
                confirmation=public["confirmation"],
                message=public["message"],
                held=public["status"] == "held",
                try_later=public["status"] == "try_later",
            )
            answer.headers.update(outcome.headers)
        return answer, outcome

    def signup_error(self, exc: Exception, content_type: str | None) -> Response[str]:
        """A refused sign-up: JSON for JSON clients, a page for a form post."""
        status, code = status_for(exc) if isinstance(exc, MailstepError) else (500, "internal_error")
        if status >= 500 and status != 503:
            logger.exception("sign-up failed")
        else:
            logger.info("sign-up refused", status=status, reason=type(exc).__name__)
        if not is_form(content_type):
            if status == 503:
                return error_response(503, code, "busy: retry in a moment")
            if status >= 500:
                return error_response(500, code, "internal error")
            problems = exc.problems if isinstance(exc, InvalidInput) else None
            return error_response(status, code, str(exc), problems)
        if status == 503:
            answer = self._page(
                "error", 503, heading="Please try again", message="We are busy right now.", hint=""
            )
            answer.headers["Retry-After"] = str(RETRY_AFTER_S)
            return answer
        if status >= 500:
            return self._page(
                "error", 500, heading="Something went wrong", message="Please try again in a minute.", hint=""
            )
        problems = exc.problems if isinstance(exc, InvalidInput) else []
        message = "; ".join(f"{p.field}: {p.message}" for p in problems) or str(exc)
        return self._page(
            "error",
            status,
            heading="We could not sign you up",
            message=message,
            hint="Go back and check the form.",
        )

    # ----- /c/<token> -----------------------------------------------------------------
    def confirm_page(self, token: str) -> Response[str]:
        """GET: ask for the click; changes nothing."""
        found = inspect(token, self.ctx)
        return self._page(
            "signup_confirm",
            state=found.status,
            masked_email=mask_email(found.email),
            topics=self._names(found.topics),
        )

    def confirm(self, token: str, *, requester: Requester) -> Response[str]:
        """POST: subscribe with consent recorded."""
        done = confirm(token, self.ctx, requester=requester)
        return self._page(
            "signup_confirmed",
            state=done.status,
            masked_email=mask_email(done.email),
            topics=self._names(done.topics),
        )

    def _names(self, chosen: tuple[str, ...] | None) -> list[str]:
        if chosen is None:
            return [t.name for t in self.ctx.topics if t.default]
        return [t.name for t in self.ctx.topics if t.id in chosen]

    def link_error(self, exc: Exception) -> Response[str]:
        status = link_status(exc)
        if status >= 500:
            logger.exception("confirmation page failed")
            answer = self._page(
                "error",
                status,
                heading="Something went wrong",
                message="Please try again in a minute.",
                hint="",
            )
            if status == 503:
                answer.headers["Retry-After"] = str(RETRY_AFTER_S)
            return answer
        if isinstance(exc, StaleConfirmation):
            heading, message = STALE_HEADING, STALE_MESSAGE
        else:
            heading, message = refused_link(
                exc,
                expired="Confirmation links work for a few days only.",
                gone=("This link does not work", "There is no sign-up for it any more."),
            )
        logger.info("confirmation link refused", status=status, reason=type(exc).__name__)
        return self._page("error", status, heading=heading, message=message, hint=CONFIRM_HINT)

    def not_found(self) -> Response[str]:
        return error_response(404, "not_found", "no such route")


__all__ = ["HEADERS", "SignupPages", "is_form"]
