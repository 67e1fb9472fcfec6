"""The one renderer: templates -> subject, HTML (CSS inlined), text/plain, preheader.

Used by the sender, the unsubscribe pages, the CLI (list, validate, preview, send-test)
and the sequence validator. Layout of ``templates/`` (documented in docs/templates.md):

- ``<key>.md`` or ``<key>.html``: a body, key like ``onboarding/welcome``. An optional YAML
  front matter block (``---`` lines) sets ``subject``, ``preheader``, ``layout`` (default
  ``default``; ``none`` for a body that is a whole document) and ``reason`` (the footer's
  "why you get this mail" line).
- ``_layouts/<name>.html``: wraps a body (``{{ content }}``); CSS in ``<style>`` is inlined.
- ``_pages/<name>.html``: web pages (unsubscribe), rendered but never mailed.

Jinja2 runs with autoescape and ``StrictUndefined``. In Markdown bodies every value is
escaped once, for HTML and Markdown together (``<``, ``&``, ``'`` become entities; ``[``, ``*``,
``_``... character references; none is escaped twice), so a subscriber's name can never become
markup, a link or emphasis, and reads in the mail as it was written.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

import css_inline
import markdown
import yaml
from bs4 import BeautifulSoup, Tag
from jinja2 import (
    BaseLoader,
    Environment,
    StrictUndefined,
    Template,
    TemplateError,
    TemplateSyntaxError,
    UndefinedError,
    meta,
    nodes,
)
from jinja2 import TemplateNotFound as JinjaTemplateNotFound
from markdownify import MarkdownConverter
from markupsafe import Markup

from shared.core.errors import InvalidInput, NotFound
from shared.core.models import HIDDEN_LINK_PATH, TEMPLATE_KEY_MAX, is_template_key

TEMPLATES_DIR = Path(__file__).resolve().parent.parent.parent / "templates"
LAYOUTS = "_layouts"
PAGES = "_pages"
BODY_SUFFIXES = (".md", ".html")
DEFAULT_LAYOUT = "default"
NO_LAYOUT = "none"
STRING_CACHE = 512  # compiled subject/preheader/reason sources a renderer keeps
FRONT_MATTER_KEYS = frozenset({"subject", "preheader", "layout", "reason"})
MAX_KEY = TEMPLATE_KEY_MAX  # template keys: shared.core.models.TemplateKey

# Variables every body, subject and preheader may use (docs/templates.md).
CONTEXT_VARIABLES = frozenset(
    {
        "subscriber",
        "first_name",
        "email",
        "unsubscribe_url",
        "data",
        "now",
        "today",
        "sender",
        "transactional",
    }
)
# Layouts also get the rendered body and the message's subject, preheader and reason.
LAYOUT_VARIABLES = CONTEXT_VARIABLES | {"content", "subject", "preheader", "reason", "hidden_link_url"}

# A value in a Markdown body, escaped once, character by character: HTML's five specials become
# the entities markupsafe writes, and what Markdown could read as syntax becomes a numeric
# character reference. One pass, so no entity is ever escaped again (``O'Brien`` stays
# ``O&#39;Brien`` in the HTML, ``O'Brien`` in the text part).
_MARKDOWN_VALUE = str.maketrans(
    {
        **{c: f"&#{ord(c)};" for c in "\\`*_{}[]()#+-.!|~:="},
        "&": "&amp;",
        "<": "&lt;",
        ">": "&gt;",
        '"': "&#34;",
        "'": "&#39;",
    }
)
_INLINER = css_inline.CSSInliner(keep_at_rules=True, load_remote_stylesheets=False)
_FRONT_MATTER_RE = re.compile(r"\A---[ \t]*\r?\n(.*?)^---[ \t]*\r?\n", re.S | re.M)


class TemplateNotFound(NotFound):
    pass


class RenderError(InvalidInput):
    """A template failed to render (undefined variable, syntax error, bad front matter)."""

    def __init__(self, message: str, file: str = "", line: int | None = None) -> None:
        where = f"{file}:{line}: " if file and line else (f"{file}: " if file else "")
        super().__init__(f"{where}{message}")
        self.file = file
        self.line = line


@dataclass(frozen=True)
class Rendered:
    subject: str
    html: str
    text: str
    preheader: str


@dataclass(frozen=True)
class TemplateProblem:
    file: str  # path relative to the templates directory
    line: int | None
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line or 1}: {self.message}"


@dataclass(frozen=True)
class TemplateSource:
    key: str
    path: Path
    front_matter: dict[str, Any]
    front_matter_lines: dict[str, int]  # front matter key -> line in the file
    markdown: bool


@dataclass(frozen=True)
class SubscriberView:
    """What templates see of a subscriber."""

    email: str
    first_name: str = ""
    attributes: dict[str, Any] = field(default_factory=dict)
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class SenderView:
    name: str
    email: str
    postal_address: str
    reason: str


def build_context(
    subscriber: SubscriberView,
    sender: SenderView,
    *,
    unsubscribe_url: str | None,
    data: Mapping[str, Any] | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The variables of one mail (CONTEXT_VARIABLES)."""
    moment = now or datetime.now(UTC)
    return {
        "subscriber": {
            "email": subscriber.email,
            "first_name": subscriber.first_name,
            "attributes": dict(subscriber.attributes),
            "tags": list(subscriber.tags),
        },
        "first_name": subscriber.first_name,
        "email": subscriber.email,
        "unsubscribe_url": unsubscribe_url,
        "data": dict(data or {}),
        "now": moment,
        "today": moment.date().isoformat(),
        "sender": {
            "name": sender.name,
            "email": sender.email,
            "postal_address": sender.postal_address,
            "reason": sender.reason,
        },
        "transactional": unsubscribe_url is None,
    }


