"""The console's sequences (``Console.catalog``): loaded again when a file they are read from
changes, kept otherwise.

Given a project folder (sequences, ``topics.yaml``, templates), when the console asks for the
catalog on every page, then the files are loaded once while nothing changes, and again after
a sequence is edited, a sequence is removed, a template is edited or ``topics.yaml`` changes.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, cast

import pytest

from console.guard import Secrets
from console.site import Console
from shared.sequences import validate

ROOT = Path(__file__).resolve().parents[2]


def _touch_later(path: Path, text: str | None = None) -> None:
    """Change ``path`` (its text, if given) with a modification time surely after the last."""
    if text is not None:
        path.write_text(text)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))


def test_the_catalog_is_kept_until_a_file_it_is_read_from_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("sequences", "templates"):
        shutil.copytree(ROOT / name, tmp_path / name)
    shutil.copy(ROOT / "topics.yaml", tmp_path / "topics.yaml")
    loads: list[Path] = []
    load_catalog = validate.load_catalog

    def counted(sequences_dir: Any, *args: Any, **kwargs: Any) -> Any:
        loads.append(Path(sequences_dir))
        return load_catalog(sequences_dir, *args, **kwargs)

    monkeypatch.setattr(validate, "load_catalog", counted)
    console = Console(cast(Any, None), Secrets(), sequences_dir=tmp_path / "sequences")
    shipped = {p.stem for p in (tmp_path / "sequences").glob("*.yaml")}

    first = console.catalog()
    assert {s.id for s in first} == shipped and len(loads) == 1
    assert console.catalog() is first and console.catalog() is first and len(loads) == 1

    onboarding = tmp_path / "sequences" / "onboarding.yaml"
    _touch_later(onboarding, onboarding.read_text() + "\n# edited\n")
    assert console.catalog() is not first and len(loads) == 2

    (tmp_path / "sequences" / "order-shipped.yaml").unlink()
    assert {s.id for s in console.catalog()} == shipped - {"order-shipped"} and len(loads) == 3

    template = next(p for p in (tmp_path / "templates").rglob("*") if p.is_file())
    _touch_later(template)
    console.catalog()
    assert len(loads) == 4

    _touch_later(tmp_path / "topics.yaml")
    console.catalog()
    console.catalog()
    assert len(loads) == 5
