"""The local runtime's outbox as its readers see it (``mailstep local outbox``, the console's outbox
page, the demo): one ``<message id>.json`` of metadata beside each ``.eml``, written whole by the
local SES (``local_aws.ses``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_outbox(outbox: Path) -> list[dict[str, Any]]:
    """Metadata of every message in the outbox, oldest first."""
    items = [json.loads(p.read_text()) for p in outbox.glob("*.json")]
    return sorted(items, key=lambda m: m["timestamp"])