def hidden_link_url(unsubscribe_url: object) -> str | None:
    """The URL of the link no person sees, in marketing mail (it has an unsubscribe URL,
    ``<public base URL>/u/<token>``): ``<public base URL>/l/hidden``. A click on it is a
    machine's (``shared.engagement.machine``: security scanners follow every link)."""
    if not isinstance(unsubscribe_url, str) or "/u/" not in unsubscribe_url:
        return None
    return unsubscribe_url.rpartition("/u/")[0] + HIDDEN_LINK_PATH


def split_front_matter(source: str) -> tuple[str, int]:
    """Return (front matter text, number of lines it spans including the ``---`` lines)."""
    match = _FRONT_MATTER_RE.match(source)
    if not match:
        return "", 0
    return match.group(1), match.group(0).count("\n")


def _blank_front_matter(source: str) -> str:
    """The body with its front matter replaced by blank lines (line numbers stay true)."""
    _, lines = split_front_matter(source)
    if not lines:
        return source
    return "\n" * lines + source.split("\n", lines)[lines]


class _Loader(BaseLoader):
    def __init__(self, root: Path) -> None:
        self.root = root

    def get_source(self, environment: Environment, template: str) -> tuple[str, str, Any]:
        path = (self.root / template).resolve()
        if self.root not in path.parents or not path.is_file():
            raise JinjaTemplateNotFound(template)
        mtime = path.stat().st_mtime
        return (
            _blank_front_matter(path.read_text(encoding="utf-8")),
            str(path),
            lambda: path.stat().st_mtime == mtime,
        )


def _markdown_finalize(value: Any) -> Any:
    if hasattr(value, "__html__") or value is None:
        return value
    return Markup(str(value).translate(_MARKDOWN_VALUE))  # noqa: S704 - every HTML special escaped


def _base_env(root: Path, **kwargs: Any) -> Environment:
    env = Environment(  # noqa: S701 - autoescape is on for every HTML environment below
        loader=_Loader(root), undefined=StrictUndefined, keep_trailing_newline=True, **kwargs
    )
    env.filters["date"] = _date_filter
    return env


def _date_filter(value: str | date, fmt: str = "%B %-d, %Y") -> str:
    moment = datetime.fromisoformat(value.replace("Z", "+00:00")) if isinstance(value, str) else value
    return moment.strftime(fmt)


