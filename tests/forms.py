"""The forms of an HTML page as a browser reads and submits them (tests post what a page
really sends, never a body of their own making)."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser
from urllib.parse import urlencode, urljoin


@dataclass
class Form:
    action: str
    method: str
    fields: list[tuple[str, str]] = field(default_factory=list)
    buttons: list[dict[str, str]] = field(default_factory=list)


class _Forms(HTMLParser):
    """Action, method, the fields a browser submits (hidden and text inputs, checked boxes)
    and the submit buttons (name, value, text) of every form."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[Form] = []
        self._form: Form | None = None
        self._button: dict[str, str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self._form = Form(action=a.get("action", ""), method=a.get("method", "get").lower())
            self.forms.append(self._form)
        elif self._form is not None and tag == "input" and a.get("name"):
            kind = a.get("type", "text").lower()
            if kind in ("checkbox", "radio") and "checked" not in a:
                return
            if kind not in ("submit", "button", "reset", "image"):
                self._form.fields.append((a["name"], a.get("value", "")))
        elif self._form is not None and tag == "button":
            self._button = {"name": a.get("name", ""), "value": a.get("value", ""), "text": ""}
            self._form.buttons.append(self._button)

    def handle_data(self, data: str) -> None:
        if self._button is not None:
            self._button["text"] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._form = None
        elif tag == "button":
            self._button = None


def submission(page_url: str, html: str, button_text: str) -> tuple[str, str]:
    """(URL, urlencoded body) of pressing the button that reads ``button_text`` on ``html``
    served at ``page_url``: the form's fields and the button's name=value, to the form's
    action resolved against the page's URL (an empty action is the page itself)."""
    parser = _Forms()
    parser.feed(html)
    for form in parser.forms:
        for button in form.buttons:
            if button["text"].strip() == button_text:
                assert form.method == "post", form
                fields = list(form.fields) + ([(button["name"], button["value"])] if button["name"] else [])
                return urljoin(page_url, form.action), urlencode(fields)
    raise AssertionError(f"no form with a {button_text!r} button in: {html[:3000]}")
