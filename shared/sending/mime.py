"""MIME assembly with the standard library (``email.message.EmailMessage``, SMTP policy).

No header can be injected from names, subjects or attributes: every free-text header
value goes through :func:`clean_header_text` (control characters, CR/LF and Unicode line
separators become spaces, runs of whitespace collapse) and the standard library writes
non-ASCII as RFC 2047 encoded words. Addresses are validated (``normalise_email``) and
URLs in ``List-Unsubscribe`` must be printable ASCII without ``<>,`` or spaces, and the
one-click URL https (RFC 8058), always: plain http is refused on every host.

``List-Unsubscribe`` and ``List-Unsubscribe-Post`` are written verbatim (folded only
between URLs): the standard folder would turn a long https URL into encoded words,
which mail clients do not decode in that header.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from datetime import UTC, datetime
from email.header import Header
from email.headerregistry import Address
from email.message import EmailMessage
from email.policy import EmailPolicy
from email.utils import format_datetime, formataddr, parseaddr
from typing import Any

from shared.core.errors import FieldProblem, InvalidInput
from shared.core.models import normalise_email

SEND_ID_HEADER = "X-Mailstep-Send-Id"
ONE_CLICK = "List-Unsubscribe=One-Click"
MAX_DISPLAY_NAME = 200
MAX_SUBJECT = 998 - len("Subject: ")
_VERBATIM = frozenset({"list-unsubscribe", "list-unsubscribe-post"})
_MAILBOX_HEADERS = frozenset({"from", "to", "reply-to"})
_URL_RE = re.compile(r"^(https://|mailto:)[\x21-\x7e]+$")
_ONE_CLICK_RE = re.compile(r"^https://")
_FORBIDDEN_URL_CHARS = frozenset("<>,\"'\\")
_SEND_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_LIST_LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class _MailPolicy(EmailPolicy):
    """SMTP policy with exact encodings where the standard folder is lossy:

    - List-Unsubscribe(-Post) verbatim (never encoded words);
    - a non-ASCII Subject, and non-ASCII From/To/Reply-To display names, as runs of
      RFC 2047 encoded words that carry the spaces inside them (the standard folder can
      drop a space between two encoded words). ASCII names are quoted by ``formataddr``;
      an ASCII Subject is folded only at its spaces (the standard folder can break right
      after ``Subject:``, which reads back with a leading space).
    """

    def fold(self, name: str, value: Any) -> str:
        lowered = name.lower()
        if lowered in _VERBATIM:
            return _fold_verbatim(name, str(value), self.linesep)
        if lowered == "subject":
            text = str(value)
            if not text.isascii():
                return f"{name}: {_encoded_words(name, text, self.linesep)}{self.linesep}"
            return _fold_words(name, text, self.linesep, self.max_line_length or 78)
        if lowered in _MAILBOX_HEADERS and len(getattr(value, "addresses", ())) == 1:
            address = value.addresses[0]
            display = address.display_name
            if display and not display.isascii():
                rendered = f"{_encoded_words(name, display, self.linesep)} <{address.addr_spec}>"
            else:
                rendered = formataddr((display, address.addr_spec))
            return f"{name}: {rendered}{self.linesep}"
        folded: str = super().fold(name, value)  # typeshed leaves EmailPolicy.fold unannotated
        return folded

    def fold_binary(self, name: str, value: Any) -> bytes:
        return self.fold(name, value).encode("ascii")


def _fold_words(name: str, text: str, linesep: str, limit: int) -> str:
    """Fold ASCII text only at its single spaces (unfolding gives the text back exactly)."""
    lines, current = [], f"{name}:"
    for word in text.split(" "):
        if len(current) + 1 + len(word) > limit and current.strip() not in ("", f"{name}:"):
            lines.append(current)
            current = ""
        current = f"{current} {word}"
    lines.append(current)
    return linesep.join(lines) + linesep


def _encoded_words(name: str, text: str, linesep: str) -> str:
    return Header(text, "utf-8", header_name=name).encode(linesep=linesep)


POLICY = _MailPolicy(linesep="\r\n")


def _fold_verbatim(name: str, value: str, linesep: str) -> str:
    parts = [p.strip() for p in value.split(",")]
    return f"{name}: " + f",{linesep} ".join(parts) + linesep


def clean_header_text(value: str, limit: int | None = None) -> str:
    """Make free text safe for a header: no control or line-separator characters, single
    spaces, no literal ``=?`` (encoded-word opener), trimmed, cut at ``limit`` characters."""
    out = []
    for char in value:
        category = unicodedata.category(char)
        if category in ("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"):
            out.append(" ")
        else:
            out.append(char)
    # A literal "=?" could be read back as the start of an encoded word: split it.
    text = " ".join("".join(out).replace("=?", "= ?").split())
    if limit is not None and len(text) > limit:
        text = text[:limit].rstrip()
    return text


def _address(email: str, name: str | None, field: str) -> Address:
    try:
        normal = normalise_email(email)
    except ValueError as exc:
        raise InvalidInput(f"{field}: {exc}", [FieldProblem(field, str(exc))]) from None
    local, domain = normal.split("@")
    display = clean_header_text(name or "", MAX_DISPLAY_NAME)
    return Address(display_name=display, username=local, domain=domain)


def parse_mailbox(value: str, field: str) -> tuple[str, str]:
    """``"Acme <hello@acme.test>"`` -> (display name, normalised address)."""
    if any(unicodedata.category(c) == "Cc" for c in value):
        raise InvalidInput(
            f"{field}: must not contain control characters", [FieldProblem(field, "control characters")]
        )
    name, addr = parseaddr(value)
    if not addr:
        raise InvalidInput(f"{field}: not an address", [FieldProblem(field, "expected 'Name <address>'")])
    try:
        return clean_header_text(name, MAX_DISPLAY_NAME), normalise_email(addr)
    except ValueError as exc:
        raise InvalidInput(f"{field}: {exc}", [FieldProblem(field, str(exc))]) from None


def _check_url(url: str) -> str:
    if not _URL_RE.fullmatch(url) or _FORBIDDEN_URL_CHARS & set(url):
        raise InvalidInput("List-Unsubscribe targets must be https:// or mailto: URLs of printable ASCII")
    return url


@dataclass(frozen=True)
class Envelope:
    """Everything that goes into the headers of one message."""

    from_email: str
    to_email: str
    subject: str
    send_id: str  # also the Message-ID's local part, on the From address's domain
    from_name: str = ""
    to_name: str = ""
    reply_to: str = ""
    unsubscribe_url: str | None = None  # https URL; None for transactional mail
    unsubscribe_mailto: str | None = None  # mailto: URL (optional)
    list_id: str | None = None  # e.g. "onboarding.lists.acme.test"
    list_name: str = ""
    date: datetime | None = None


def message_id_for(send_id: str, from_email: str) -> str:
    """The message's own Message-ID (RFC 5322). SES replaces it with its own when it sends,
    so replies quote SES's id, never this one (``shared.engagement.replies``, docs/sending.md)."""
    return f"<{send_id}@{from_email.rsplit('@', 1)[1]}>"