class Renderer:
    """Renders the templates of one directory. Environments and parsed templates are cached."""

    def __init__(self, root: Path = TEMPLATES_DIR, *, reload: bool = True) -> None:
        """``reload=False``: the files never change while this renderer lives (a function's
        bundled templates), so a render does not look at their modification times."""
        self.root = root.resolve()
        self.html_env = _base_env(self.root, autoescape=True, auto_reload=reload)
        self.markdown_env = _base_env(
            self.root, autoescape=True, finalize=_markdown_finalize, auto_reload=reload
        )
        self.text_env = _base_env(self.root, autoescape=False, auto_reload=reload)
        self._sources: dict[str, TemplateSource] = {}
        # subjects, preheaders and reasons, compiled once each (a broadcast renders one subject
        # for every recipient); bounded, as a long-lived process sees many sources
        self._strings: dict[str, Template] = {}

    # ----- discovery -------------------------------------------------------------------
    def keys(self) -> list[str]:
        found = []
        for path in sorted(self.root.rglob("*")):
            rel = path.relative_to(self.root)
            if path.suffix in BODY_SUFFIXES and path.is_file() and not rel.parts[0].startswith(("_", ".")):
                found.append(rel.with_suffix("").as_posix())
        return found

    def exists(self, key: str) -> bool:
        return self._find(key) is not None

    def _find(self, key: str) -> Path | None:
        if not is_template_key(key):
            return None
        for suffix in BODY_SUFFIXES:
            path = self.root / f"{key}{suffix}"
            if path.is_file():
                return path
        return None

    def source(self, key: str) -> TemplateSource:
        cached = self._sources.get(key)
        if cached is not None:
            return cached
        path = self._find(key)
        if path is None:
            raise TemplateNotFound(f"no template {key!r} (looked for templates/{key}.md and .html)")
        meta_text, _ = split_front_matter(path.read_text(encoding="utf-8"))
        front, lines = _parse_front_matter(meta_text, self._rel(path))
        loaded = TemplateSource(key, path, front, lines, path.suffix == ".md")
        self._sources[key] = loaded
        return loaded

    def _rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    # ----- rendering -------------------------------------------------------------------
    def render(self, key: str, context: Mapping[str, Any], *, subject: str | None = None) -> Rendered:
        """Render the body ``key`` in its layout; ``subject`` (a template string) overrides
        the front matter's."""
        src = self.source(key)
        rel = self._rel(src.path)
        subject_source = subject if subject is not None else src.front_matter.get("subject")
        if not subject_source:
            raise RenderError("no subject: set 'subject' in the front matter or pass one", rel, 1)
        ctx = dict(context)
        rendered_subject = self.render_string(str(subject_source), ctx, where=rel)
        preheader = self.render_string(str(src.front_matter.get("preheader", "")), ctx, where=rel)
        reason = self.render_string(str(src.front_matter.get("reason", "")), ctx, where=rel)
        env = self.markdown_env if src.markdown else self.html_env
        body = self._render_file(env, rel, ctx)
        if src.markdown:
            body = markdown.markdown(body, extensions=["extra", "sane_lists"], output_format="html")
        layout = str(src.front_matter.get("layout", DEFAULT_LAYOUT))
        if layout == NO_LAYOUT:
            document = body
        else:
            sender = ctx.get("sender") or {}
            document = self._render_file(
                self.html_env,
                f"{LAYOUTS}/{layout}.html",
                {
                    **ctx,
                    "content": Markup(body),  # noqa: S704 - rendered by our own autoescaping env
                    "subject": " ".join(rendered_subject.split()),
                    "preheader": preheader,
                    "reason": reason or (sender.get("reason", "") if isinstance(sender, dict) else ""),
                    "hidden_link_url": hidden_link_url(ctx.get("unsubscribe_url")),
                },
            )
        html = _INLINER.inline(document)
        return Rendered(
            subject=" ".join(rendered_subject.split()),
            html=html,
            text=html_to_text(html),
            preheader=" ".join(preheader.split()),
        )

    def render_page(self, name: str, context: Mapping[str, Any]) -> str:
        """A web page from ``_pages/<name>.html`` (autoescaped, not inlined)."""
        return self._render_file(self.html_env, f"{PAGES}/{name}.html", dict(context))

    def render_string(self, source: str, context: Mapping[str, Any], *, where: str = "") -> str:
        """A subject or preheader: plain text, StrictUndefined."""
        if "{" not in source:
            return source
        try:
            compiled = self._strings.get(source)
            if compiled is None:
                if len(self._strings) >= STRING_CACHE:
                    self._strings.clear()
                compiled = self._strings[source] = self.text_env.from_string(source)
            return compiled.render(context)
        except UndefinedError as exc:
            raise RenderError(f"undefined variable: {exc.message}", where) from None
        except TemplateSyntaxError as exc:
            raise RenderError(f"syntax error: {exc.message}", where) from None

    def _render_file(self, env: Environment, name: str, context: dict[str, Any]) -> str:
        try:
            return env.get_template(name).render(context)
        except JinjaTemplateNotFound as exc:
            raise RenderError(f"missing template or layout {exc.name!r}", name) from None
        except TemplateSyntaxError as exc:
            raise RenderError(f"syntax error: {exc.message}", name, exc.lineno) from None
        except UndefinedError as exc:
            raise RenderError(f"undefined variable: {exc.message}", name, _error_line(exc)) from None
        except TemplateError as exc:
            raise RenderError(str(exc), name) from None

    # ----- validation ------------------------------------------------------------------
    def validate(self) -> list[TemplateProblem]:
        """Every body and layout: front matter, syntax, missing layouts and includes, and
        variables outside the known set, each with file and line."""
        problems: list[TemplateProblem] = []
        for key in self.keys():
            problems += self.validate_key(key)
        layouts = self.root / LAYOUTS
        for path in sorted(layouts.glob("*.html")) if layouts.is_dir() else []:
            problems += self._check_jinja(self._rel(path), LAYOUT_VARIABLES)
        return problems

    def validate_key(self, key: str, extra: frozenset[str] = frozenset()) -> list[TemplateProblem]:
        path = self._find(key)
        if path is None:
            return [TemplateProblem(f"{key}.md", None, f"no template {key!r}")]
        rel = self._rel(path)
        try:
            src = self.source(key)
        except RenderError as exc:
            return [TemplateProblem(exc.file or rel, exc.line, exc.message.split(": ", 1)[-1])]
        known = CONTEXT_VARIABLES | extra
        problems = self._check_jinja(rel, known)
        for name in ("subject", "preheader", "reason"):
            value = src.front_matter.get(name)
            if value is not None:
                line = src.front_matter_lines.get(name)
                problems += [
                    TemplateProblem(rel, line, f"{name}: {message}")
                    for message in self.check_string(str(value), known)
                ]
        layout = str(src.front_matter.get("layout", DEFAULT_LAYOUT))
        if layout != NO_LAYOUT and not (self.root / LAYOUTS / f"{layout}.html").is_file():
            problems.append(
                TemplateProblem(
                    rel,
                    src.front_matter_lines.get("layout", 1),
                    f"missing layout {layout!r} ({LAYOUTS}/{layout}.html)",
                )
            )
        return problems

    def check_string(self, source: str, known: frozenset[str] = CONTEXT_VARIABLES) -> list[str]:
        """Problems of a subject/preheader template string (used by sequence validation)."""
        try:
            tree = self.text_env.parse(source)
        except TemplateSyntaxError as exc:
            return [f"syntax error: {exc.message}"]
        return [
            f"undefined variable {name!r}" for name in sorted(meta.find_undeclared_variables(tree) - known)
        ]

    def _check_jinja(self, rel: str, known: frozenset[str]) -> list[TemplateProblem]:
        path = self.root / rel
        source = _blank_front_matter(path.read_text(encoding="utf-8"))
        try:
            tree = self.html_env.parse(source, name=rel)
        except TemplateSyntaxError as exc:
            return [TemplateProblem(rel, exc.lineno, f"syntax error: {exc.message}")]
        problems = []
        for name in sorted(meta.find_undeclared_variables(tree) - known):
            problems.append(TemplateProblem(rel, _first_use(tree, name), f"undefined variable {name!r}"))
        for ref in meta.find_referenced_templates(tree):
            if ref is not None and not (self.root / ref).is_file():
                problems.append(
                    TemplateProblem(rel, _first_template_ref(tree, ref), f"missing template {ref!r}")
                )
        return problems


