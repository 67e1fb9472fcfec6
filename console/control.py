"""A running console's control file, and how ``mailstep console token`` gets a fresh sign-in link.

Each console writes ``<state dir>/consoles/<port>.json`` when it starts (mode 0600, in a folder
made 0700: ``ops.loopback.write_private``) and removes it when it stops: its port, its process,
its target and a random control key. ``mailstep console token`` reads the file (only the user
who started the console can) and asks that console on 127.0.0.1 for a fresh link:
``POST /_console/token`` with ``Authorization: Bearer <key>`` and no ``Origin``
(``console.guard``). The key stays in the file and on the loopback connection; the link the
console answers signs in once and expires unused after ten minutes.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from console.guard import FRESH_LINK_PATH
from ops.loopback import private_dir, write_private

FOLDER = "consoles"
TIMEOUT_S = 10.0


class ControlError(Exception):
    """No console to ask, or the console refused (the message says which and what to do)."""


@dataclass(frozen=True)
class Registration:
    path: Path
    port: int
    key: str
    target: str


def register(state_dir: Path, port: int, key: str, target: str) -> Path:
    """The control file of the console on ``port`` (0600), written atomically."""
    path = private_dir(state_dir / FOLDER) / f"{port}.json"
    data = {"port": port, "pid": os.getpid(), "target": target, "key": key}
    write_private(path, json.dumps(data, indent=2).encode())
    return path


def registered(state_dir: Path) -> list[Registration]:
    """The consoles of ``state_dir`` that still listen (the files of those that do not, left by a
    console that was killed, are removed)."""
    found = []
    for path in sorted((state_dir / FOLDER).glob("*.json")):
        try:
            data = json.loads(path.read_text())
            entry = Registration(path, int(data["port"]), str(data["key"]), str(data.get("target", "")))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if _listening(entry.port):
            found.append(entry)
        else:
            with contextlib.suppress(OSError):
                path.unlink()
    return found


def fresh_url(state_dir: Path, port: int | None = None) -> tuple[str, Registration]:
    """A fresh sign-in URL from the console on ``port`` (the only one running from ``state_dir``
    when None), and which console gave it."""
    consoles = registered(state_dir)
    chosen = [c for c in consoles if port is None or c.port == port]
    where = state_dir / FOLDER
    if not chosen:
        which = f"on port {port} " if port is not None else ""
        raise ControlError(
            f"no console {which}is running from {state_dir} (none registered in {where}): "
            "start `mailstep console` or `mailstep dev` with this --state-dir"
        )
    if len(chosen) > 1:
        ports = ", ".join(str(c.port) for c in chosen)
        raise ControlError(f"consoles run on ports {ports}: choose one with --port")
    console = chosen[0]
    request = urllib.request.Request(  # noqa: S310 - http://127.0.0.1 only
        f"http://127.0.0.1:{console.port}{FRESH_LINK_PATH}",
        data=b"",
        method="POST",
        headers={"authorization": f"Bearer {console.key}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:  # noqa: S310
            return str(json.loads(answer.read())["url"]), console
    except urllib.error.HTTPError as exc:
        reason = exc.read().decode(errors="replace")[:300]
        raise ControlError(f"the console on port {console.port} refused: {exc.code} {reason}") from None
    except (urllib.error.URLError, OSError, ValueError, KeyError) as exc:
        raise ControlError(f"the console on port {console.port} did not answer: {exc}") from None


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False
