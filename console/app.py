"""The console's Starlette application: the routes of :mod:`console.pages` (each a thin call into
``ops`` or a ``shared`` adapter the target builds, and one server-rendered Jinja2 page) and the
static assets, wrapped in :mod:`console.guard`."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from console import pages
from console.guard import Guard
from console.site import HERE, Console
from shared.core.errors import MailstepError


def routes(console: Console) -> list[Route | Mount]:
    return [
        *pages.routes(console),
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]


def build(console: Console, port: int) -> Guard:
    """The ASGI application (the guard around Starlette) for a console on ``port``."""

    async def failed(request: Request, exc: Exception) -> Response:
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": str(exc)}, status_code=400)
        return console.problem(request, exc)

    app = Starlette(routes=routes(console), exception_handlers={MailstepError: failed, ValueError: failed})
    return Guard(app, console.secrets, port)