def _first_use(tree: nodes.Template, name: str) -> int | None:
    lines = [n.lineno for n in tree.find_all(nodes.Name) if n.name == name and n.ctx == "load"]
    return min(lines) if lines else None


def _first_template_ref(tree: nodes.Template, ref: str) -> int | None:
    for node in tree.find_all((nodes.Include, nodes.Extends, nodes.Import, nodes.FromImport)):
        template = getattr(node, "template", None)
        if isinstance(template, nodes.Const) and template.value == ref:
            return node.lineno
    return None


def _error_line(exc: UndefinedError) -> int | None:
    """The template line of an UndefinedError, from the traceback Jinja rewrites."""
    tb = exc.__traceback__
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.endswith(BODY_SUFFIXES):
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _parse_front_matter(text: str, rel: str) -> tuple[dict[str, Any], dict[str, int]]:
    if not text.strip():
        return {}, {}
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise RenderError(
            f"front matter is not valid YAML: {exc}", rel, mark.line + 2 if mark else 1
        ) from None
    if not isinstance(loaded, dict):
        raise RenderError("front matter must be a mapping", rel, 2)
    unknown = sorted(set(loaded) - FRONT_MATTER_KEYS)
    lines = {}
    for number, raw in enumerate(text.splitlines(), start=2):
        name = raw.split(":", 1)[0].strip()
        if name in loaded and name not in lines:
            lines[name] = number
    if unknown:
        raise RenderError(
            f"unknown front matter key {unknown[0]!r} (allowed: {sorted(FRONT_MATTER_KEYS)})",
            rel,
            lines.get(unknown[0], 2),
        )
    return loaded, lines


