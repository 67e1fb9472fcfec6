"""Topics: the kinds of mail a reader can choose, declared in ``topics.yaml``.

    topics:
      - id: product-updates          # [a-z0-9][a-z0-9_.-]*, no '#'
        name: Product updates        # shown on the sign-up form and the preference page
        description: New features, about once a month.
        default: on                  # on: everyone until they opt out; off: only who opted in

The file is read with line numbers (the sequences loader's composer), so every error names
the file and the line. A reader's choices live on the profile as ``topics_in`` /
``topics_out``; :meth:`TopicCatalog.receives` is the one rule that combines them with the
defaults (the send pipeline, audience resolution, the preference page and the operator tools use it).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shared.core.errors import InvalidInput
from shared.core.models import validate_name
from shared.core.yaml_source import Problem, Source, read_source

TOPICS_FILE = Path(__file__).resolve().parent.parent.parent / "topics.yaml"
MAX_TOPICS = 50
MAX_NAME = 80
MAX_DESCRIPTION = 300
TOPIC_KEYS = ("id", "name", "description", "default")


@dataclass(frozen=True)
class Topic:
    id: str
    name: str
    description: str = ""
    default: bool = True  # on


@dataclass(frozen=True)
class TopicCatalog:
    topics: dict[str, Topic] = field(default_factory=dict)  # in file order

    def __iter__(self) -> Iterator[Topic]:
        return iter(self.topics.values())

    def __len__(self) -> int:
        return len(self.topics)

    def __contains__(self, topic_id: object) -> bool:
        return topic_id in self.topics

    def get(self, topic_id: str) -> Topic | None:
        return self.topics.get(topic_id)

    def receives(self, topic: str, topics_in: Iterable[str], topics_out: Iterable[str]) -> bool:
        """Whether a reader with these choices receives mail of ``topic``: their own choice
        first, else the topic's default. An undeclared topic counts as on (a mail naming it is a
        configuration error the validators report; it must not silently reach nobody)."""
        if topic in topics_out:
            return False
        if topic in topics_in:
            return True
        declared = self.topics.get(topic)
        return declared.default if declared is not None else True


class TopicsInvalid(InvalidInput):
    """``topics.yaml`` is invalid; ``topic_problems`` lists every problem in line order."""

    def __init__(self, problems: list[Problem]) -> None:
        self.topic_problems = sorted(problems, key=lambda p: (p.file, p.line, p.message))
        super().__init__("invalid topics file:\n" + "\n".join(str(p) for p in self.topic_problems))


def load_topics(path: Path = TOPICS_FILE, display: str | None = None) -> tuple[TopicCatalog, list[Problem]]:
    """The catalog and every problem of ``path`` (an absent file declares no topics)."""
    if not path.exists():
        return TopicCatalog(), []
    source, problems = read_source(path, display or path.name)
    if source is None or problems:
        return TopicCatalog(), problems
    return _parse(source)


def require_topics(path: Path = TOPICS_FILE, display: str | None = None) -> TopicCatalog:
    """The catalog of ``path``; raises :class:`TopicsInvalid` naming file and line."""
    catalog, problems = load_topics(path, display)
    if problems:
        raise TopicsInvalid(problems)
    return catalog


def _parse(src: Source) -> tuple[TopicCatalog, list[Problem]]:
    problems: list[Problem] = []

    def problem(path: tuple[str | int, ...], message: str) -> None:
        problems.append(Problem(src.file, src.line(path), None, message))

    data = src.data
    if not isinstance(data, dict):
        problem((), "the topics file is a mapping with one key, 'topics'")
        return TopicCatalog(), problems
    for key in data:
        if key != "topics":
            problem((key,), f"unknown key {key!r} (allowed: topics)")
    items = data.get("topics")
    if items is None:
        items = []
    if not isinstance(items, list):
        problem(("topics",), "topics must be a list of {id, name, description, default}")
        return TopicCatalog(), problems
    if len(items) > MAX_TOPICS:
        problem(("topics",), f"at most {MAX_TOPICS} topics")
    found: dict[str, Topic] = {}
    for index, item in enumerate(items):
        topic = _topic(item, ("topics", index), problem)
        if topic is None:
            continue
        if topic.id in found:
            problem(("topics", index, "id"), f"duplicate topic id {topic.id!r}")
            continue
        found[topic.id] = topic
    return TopicCatalog(found), problems


def _topic(item: Any, path: tuple[str | int, ...], problem: Any) -> Topic | None:
    if not isinstance(item, dict):
        problem(path, "a topic is a mapping: id, name, description, default")
        return None
    ok = True
    for key in item:
        if key not in TOPIC_KEYS:
            problem((*path, key), f"unknown key {key!r} (allowed: {', '.join(TOPIC_KEYS)})")
            ok = False
    for key in ("id", "name"):
        if key not in item:
            problem(path, f"missing key {key!r}")
            ok = False
    if not ok:
        return None
    try:
        topic_id = validate_name(item["id"], "topic id")
    except ValueError as exc:
        problem((*path, "id"), str(exc))
        return None
    name, description = item["name"], item.get("description", "")
    for key, value, limit in (("name", name, MAX_NAME), ("description", description, MAX_DESCRIPTION)):
        if not isinstance(value, str) or (key == "name" and not value.strip()):
            problem(
                (*path, key),
                f"{key} must be a non-empty string" if key == "name" else f"{key} must be a string",
            )
            return None
        if len(value) > limit:
            problem((*path, key), f"{key} must be at most {limit} characters")
            return None
    default = item.get("default", True)
    if not isinstance(default, bool):  # YAML reads on/off/true/false as booleans
        problem((*path, "default"), "default must be on or off")
        return None
    return Topic(id=topic_id, name=name.strip(), description=description.strip(), default=default)


def choices_from(chosen: Iterable[str], catalog: TopicCatalog) -> tuple[frozenset[str], frozenset[str]]:
    """(topics_in, topics_out) of a complete choice: the chosen topics in, every other declared
    topic out (a form that sends topics states the whole choice)."""
    selected = frozenset(chosen)
    return selected, frozenset(t.id for t in catalog if t.id not in selected)


def subscribed_topics(
    topics_in: Iterable[str], topics_out: Iterable[str], catalog: TopicCatalog
) -> list[str]:
    """The declared topics a reader with these choices receives, in file order."""
    return [t.id for t in catalog if catalog.receives(t.id, topics_in, topics_out)]
