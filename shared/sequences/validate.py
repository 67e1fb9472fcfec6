"""The one sequence validator: ``mailstep sequences validate``, the CDK synth, the step
function and the events dispatch all load sequences through :func:`load_catalog`.

Checks beyond the per-file parse (loader.py): templates exist (``templates/<key>.md`` or
``.html``) and, through the renderer's own check, use no undefined variable; steps after an
``exit`` are unreachable; sequence ids are unique; a sequence does not exit on its own
trigger; no path through the steps can outlast a Step Functions standard execution (one
year: the waits plus, per send, the longest time a send window can hold it). Every problem
names file, line and step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from shared.core.topics import TopicCatalog, load_topics
from shared.core.yaml_source import Path_, Problem, Source
from shared.sequences.loader import (
    SequenceInvalid,
    load_file,
    sequence_id_of,
    step_label,
)
from shared.sequences.model import (
    MAX_WAIT_SECONDS,
    WEEKDAYS,
    ExitStep,
    IfStep,
    SendStep,
    SendWindow,
    Sequence,
    Step,
    TagStep,
    WaitStep,
    step_references,
)

SEQUENCE_SUFFIXES = (".yaml", ".yml")

# (template key, subject or None) -> problems (empty when fine).
TemplateCheck = Callable[[str, str | None], list[str]]


def templates_checked_at_synth(_key: str, _subject: str | None) -> list[str]:
    """The template check of a deployed function: none, again. Synth refuses any sequence whose
    templates fail :func:`renderer_template_check` (stacks/constructs/sequences.py) and the code
    asset ships those same files, so a cold start neither repeats the checks (0.2 s of CPU) nor
    loads the renderer and its HTML libraries for them."""
    return []


def renderer_template_check(templates_dir: Path) -> TemplateCheck:
    """The renderer's own checks: the template exists, its body, layout and front matter use
    only known variables, and the subject (given or from front matter) is valid."""
    from shared.sending.rendering import Renderer, RenderError

    renderer = Renderer(templates_dir)

    def check(key: str, subject: str | None) -> list[str]:
        if not renderer.exists(key):
            return [f"template {key!r} not found (expected {templates_dir.name}/{key}.md or .html)"]
        problems = [f"template {key!r}: {templates_dir.name}/{p}" for p in renderer.validate_key(key)]
        if subject is not None:
            problems += [f"subject: {message}" for message in renderer.check_string(subject)]
        else:
            try:
                has_subject = bool(renderer.source(key).front_matter.get("subject"))
            except RenderError:
                has_subject = True  # the front matter problem is reported above
            if not has_subject:
                problems.append(f"no subject: give 'subject' or put one in the front matter of {key!r}")
        return problems

    return check


@dataclass
class Catalog:
    """Every valid sequence of a folder, by id, with the files they came from."""

    sequences: dict[str, Sequence] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)

    def by_trigger(self, event_type: str) -> list[Sequence]:
        return [s for _, s in sorted(self.sequences.items()) if s.trigger_event == event_type]

    def exiting_on(self, event_type: str) -> list[Sequence]:
        return [s for _, s in sorted(self.sequences.items()) if event_type in s.exit_on]

    def get(self, sequence_id: str) -> Sequence | None:
        return self.sequences.get(sequence_id)

    def __iter__(self) -> Iterator[Sequence]:
        return iter(s for _, s in sorted(self.sequences.items()))

    def __len__(self) -> int:
        return len(self.sequences)


def walk(steps: list[Step], path: Path_ = ("steps",)) -> Iterator[tuple[Path_, Step]]:
    """Every step with its path, depth first, in file order."""
    for index, step in enumerate(steps):
        here = (*path, index)
        yield here, step
        if isinstance(step, IfStep):
            yield from walk(step.then, (*here, "then"))
            yield from walk(step.else_, (*here, "else"))


def check_sequence(
    sequence: Sequence, source: Source, templates: TemplateCheck, topics: TopicCatalog | None = None
) -> list[Problem]:
    problems: list[Problem] = []

    def add(path: Path_, message: str) -> None:
        problems.append(Problem(source.file, source.line(path), step_label(path), message))

    if sequence.topic is not None:
        if sequence.transactional:
            add(("topic",), "a transactional sequence takes no topic (transactional mail is never gated)")
        elif topics is not None and sequence.topic not in topics:
            known = ", ".join(t.id for t in topics) or "none"
            add(("topic",), f"topic {sequence.topic!r} is not declared in topics.yaml (declared: {known})")

    if sequence.on is not None:
        for message in templates(sequence.on.send, sequence.on.subject):
            add(("on", "send"), message)
        return problems
    if sequence.trigger_event in sequence.exit_on:
        add(("exit_on",), f"exit_on names the trigger event {sequence.trigger_event!r}")
    _unreachable(sequence.steps, ("steps",), add)
    _longest_path(sequence.steps, ("steps",), 0, window_hold_s(sequence.send_window), add)
    _step_names(sequence.steps, add)
    for path, step in walk(sequence.steps):
        if isinstance(step, SendStep):
            found = templates(step.send, step.subject)
            for message in found:
                add((*path, "send"), message)
            if found:
                continue
            for index, variant in enumerate(step.variants):
                where = (*path, "variants", index, "send" if variant.send else "subject")
                for message in templates(variant.send or step.send, variant.subject or step.subject):
                    add(where, message)
    return problems


def _unreachable(steps: list[Step], path: Path_, add: Callable[[Path_, str], None]) -> None:
    for index, step in enumerate(steps):
        if isinstance(step, ExitStep) and index + 1 < len(steps):
            add((*path, index + 1), "unreachable step: it follows an exit")
            return
        if isinstance(step, IfStep):
            _unreachable(step.then, (*path, index, "then"), add)
            _unreachable(step.else_, (*path, index, "else"), add)


STEP_KINDS = {SendStep: "send", WaitStep: "wait", IfStep: "if", TagStep: "tag"}


def step_names(steps: list[Step]) -> dict[str, tuple[int, Path_, Step]]:
    """Each named step by its name: its place in file order, its path, the step (the first of
    a name used twice)."""
    named: dict[str, tuple[int, Path_, Step]] = {}
    for order, (path, step) in enumerate(walk(steps)):
        name = getattr(step, "name", None)
        if name is not None:
            named.setdefault(name, (order, path, step))
    return named


def _step_names(steps: list[Step], add: Callable[[Path_, str], None]) -> None:
    """Step names are unique; an ``{opened|clicked: {step: name}}`` condition names a send step
    that comes before it in the file (whose mail may have been sent by then)."""
    named = step_names(steps)
    for order, (path, step) in enumerate(walk(steps)):
        name = getattr(step, "name", None)
        if name is not None and named[name][1] != path:
            add((*path, "name"), f"step name {name!r} is used twice (also {step_label(named[name][1])})")
        if not isinstance(step, IfStep):
            continue
        for where, ref in step_references(step.if_, (*path, "if")):
            found = named.get(ref.step)
            if found is None:
                known = ", ".join(sorted(named)) or "none: give the send step a name"
                add(where, f"{ref.kind}: no step is named {ref.step!r} (named steps: {known})")
            elif not isinstance(found[2], SendStep):
                add(
                    where,
                    f"{ref.kind}: step {ref.step!r} is a {STEP_KINDS[type(found[2])]} step: "
                    "only a send step's mail can be opened or clicked",
                )
            elif found[0] > order:
                add(
                    where,
                    f"{ref.kind}: step {ref.step!r} comes after this condition: its mail is not sent yet",
                )


EXECUTION_LIMIT_S = MAX_WAIT_SECONDS  # a standard workflow execution ends after one year
DST_SLACK_S = 3600  # a window in a zone with daylight saving time can close an hour longer


def window_hold_s(window: SendWindow | None) -> int:
    """The longest a send can wait for ``window`` to open: its longest closed stretch in a week."""
    if window is None:
        return 0

    def minutes(hhmm: str) -> int:
        hours, mins = hhmm.split(":")
        return int(hours) * 60 + int(mins)

    week = 7 * 1440
    spans = sorted(
        (WEEKDAYS.index(day) * 1440 + minutes(window.start), WEEKDAYS.index(day) * 1440 + minutes(window.end))
        for day in window.days
    )
    gaps = [
        spans[(i + 1) % len(spans)][0] + (week if i + 1 == len(spans) else 0) - spans[i][1]
        for i in range(len(spans))
    ]
    longest = max(0, *gaps) * 60
    return longest + DST_SLACK_S if longest else 0


def _longest_path(
    steps: list[Step], path: Path_, elapsed: int, hold: int, add: Callable[[Path_, str], None]
) -> int | None:
    """Walk the longest path; report (once) the step where it passes the execution limit and
    return None then, else the worst-case time at the end of ``steps``."""
    for index, step in enumerate(steps):
        here = (*path, index)
        if isinstance(step, ExitStep):
            return elapsed
        if isinstance(step, WaitStep):
            elapsed += step.wait
        elif isinstance(step, SendStep):
            elapsed += hold
        elif isinstance(step, IfStep):
            branches = [
                _longest_path(step.then, (*here, "then"), elapsed, hold, add),
                _longest_path(step.else_, (*here, "else"), elapsed, hold, add),
            ]
            if None in branches:
                return None
            elapsed = max(b for b in branches if b is not None)
        if elapsed > EXECUTION_LIMIT_S:
            add(
                here,
                f"the longest path reaches {elapsed / 86400:.1f} days here (its waits, plus "
                f"{hold / 3600:g} h per send for the send window), past the 365 days a Step "
                "Functions standard execution may run: shorten the waits",
            )
            return None
    return elapsed


def sequence_files(sequences_dir: Path) -> list[Path]:
    if not sequences_dir.is_dir():
        return []
    return sorted(p for p in sequences_dir.iterdir() if p.is_file() and p.suffix in SEQUENCE_SUFFIXES)


def load_catalog(
    sequences_dir: Path | str,
    templates_dir: Path | str | None = None,
    *,
    templates: TemplateCheck | None = None,
    display_root: Path | None = None,
    topics: TopicCatalog | None = None,
) -> tuple[Catalog, list[Problem]]:
    """Load and validate every file of ``sequences_dir``; returns the valid ones and all problems.
    A sequence's ``topic`` must be declared in ``topics`` (by default the ``topics.yaml`` beside
    ``sequences_dir``; its own problems are reported with the sequences')."""
    sequences_dir = Path(sequences_dir)
    problems: list[Problem] = []
    if topics is None:
        topics, topic_problems = load_topics(sequences_dir.parent / "topics.yaml", "topics.yaml")
        problems += topic_problems
    check = templates or renderer_template_check(
        Path(templates_dir) if templates_dir else sequences_dir.parent / "templates"
    )
    catalog = Catalog()
    for path in sequence_files(sequences_dir):
        display = str(path.relative_to(display_root)) if display_root else f"{sequences_dir.name}/{path.name}"
        sequence, source, found = load_file(path, display)
        sequence_id = sequence_id_of(path)
        if sequence_id in catalog.files:
            problems.append(
                Problem(
                    display,
                    1,
                    None,
                    f"duplicate sequence id {sequence_id!r} (also {catalog.files[sequence_id]})",
                )
            )
            continue
        catalog.files[sequence_id] = display
        if sequence is None or source is None:
            problems += found
            continue
        extra = check_sequence(sequence, source, check, topics)
        if extra:
            problems += extra
            continue
        catalog.sequences[sequence_id] = sequence
    return catalog, problems


def require_catalog(
    sequences_dir: Path | str, templates_dir: Path | str | None = None, **kwargs: object
) -> Catalog:
    """Like :func:`load_catalog` but raises :class:`SequenceInvalid` on any problem (synth, Lambdas)."""
    catalog, problems = load_catalog(sequences_dir, templates_dir, **kwargs)  # type: ignore[arg-type]
    if problems:
        raise SequenceInvalid(problems)
    return catalog
