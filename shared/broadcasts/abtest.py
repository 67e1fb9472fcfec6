"""A/B tests of a broadcast (docs/broadcasts.md, "A/B tests"): the test's settings, the split
of the audience, the variant of each reader, and the decision rule. Pure: no I/O.

The split and the variant are a hash of the test broadcast's id and the reader's address, so
the same reader is in the same group and gets the same variant however often their page is
resolved or their batch delivered, and the rest (a follow-up broadcast) leaves out exactly the
readers the test took.

The rule (:func:`decide`), per variant: ``delivered`` (readers whose send of the test was
claimed: sent), ``engaged`` (of those, readers with a human open or click of the test: the
engagement consumer's unique markers; machine opens and scanner clicks never count; a click
counts as an open) and ``rate`` = engaged / delivered.

1. a variant delivered to fewer than ``min_sample`` readers: the first variant wins
   (``too_small_sample``): too little to tell, the variant listed first is the default;
2. else the variant with the highest rate wins (``higher_rate``);
3. several variants with that same highest rate: the first listed of them wins (``tie``).
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from shared.core.models import TemplateKey, validate_name

MAX_VARIANTS = 5
MIN_SHARE, MAX_SHARE = 1, 90  # per cent of the audience in the test groups
MIN_DECIDE_S, MAX_DECIDE_S = 600, 7 * 86400  # 10 minutes .. 7 days after the test's start
MAX_MIN_SAMPLE = 1_000_000
METRICS = ("opens", "clicks")
SIDES = ("test", "rest")
_BUCKETS = 10_000  # the share's resolution: 0.01 %
TOO_SMALL, HIGHER_RATE, TIE = "too_small_sample", "higher_rate", "tie"
LETTERS = "ABCDE"


def _hash(test_id: str, email: str) -> int:
    digest = hashlib.sha256(f"{test_id}\n{email.strip().lower()}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def in_test(test_id: str, email: str, share: int) -> bool:
    """Whether ``email`` is in the test groups of ``test_id`` (``share`` per cent of readers)."""
    return _hash(test_id, email) % _BUCKETS < share * _BUCKETS // 100


def variant_of(test_id: str, email: str, variants: int) -> int:
    """The index of the variant a test reader gets (independent of the split's bucket)."""
    return (_hash(test_id, email) // _BUCKETS) % variants


class Split(BaseModel):
    """An audience's part of an A/B test: its test groups (``test``) or the rest (``rest``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    test_of: Annotated[str, BeforeValidator(lambda v: validate_name(v, "broadcast id"))]
    share: int = Field(ge=MIN_SHARE, le=MAX_SHARE, strict=True)
    side: Literal["test", "rest"]

    def keeps(self, email: str) -> bool:
        return in_test(self.test_of, email, self.share) == (self.side == "test")

    def describe(self) -> str:
        if self.side == "test":
            return f"the {self.share}% test groups of A/B test {self.test_of}"
        return f"the {100 - self.share}% rest of A/B test {self.test_of}"


class Variant(BaseModel):
    """What one test group gets: a template and a subject (None: the template's own)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    template: TemplateKey
    subject: str | None = Field(default=None, min_length=1, max_length=500)


class AbTest(BaseModel):
    """The test's settings, stored on the test broadcast's record (``ab``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    variants: tuple[Variant, ...] = Field(min_length=2, max_length=MAX_VARIANTS)
    share: int = Field(ge=MIN_SHARE, le=MAX_SHARE, strict=True)
    metric: Literal["opens", "clicks"]
    decide_after_s: int = Field(ge=MIN_DECIDE_S, le=MAX_DECIDE_S, strict=True)
    min_sample: int = Field(ge=1, le=MAX_MIN_SAMPLE, strict=True)
    rest_id: Annotated[str, BeforeValidator(lambda v: validate_name(v, "rest id"))]

    @model_validator(mode="after")
    def _distinct(self) -> AbTest:
        if len(set(self.variants)) != len(self.variants):
            raise ValueError("two variants are the same (each needs its own template or subject)")
        return self

    def variant(self, test_id: str, email: str) -> Variant:
        return self.variants[variant_of(test_id, email, len(self.variants))]

    def describe(self) -> str:
        parts = [
            f"{LETTERS[i]}: {v.template}" + (f' "{v.subject}"' if v.subject else "")
            for i, v in enumerate(self.variants)
        ]
        return (
            f"{self.share}% test ({'; '.join(parts)}), winner on human {self.metric} "
            f"after {self.decide_after_s // 60} min (min {self.min_sample} delivered per variant) "
            f"to {self.rest_id}"
        )


class VariantResult(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    variant: str  # its letter: A, B, ...
    template: str
    subject: str | None
    delivered: int
    engaged: int  # human opens or clicks (the metric)
    rate: float


class Decision(BaseModel):
    """The outcome, stored on the test broadcast's record (``ab_decision``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    winner: str
    reason: Literal["too_small_sample", "higher_rate", "tie"]
    metric: str
    min_sample: int
    rest_id: str
    decided_at: str
    variants: tuple[VariantResult, ...]

    def winning(self, test: AbTest) -> Variant:
        return test.variants[LETTERS.index(self.winner)]

    def describe(self) -> str:
        numbers = ", ".join(f"{r.variant} {r.engaged}/{r.delivered} ({r.rate:.1%})" for r in self.variants)
        return f"{self.winner} won ({self.reason}; human {self.metric}: {numbers}) -> {self.rest_id}"


def decide(test: AbTest, delivered: list[int], engaged: list[int], *, decided_at: str) -> Decision:
    """The winner by the module's rule from each variant's ``delivered`` and ``engaged``."""
    results = tuple(
        VariantResult(
            variant=LETTERS[i],
            template=v.template,
            subject=v.subject,
            delivered=delivered[i],
            engaged=engaged[i],
            rate=round(engaged[i] / delivered[i], 4) if delivered[i] else 0.0,
        )
        for i, v in enumerate(test.variants)
    )
    exact = [engaged[i] / delivered[i] if delivered[i] else 0.0 for i in range(len(results))]
    if min(delivered) < test.min_sample:
        winner, reason = 0, TOO_SMALL
    else:
        best = max(exact)
        tied = [i for i, rate in enumerate(exact) if rate == best]
        winner, reason = tied[0], (TIE if len(tied) > 1 else HIGHER_RATE)
    return Decision(
        winner=LETTERS[winner],
        reason=reason,  # type: ignore[arg-type]
        metric=test.metric,
        min_sample=test.min_sample,
        rest_id=test.rest_id,
        decided_at=decided_at,
        variants=results,
    )
