"""Serving the console: a socket bound to 127.0.0.1 (never another address), uvicorn on it,
in the foreground (``mailstep console``) or on a thread (``mailstep dev``)."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from console.guard import Secrets

if TYPE_CHECKING:
    import uvicorn

    from ops.targets import Target

HOST = "127.0.0.1"  # the only address the console listens on


def bind(port: int, fallback: bool = False) -> socket.socket:
    """A listening socket on 127.0.0.1:``port`` (0: a free port); with ``fallback``, a free
    port when ``port`` is taken."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((HOST, port))
    except OSError:
        if not fallback or port == 0:
            sock.close()
            raise
        sock.bind((HOST, 0))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


@dataclass
class Served:
    url: str  # what to open: http://127.0.0.1:PORT/?token=...
    port: int
    server: uvicorn.Server
    sock: socket.socket

    def run(self) -> None:
        """Serve until stopped (Ctrl-C in the foreground, :meth:`stop` from another thread)."""
        self.server.run(sockets=[self.sock])

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name="console", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self.server.should_exit = True


def serve(
    target: Target,
    port: int,
    *,
    fallback: bool = False,  # a free port when ``port`` is taken
    outbox: Path | None = None,
    sequences_dir: Path | None = None,
    templates_dir: Path | None = None,
) -> Served:
    """The console for ``target``, bound and ready to :meth:`Served.run`."""
    import uvicorn

    from console.app import build
    from console.site import Console

    sock = bind(port, fallback)
    port = sock.getsockname()[1]
    secrets = Secrets()
    console = Console(
        target, secrets, outbox=outbox, sequences_dir=sequences_dir, templates_dir=templates_dir
    )
    config = uvicorn.Config(
        build(console, port), host=HOST, port=port, log_level="warning", access_log=False, lifespan="off"
    )
    return Served(f"http://{HOST}:{port}/?token={secrets.token}", port, uvicorn.Server(config), sock)


def local_outbox(target: Target) -> Path | None:
    """The outbox of a local runtime target (its state folder's runtime.json names it)."""
    import json

    if target.kind != "local":
        return None
    state = Path(target.name) / "runtime.json"
    try:
        return Path(json.loads(state.read_text())["outbox"])
    except (OSError, ValueError, KeyError):
        return Path(target.name) / "outbox"