# ----- HTML -> text/plain -----------------------------------------------------------------
# Tags whose text never shows: the document head and anything hidden (the preheader).
_UNSEEN = frozenset({"head", "title", "style", "script"})


class _PlainText(MarkdownConverter):
    """markdownify, told that the result is mail text, not Markdown: no emphasis, code or
    quote marks and no escapes (see ``_PLAIN_TEXT``); links as ``text (url)``; h1/h2
    underlined, smaller headings, quotes, ``pre`` and layout blocks as plain paragraphs;
    images as their alt text."""

    def convert_a(self, el: Tag, text: str, parent_tags: set[str]) -> str:
        label, href = text.strip(), str(el.get("href") or "")
        if href and not href.startswith("#") and label not in (href, href.removeprefix("mailto:")):
            label = f"{label} ({href})" if label else href
        return text.replace(text.strip(), label, 1) if text.strip() else label

    def convert_hN(self, n: int, el: Tag, text: str, parent_tags: set[str]) -> str:  # noqa: N802
        text = " ".join(text.split())
        if n > 2 or not text:
            return self.block(el, text, parent_tags)
        return f"\n\n{text}\n{('=' if n == 1 else '-') * min(len(text), 60)}\n\n"

    def convert_hr(self, el: Tag, text: str, parent_tags: set[str]) -> str:
        return "\n\n" + "-" * 40 + "\n\n"

    def convert_img(self, el: Tag, text: str, parent_tags: set[str]) -> str:
        return str(el.get("alt") or "")

    def block(self, el: Tag, text: str, parent_tags: set[str]) -> str:
        return f"\n\n{text.strip()}\n\n" if text.strip() else ""

    convert_tr = convert_blockquote = convert_pre = convert_header = convert_footer = convert_center = block


_PLAIN_TEXT = _PlainText(
    bullets="-",
    escape_asterisks=False,
    escape_underscores=False,
    strip=["b", "strong", "em", "i", "u", "code", "kbd", "samp", "del", "s", "sub", "sup", "q"],
    wrap=True,  # collapse source line breaks as a browser does...
    wrap_width=None,  # ...without re-wrapping the lines
)


def _hidden(tag: Tag) -> bool:
    style = str(tag.get("style") or "").replace(" ", "").lower()
    return tag.name in _UNSEEN or "display:none" in style or tag.get("aria-hidden") == "true"


def html_to_text(html: str) -> str:
    """A readable text/plain version: paragraphs, headings, lists, links as ``text (url)``."""
    soup = BeautifulSoup(html, "html.parser")
    for tag in soup.find_all(_hidden):
        if not tag.decomposed:
            tag.decompose()
    for cell in soup.find_all(["td", "th"]):
        cell.name = "span"  # a layout cell holds whole paragraphs: markdownify would inline them
        cell.insert_before(" ")
    lines = [line.strip() for line in _PLAIN_TEXT.convert_soup(soup).split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip() + "\n"


# ----- the default renderer ---------------------------------------------------------------
@lru_cache(maxsize=4)
def renderer(root: Path = TEMPLATES_DIR) -> Renderer:
    """The functions' renderer: their templates are the bundled ones, read once."""
    return Renderer(root, reload=False)


def render(key: str, context: Mapping[str, Any], *, subject: str | None = None) -> Rendered:
    return renderer().render(key, context, subject=subject)


def validate_templates(root: Path = TEMPLATES_DIR) -> list[TemplateProblem]:
    return Renderer(root).validate()


def timed_render(key: str, context: Mapping[str, Any], repeat: int = 50) -> float:
    """Mean seconds per render of ``key`` (the bench and ``templates preview`` report it)."""
    engine = renderer()
    engine.render(key, context)
    start = time.perf_counter()
    for _ in range(repeat):
        engine.render(key, context)
    return (time.perf_counter() - start) / repeat