def build_message(envelope: Envelope, *, text: str, html: str) -> EmailMessage:
    """A multipart/alternative message (text/plain then text/html)."""
    if not _SEND_ID_RE.fullmatch(envelope.send_id):
        raise InvalidInput("send id must be 1-64 characters of letters, digits, '_' and '-'")
    sender = _address(envelope.from_email, envelope.from_name, "from")
    msg = EmailMessage(policy=POLICY)
    msg["From"] = sender
    msg["To"] = _address(envelope.to_email, envelope.to_name, "to")
    if envelope.reply_to:
        name, addr = parse_mailbox(envelope.reply_to, "reply_to")
        msg["Reply-To"] = _address(addr, name, "reply_to")
    msg["Subject"] = clean_header_text(envelope.subject, MAX_SUBJECT)
    msg["Date"] = format_datetime(envelope.date or datetime.now(UTC))
    msg["Message-ID"] = message_id_for(envelope.send_id, sender.addr_spec)
    msg[SEND_ID_HEADER] = envelope.send_id
    if envelope.unsubscribe_url is not None:
        targets = [_check_url(envelope.unsubscribe_url)]
        if not _ONE_CLICK_RE.match(envelope.unsubscribe_url):
            raise InvalidInput("List-Unsubscribe needs an https URL for one-click unsubscribe (RFC 8058)")
        if envelope.unsubscribe_mailto:
            targets.append(_check_url(envelope.unsubscribe_mailto))
        msg["List-Unsubscribe"] = ", ".join(f"<{t}>" for t in targets)
        msg["List-Unsubscribe-Post"] = ONE_CLICK
    if envelope.list_id:
        if not _LIST_LABEL_RE.fullmatch(envelope.list_id):
            raise InvalidInput("List-Id must be a dot-atom like 'onboarding.lists.acme.test'")
        label = clean_header_text(envelope.list_name, 100)
        label = label if label.isascii() else ""
        msg["List-Id"] = f"{_phrase(label)} <{envelope.list_id}>" if label else f"<{envelope.list_id}>"
    msg.set_content(text, subtype="plain", cte="quoted-printable")
    msg.add_alternative(html, subtype="html", cte="quoted-printable")
    return msg


def _phrase(text: str) -> str:
    """An ASCII List-Id description as a quoted string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_bytes(msg: EmailMessage) -> bytes:
    return msg.as_bytes(policy=POLICY)
