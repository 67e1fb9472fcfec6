"""What every console page uses: the :class:`Console` (the target, the secrets, the renderer of
pages and problems), redirects (:func:`back`), blocking calls off the event loop (:func:`call`)
and chart data. The pages are in :mod:`console.pages`, the application in :mod:`console.app`.

Reads are GET; every change is a POST (a form carrying the CSRF token, or a script's request
with the ``X-CSRF-Token`` header), answered with a redirect to the page that shows the result.
The ``/api/...`` routes answer JSON to the console's own script (the live audience count and
a broadcast's progress). :mod:`console.guard` wraps all of it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse

from console.formatting import FILTERS
from console.guard import CSRF_FIELD, Secrets
from console.jobs import Jobs
from ops.subscriber_view import decoded_subject
from shared.core.errors import Conflict, NotFound

if TYPE_CHECKING:
    from ops.broadcasts import Broadcasts
    from ops.reputation import Reputation
    from ops.targets import Target
    from shared.core.topics import TopicCatalog
    from shared.sending.rendering import Renderer
    from shared.sequences.validate import Catalog

HERE = Path(__file__).parent
T = TypeVar("T")
PAGE = 50
OUTBOX_PAGE = 50
Signature = tuple[tuple[str, int, int], ...]


def files_signature(*roots: Path) -> Signature:
    """(path, size, modification time in ns) of every file under ``roots`` (files or folders;
    a missing one adds nothing): any file added, removed or changed gives another value."""
    found: list[tuple[str, int, int]] = []
    for root in roots:
        paths = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for path in paths:
            with contextlib.suppress(OSError):  # removed meanwhile: not there
                stat = path.stat()
                found.append((str(path), stat.st_size, stat.st_mtime_ns))
    return tuple(found)


@dataclass
class Console:
    """What every route needs: the target, the project's files and this start's secrets."""

    target: Target
    secrets: Secrets
    sequences_dir: Path | None = None
    templates_dir: Path | None = None
    topics_file: Path | None = None
    outbox: Path | None = None  # the local runtime's outbox (None: a deployed stack)
    env: Environment = field(init=False)
    jobs: Jobs = field(default_factory=Jobs, init=False)  # reads longer than a page (the forecast)
    _catalog: tuple[Signature, Catalog] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.env = Environment(
            loader=FileSystemLoader(HERE / "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
        )
        self.env.filters.update(FILTERS)  # numbers, times and internal keys for people
        self.env.filters["subject"] = decoded_subject  # =?utf-8?...?= as the reader sees it
        self.env.filters["q"] = lambda value: quote(str(value), safe="")
        self.env.filters["json"] = lambda value: json.dumps(
            value, default=str, sort_keys=True, ensure_ascii=False
        )

    # ----- the adapters (built once per start) ----------------------------------------------
    @cached_property
    def admin(self) -> Any:
        from ops.admin import SubscriberAdmin

        return SubscriberAdmin.of(self.target)

    @cached_property
    def topic_admin(self) -> Any:
        from ops.topics import TopicAdmin

        return (
            TopicAdmin.of(self.target, self.topics_file) if self.topics_file else TopicAdmin.of(self.target)
        )

    @property
    def topics(self) -> TopicCatalog:
        return self.topic_admin.catalog  # type: ignore[no-any-return]

    @cached_property
    def stats(self) -> Any:
        return self.target.stats_store()

    @cached_property
    def broadcasts(self) -> Broadcasts:
        from ops.broadcasts import Broadcasts

        return Broadcasts.from_settings(self.target.settings, self.target.aws)

    @cached_property
    def webhooks(self) -> Any:
        from ops.webhooks import Webhooks

        return Webhooks.for_target(self.target)

    @cached_property
    def reputation(self) -> Reputation:
        from ops.reputation import Reputation

        return Reputation(self.target)

    @cached_property
    def renderer(self) -> Renderer:
        from shared.sending.rendering import TEMPLATES_DIR, Renderer

        return Renderer(self.templates_dir or TEMPLATES_DIR)

    def catalog(self) -> Catalog:
        """The project's sequences. The files may change while the console runs: they are
        loaded again when any file they are read from (the sequences, ``topics.yaml`` beside
        them, the templates they name) was added, removed or changed since the last load, and
        otherwise kept (loading and validating them takes about 60 ms, a page's whole budget
        of DynamoDB requests; listing the files' sizes and times, about 1 ms)."""
        from shared.sequences import SEQUENCES_DIR
        from shared.sequences.validate import load_catalog

        sequences = Path(self.sequences_dir or SEQUENCES_DIR)
        templates = Path(self.templates_dir) if self.templates_dir else sequences.parent / "templates"
        signature = files_signature(sequences, templates, sequences.parent / "topics.yaml")
        if self._catalog is None or self._catalog[0] != signature:
            catalog, _ = load_catalog(sequences, self.templates_dir)
            self._catalog = (signature, catalog)
        return self._catalog[1]

    # ----- responses ---------------------------------------------------------------------------
    def page(self, request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        html = self.env.get_template(name).render(
            csrf=self.secrets.csrf,
            csrf_field=CSRF_FIELD,
            label=self.target.label,
            local=self.outbox is not None,
            path=request.url.path,
            msg=request.query_params.get("msg", ""),
            error=request.query_params.get("error", ""),
            **context,
        )
        return HTMLResponse(html, status_code=status)

    def problem(self, request: Request, exc: Exception) -> HTMLResponse:
        status = 404 if isinstance(exc, NotFound) else 409 if isinstance(exc, Conflict) else 400
        return self.page(request, "problem.html", status=status, problem=str(exc))


def back(url: str, **params: str) -> RedirectResponse:
    """A 303 to ``url`` with ``params`` (msg=..., error=...) in the query."""
    sep = "&" if "?" in url else "?"
    return RedirectResponse(url + (sep + urlencode(params) if params else ""), status_code=303)


async def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """A blocking ops call, off the event loop."""
    return await run_in_threadpool(fn, *args, **kwargs)


def chart_data(value: Any) -> str:
    """JSON for a ``<script type="application/json">`` block (no ``</`` can end it early)."""
    return json.dumps(value).replace("</", "<\\/")
