"""What only this machine may reach, in one place for every local listener and local secret.

The local runtime's AWS endpoint and its two HTTP fronts (``local_aws.listeners``) and the
console (``console.guard``) serve this machine only. Each refuses a request whose ``Host`` is
not a loopback name (:func:`loopback_host`): a web page on a name its owner points at 127.0.0.1
(DNS rebinding) sends its own name as ``Host``, so it reaches nothing. Where a listener takes no
cross-origin request at all (the AWS endpoint, the runtime's ``/_local/`` control endpoints,
the console's changes), an ``Origin`` must be the listener's own (:func:`own_origin`).

Secrets written to disk on this machine (``runtime.json`` with the API key, the TLS key, the
console's control file) are readable by their owner only: :func:`write_private` (mode 0600,
written whole under another name, then renamed into place).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
DEFAULT_PORTS = {"http": 80, "https": 443}
# The answer to a request with a foreign Host: RFC 9110 section 15.5.20, "the request was directed
# at a server that is unable or unwilling to produce an authoritative response for the target URI".
MISDIRECTED = 421
MISDIRECTED_TEXT = "misdirected request: this listener answers only at 127.0.0.1, localhost or [::1]"
PRIVATE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700


def loopback_host(host: str | None, port: int) -> bool:
    """Whether a ``Host`` header names this machine's loopback: ``127.0.0.1``, ``localhost`` or
    ``[::1]``, alone or with the listener's ``port`` (any other port, name or form is not)."""
    value = (host or "").lower()
    return value in LOOPBACK_NAMES or value in {f"{name}:{port}" for name in LOOPBACK_NAMES}


def own_origin(origin: str | None, scheme: str, port: int) -> bool:
    """Whether an ``Origin`` header is the listener's own: ``scheme``, a loopback name and
    ``port`` (left out when it is the scheme's default, as browsers send it)."""
    if not origin:
        return False
    suffix = "" if DEFAULT_PORTS.get(scheme) == port else f":{port}"
    return origin.lower() in {f"{scheme}://{name}{suffix}" for name in LOOPBACK_NAMES}


def write_private(path: Path, data: bytes) -> None:
    """``data`` as the file ``path``, mode 0600 whatever the umask, replaced atomically: a reader
    finds the old file or the whole new one, and a file written before with a wider mode is
    replaced by one of 0600."""
    partial = path.with_name(f".{path.name}.partial")
    with contextlib.suppress(FileNotFoundError):
        partial.unlink()  # left by a crash: O_EXCL below makes the file anew with our mode
    try:
        with os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_MODE), "wb") as handle:
            os.fchmod(handle.fileno(), PRIVATE_MODE)  # exactly 0600 (the umask only narrows the mode)
            handle.write(data)
    except BaseException:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise
    os.replace(partial, path)


def private_dir(path: Path) -> Path:
    """``path`` as a folder, made with mode 0700 when it does not exist yet (an existing folder
    keeps its mode: it is the operator's)."""
    path.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    return path
