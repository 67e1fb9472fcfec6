"""The local runtime's outbox as its readers see it (``mailstep local outbox``, the console's outbox
page, the demo): one ``<message id>.json`` of metadata beside each ``.eml``, written whole by the
local SES (``local_aws.ses``) and never changed, so a reader parses each file once: a console or a
test that looks at a growing outbox again and again reads only what is new."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

_parsed: dict[Path, dict[str, Any]] = {}
_lock = threading.Lock()


def read_outbox(outbox: Path) -> list[dict[str, Any]]:
    """Metadata of every message in the outbox, oldest first (a copy of each: callers may change it)."""
    paths = list(outbox.glob("*.json"))
    with _lock:
        for path in paths:
            if path not in _parsed:
                _parsed[path] = json.loads(path.read_text())
        items = [dict(_parsed[path]) for path in paths]
    return sorted(items, key=lambda m: m["timestamp"])
