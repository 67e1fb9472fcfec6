"""Serving the console: a socket bound to 127.0.0.1 (never another address), uvicorn on it,
in the foreground (``mailstep console``) or on a thread (``mailstep dev``), and its control file
(``console.control``) while it runs."""

from __future__ import annotations

import contextlib
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
    url: str  # what to open: http://127.0.0.1:PORT/?token=... (signs in once)
    port: int
    server: uvicorn.Server
    sock: socket.socket
    control_file: Path  # for `mailstep console token`; removed when the console stops

    def run(self) -> None:
        """Serve until stopped (Ctrl-C in the foreground, :meth:`stop` from another thread)."""
        try:
            self.server.run(sockets=[self.sock])
        finally:
            self._unregister()

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name="console", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self.server.should_exit = True
        self._unregister()

    def _unregister(self) -> None:
        with contextlib.suppress(OSError):
            self.control_file.unlink()


def serve(
    target: Target,
    port: int,
    *,
    state_dir: Path,  # where the control file goes (``console.control``)
    fallback: bool = False,  # a free port when ``port`` is taken
    outbox: Path | None = None,
    sequences_dir: Path | None = None,
    templates_dir: Path | None = None,
) -> Served:
    """The console for ``target``, bound and ready to :meth:`Served.run`."""
    import uvicorn

    from console.app import build
    from console.control import register
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
    try:
        control_file = register(state_dir, port, secrets.control, target.label)
    except OSError:
        sock.close()
        raise
    url = f"http://{HOST}:{port}/?token={secrets.token}"
    return Served(url, port, uvicorn.Server(config), sock, control_file)


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
