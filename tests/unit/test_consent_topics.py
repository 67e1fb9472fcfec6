"""topics.yaml: the shipped file loads; every bad file names its file and line; ``receives``
combines a reader's choices with the topic defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.core.topics import (
    TOPICS_FILE,
    TopicsInvalid,
    choices_from,
    load_topics,
    require_topics,
    subscribed_topics,
)
from shared.store.subscribers import Profile

GOOD = """topics:
  - id: product-updates
    name: Product updates
    description: Monthly.
    default: on
  - id: newsletter
    name: Newsletter
    default: off
"""

# name -> (text, line of the error, part of the message)
INVALID: dict[str, tuple[str, int, str]] = {
    "syntax": ("topics:\n  - id: a\n    name: [unclosed\n", 4, "YAML syntax error"),
    "not a mapping": ("- id: a\n", 1, "a mapping with one key"),
    "unknown top key": ("topics: []\nlists: []\n", 2, "unknown key 'lists'"),
    "topics not a list": ("topics:\n  id: a\n", 1, "topics must be a list"),
    "topic not a mapping": ("topics:\n  - product\n", 2, "a topic is a mapping"),
    "missing name": ("topics:\n  - id: a\n    default: on\n", 2, "missing key 'name'"),
    "unknown topic key": ("topics:\n  - id: a\n    name: A\n    colour: red\n", 4, "unknown key 'colour'"),
    "hash in id": ("topics:\n  - id: 'news#x'\n    name: A\n", 2, "no '#'"),
    "upper-case id": ("topics:\n  - id: News\n    name: A\n", 2, "topic id 'News'"),
    "default not on/off": (
        "topics:\n  - id: a\n    name: A\n    default: maybe\n",
        4,
        "default must be on or off",
    ),
    "empty name": ("topics:\n  - id: a\n    name: ''\n", 3, "name must be a non-empty string"),
    "long description": (
        f"topics:\n  - id: a\n    name: A\n    description: {'x' * 301}\n",
        4,
        "at most 300",
    ),
    "duplicate id": (
        "topics:\n  - id: a\n    name: A\n  - id: a\n    name: B\n",
        4,
        "duplicate topic id 'a'",
    ),
    "duplicate key": ("topics:\n  - id: a\n    name: A\n    name: B\n", 4, "duplicate key 'name'"),
}


def test_the_shipped_topics_file_is_valid() -> None:
    catalog = require_topics(TOPICS_FILE)
    assert [t.id for t in catalog] == ["product-updates", "newsletter"]
    assert catalog.topics["product-updates"].default is True
    assert catalog.topics["newsletter"].default is False


@pytest.mark.parametrize("name", sorted(INVALID))
def test_a_bad_file_gives_one_error_naming_file_and_line(name: str, tmp_path: Path) -> None:
    text, line, needle = INVALID[name]
    path = tmp_path / "topics.yaml"
    path.write_text(text)
    catalog, problems = load_topics(path)
    assert len(problems) == 1, [str(p) for p in problems]
    assert str(problems[0]).startswith(f"topics.yaml:{line}:"), str(problems[0])
    assert needle in problems[0].message
    with pytest.raises(TopicsInvalid) as raised:
        require_topics(path)
    assert f"topics.yaml:{line}:" in str(raised.value)


def test_an_absent_file_declares_no_topics(tmp_path: Path) -> None:
    catalog, problems = load_topics(tmp_path / "topics.yaml")
    assert (len(catalog), problems) == (0, [])


def test_wants_follows_the_choice_first_then_the_default(tmp_path: Path) -> None:
    path = tmp_path / "topics.yaml"
    path.write_text(GOOD)
    catalog = require_topics(path)
    nobody = Profile(email="a@example.com")
    assert nobody.receives("product-updates", catalog) is True  # default on
    assert nobody.receives("newsletter", catalog) is False  # default off
    chose = Profile(
        email="a@example.com", topics_in=frozenset({"newsletter"}), topics_out=frozenset({"product-updates"})
    )
    assert chose.receives("product-updates", catalog) is False
    assert chose.receives("newsletter", catalog) is True
    assert subscribed_topics(chose.topics_in, chose.topics_out, catalog) == ["newsletter"]
    assert nobody.receives("undeclared", catalog) is True


def test_a_stated_choice_opts_out_of_every_other_declared_topic(tmp_path: Path) -> None:
    path = tmp_path / "topics.yaml"
    path.write_text(GOOD)
    catalog = require_topics(path)
    assert choices_from(["newsletter"], catalog) == (
        frozenset({"newsletter"}),
        frozenset({"product-updates"}),
    )
    assert choices_from([], catalog) == (frozenset(), frozenset({"product-updates", "newsletter"}))
