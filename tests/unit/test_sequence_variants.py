"""A/B variants of a send step: the choice is sticky per subscriber (the same reader gets the
same variant on every evaluation: a retry, a redelivered Task, a re-entry of the sequence) and,
over many readers, follows the weights.

The requests are built from the compiled state machine's own send Task (its ``Parameters``
with the execution's values put in), then parsed and decided by the step function's logic.
Addresses are deterministic, so these tests give the same answer on every run.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pytest
import yaml

from shared.core.yaml_source import Source
from shared.sequences.compiler import compile_sequence
from shared.sequences.loader import _Composer, parse_source
from shared.sequences.model import Sequence
from shared.sequences.steps import StepRequest, parse_request, pick_variant

MACHINE = "arn:aws:states:us-east-1:123456789012:execution:mailstep-seq-ab"
READERS = 12_000
SIGMAS = 5.0  # an ideal hash leaves a 5-sigma band with probability < 6e-7 per variant


def _sequence(variants: str, own_weight: int | None = None) -> Sequence:
    weight = f"\n    weight: {own_weight}" if own_weight is not None else ""
    text = (
        "trigger: go\nsteps:\n"
        f"  - send: onboarding/check-in\n    subject: Original{weight}\n    variants: {variants}\n"
    )
    composer = _Composer("ab.yaml")
    data = composer.build(yaml.compose(text, Loader=yaml.SafeLoader), ())
    sequence, problems = parse_source(Source("ab.yaml", data, composer.lines), "ab")
    assert problems == [] and sequence is not None, problems
    return sequence


def _send_parameters(sequence: Sequence) -> dict[str, Any]:
    (send,) = [
        s["Parameters"]
        for s in compile_sequence(sequence)["States"].values()
        if s.get("Parameters", {}).get("action") == "send"
    ]
    return dict(send)


def _request(parameters: dict[str, Any], email: str, execution: str = "run-1") -> StepRequest:
    """The payload Step Functions hands the step function for this reader and execution."""
    values = {"$.email": email, "$$.Execution.Id": f"{MACHINE}:{execution}", "$.data": {}}
    payload = {
        (key[:-2] if key.endswith(".$") else key): (values[value] if key.endswith(".$") else value)
        for key, value in parameters.items()
    }
    return parse_request(payload)


def _reader(index: int) -> str:
    return f"reader-{index:05d}@example.com"


def test_the_same_reader_gets_the_same_variant_on_every_evaluation() -> None:
    # Given a step with two variants besides its own template and subject
    parameters = _send_parameters(
        _sequence('[{subject: "Subject B"}, {send: onboarding/tips, subject: "Subject C"}]')
    )
    chosen: dict[str, set[tuple[str, str | None, str]]] = {}
    for index in range(300):
        email = _reader(index)
        # When the Task is evaluated again and again: a retry or redelivery of the same Task
        # (same execution) and re-entries of the sequence (other executions)
        picks = {pick_variant(_request(parameters, email)) for _ in range(3)}
        picks |= {pick_variant(_request(parameters, email, f"run-{run}")) for run in range(2, 6)}
        chosen[email] = picks
    # Then each reader always got one and the same variant
    assert {email: picks for email, picks in chosen.items() if len(picks) != 1} == {}
    # ... and the readers did not all get the same one
    variants = Counter(next(iter(picks))[2] for picks in chosen.values())
    assert set(variants) == {"a", "b", "c"}, variants
    assert {next(iter(p))[:2] for p in chosen.values()} == {
        ("onboarding/check-in", "Original"),
        ("onboarding/check-in", "Subject B"),
        ("onboarding/tips", "Subject C"),
    }


@pytest.mark.parametrize(
    ("variants", "own_weight", "weights"),
    [
        ('[{subject: "B"}]', None, {"a": 1, "b": 1}),
        ('[{subject: "B", weight: 3}]', None, {"a": 1, "b": 3}),
        ('[{subject: "B", weight: 1}, {subject: "C", weight: 1}]', 2, {"a": 2, "b": 1, "c": 1}),
        ('[{subject: "B", weight: 10}, {subject: "C", weight: 89}]', 1, {"a": 1, "b": 10, "c": 89}),
    ],
    ids=["even", "one-to-three", "two-one-one", "skewed"],
)
def test_over_many_readers_the_split_follows_the_weights(
    variants: str, own_weight: int | None, weights: dict[str, int]
) -> None:
    # Given a step whose template and variants carry these weights
    parameters = _send_parameters(_sequence(variants, own_weight))
    # When 12,000 distinct readers reach it
    counts = Counter(pick_variant(_request(parameters, _reader(i)))[2] for i in range(READERS))
    # Then each variant's share is its weight's share, within 5 standard deviations of the
    # binomial count an ideal uniform hash would give (and no other variant appears)
    assert set(counts) == set(weights), counts
    total = sum(weights.values())
    for variant, weight in weights.items():
        p = weight / total
        expected, sd = READERS * p, math.sqrt(READERS * p * (1 - p))
        assert abs(counts[variant] - expected) <= SIGMAS * sd, (variant, counts, expected, sd)


def test_the_choice_of_one_step_does_not_decide_the_next_step() -> None:
    """Each step draws on its own: a reader in variant b of one test is not always in variant b
    of the next one (the step is part of the hash)."""
    parameters = _send_parameters(_sequence('[{subject: "B"}]'))
    other_step = {**parameters, "step": "S9"}
    pairs = Counter(
        (pick_variant(_request(parameters, _reader(i)))[2], pick_variant(_request(other_step, _reader(i)))[2])
        for i in range(2_000)
    )
    assert set(pairs) == {("a", "a"), ("a", "b"), ("b", "a"), ("b", "b")}, pairs
    for pair, count in pairs.items():  # independent halves: 500 each, sd 19.4
        assert abs(count - 500) <= SIGMAS * math.sqrt(2_000 * 0.25 * 0.75), (pair, pairs)
