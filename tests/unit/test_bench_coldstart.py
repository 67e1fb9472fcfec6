"""The cold-start bench's report (bench.coldstart): per function, the import CPU (min/median) and
peak memory without and with the asset's bytecode, the init time at its memory, and the memory
its cold start needs. Pure (the imports are faked), so it runs in the unit tier; the
measurement itself is ``python -m bench coldstart``."""

from __future__ import annotations

from pathlib import Path

from bench.coldstart import (
    VCPU_MB,
    Sample,
    Target,
    cold_start_memory_mb,
    figures,
    measure,
    text,
)
from shared.core import specs

API = next(s for s in specs.FUNCTIONS if s.name == "api")
WORKER = next(s for s in specs.FUNCTIONS if s.name == "broadcast-worker")


def sample(cpu_s: float, peak_mb: float = 60.0, compiled: int = 0) -> Sample:
    return Sample(cpu_s=cpu_s, peak_mb=peak_mb, compiled=tuple(f"m{i}.py" for i in range(compiled)))


def test_a_row_gives_min_and_median_before_and_after_and_the_memory_the_cold_start_needs() -> None:
    row = figures(API, [sample(1.4, 70, 600), sample(1.5, 72, 600), sample(1.3, 71, 600)],
                  [sample(0.7, 66), sample(0.65, 65), sample(0.9, 66)])  # fmt: skip
    assert row["function"] == "api" and row["http"] is True and row["memory_mb"] == API.memory_mb
    assert row["without_bytecode"] == {
        "cpu_s_min": 1.3,
        "cpu_s_median": 1.4,
        "peak_mb": 72.0,
        "compiled_modules": 600,
    }
    assert row["with_bytecode"] == {
        "cpu_s_min": 0.65,
        "cpu_s_median": 0.7,
        "peak_mb": 66.0,
        "compiled_modules": 0,
    }
    # (from the min: a busy machine only ever adds CPU time)
    assert row["init_s_at_memory"] == round(0.65 / min(1.0, API.memory_mb / VCPU_MB), 2)
    assert row["cold_start_memory_mb"] == cold_start_memory_mb(0.65, 66.0, http=True)


def test_the_memory_a_cold_start_needs() -> None:
    # An HTTP-facing import of 0.7 s of CPU finishes within a second at 0.7 vCPU: 1,239 MB -> 1,280
    assert cold_start_memory_mb(0.7, 66.0, http=True) == 1280
    # In the background three seconds will do: the floor is twice the peak memory, in 64 MB steps
    assert cold_start_memory_mb(0.7, 66.0, http=False) == 448
    assert cold_start_memory_mb(0.1, 40.0, http=False) == 128
    # More than one vCPU does not speed an import up; a large peak memory still counts
    assert cold_start_memory_mb(5.0, 66.0, http=True) == VCPU_MB
    assert cold_start_memory_mb(0.1, 1500.0, http=False) == 3008


def test_the_imports_alternate_between_the_assets_and_the_table_has_a_row_per_function() -> None:
    calls: list[tuple[str, str]] = []

    def once(asset: Path, target: Target) -> Sample:
        calls.append((asset.name, target.spec.name))
        return sample(1.2 if asset.name == "source" else 0.6, compiled=500 if asset.name == "source" else 0)

    targets = [Target(spec=API, environment={}), Target(spec=WORKER, environment={})]
    rows = measure(targets, 2, once, Path("asset"), Path("source"))
    assert calls[:4] == [("source", "api"), ("asset", "api"), ("source", "api"), ("asset", "api")]
    assert [r["function"] for r in rows] == ["api", "broadcast-worker"]
    lines = text(rows).splitlines()
    assert len(lines) == 4 and lines[2].startswith("api (http)") and lines[3].startswith("broadcast-worker")
    assert "1.20 / 1.20" in lines[2] and "0.60 / 0.60" in lines[2]
    # A function that still compiled modules with the bytecode is named under the table
    rows[1]["with_bytecode"]["compiled_modules"] = 3
    assert (
        text(rows).splitlines()[-1] == "compiled from source despite the asset's bytecode: broadcast-worker"
    )
