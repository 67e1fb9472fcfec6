"""``python -m bench coldstart [--repeats N] [--json] [function ...]``: each function's cold start
from the code asset (docs/bench.md, "Cold starts").

For every function of ``shared.core.specs.FUNCTIONS``, a fresh Python 3.12 process (the Lambda
runtime's version, ``-I -S -B`` like the local execution environments) imports the function's
handler module from the built asset, with the asset and the Lambda runtime's boto3/botocore on
its path and the function's environment from the synthesized template, and reports:

- the import's CPU time (user + sys of the process across the import: on Lambda an import is
  CPU-bound, and its wall time is this CPU time divided by the function's vCPU share);
- the process's peak resident memory after the import (``VmHWM`` of /proc/self/status: the
  process's ``ru_maxrss`` would start at the bench's own, as a forked child's does);
- how many of the asset's modules were compiled from source on the way (0 when the asset's
  bytecode was used).

Each is measured with the asset as bundled (its ``__pycache__``, compiled for 3.12) and with a
copy of the asset without its bytecode (every module compiled at import: the asset before
bytecode was shipped), ``--repeats`` times each, interleaved; the tables give the min and the
median. From the min (a busy machine only ever adds CPU time), each function's memory need for
its cold start: enough for its peak memory twice over, and enough CPU (Lambda allocates CPU in
proportion to memory, one vCPU at 1,769 MB) to finish the import within ``INIT_TARGET_S``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.core import specs

DEFAULT_REPEATS = 5
# "At 1,769 MB, a function has the equivalent of one vCPU" (AWS Lambda Developer Guide,
# "Configure Lambda function memory"); below it, CPU is allocated in proportion to memory. An
# import runs on one thread, so more than one vCPU does not shorten it.
VCPU_MB = 1769
# The longest an import may take at the function's vCPU share: an HTTP-facing function's cold
# start is a visitor waiting (a form post, an unsubscribe link); other functions are invoked by
# queues, streams, schedules and state machines, where a cold start only delays the work.
INIT_TARGET_S = {"http": 1.0, "background": 3.0}
MEMORY_HEADROOM = 2.0  # memory for the invocation's own work beyond what the import holds
MEMORY_STEP_MB = 64
MIN_MEMORY_MB = 128
REGION = "us-east-1"
ACCOUNT = "123456789012"

# Runs in the measured process (standard library only): puts the asset first on the path,
# counts the modules compiled from source under it, imports the module, prints the figures.
PROBE = """
import importlib, importlib.machinery, json, resource, sys
module, asset, *path = sys.argv[1:]
sys.path[:0] = [asset, *path]
compiled = []
to_code = importlib.machinery.SourceFileLoader.source_to_code
def counting(self, data, path, **kwargs):
    if str(path).startswith(asset):
        compiled.append(str(path)[len(asset):].lstrip("/"))
    return to_code(self, data, path, **kwargs)
importlib.machinery.SourceFileLoader.source_to_code = counting
before = resource.getrusage(resource.RUSAGE_SELF)
importlib.import_module(module)
after = resource.getrusage(resource.RUSAGE_SELF)
cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
# VmHWM: this process's own peak (ru_maxrss starts at the parent's after fork and survives exec)
with open("/proc/self/status") as status:
    peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
found = {"cpu_s": cpu, "peak_kb": peak, "compiled": compiled, "modules": sorted(sys.modules)}
print(json.dumps(found))
"""


@dataclass(frozen=True)
class Sample:
    """One import of a handler module in a fresh process."""

    cpu_s: float
    peak_mb: float
    compiled: tuple[str, ...]  # the asset's modules compiled from source during the import
    modules: frozenset[str] = frozenset()  # every module loaded by then


@dataclass(frozen=True)
class Target:
    """What one function's measurements need: its spec and how to start its process."""

    spec: specs.FunctionSpec
    environment: dict[str, str]


def import_once(
    python: Path,
    asset: Path,
    module: str,
    *,
    path: Sequence[Path] = (),
    environment: dict[str, str] | None = None,
) -> Sample:
    """Import ``module`` in a fresh ``python -I -S -B`` with ``asset`` (then ``path``) on its path."""
    result = subprocess.run(  # noqa: S603 - the Lambda interpreter and our probe
        [str(python), "-I", "-S", "-B", "-c", PROBE, module, str(asset), *map(str, path)],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", **(environment or {})},
        cwd=asset,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"importing {module} from {asset} failed:\n{result.stderr[-3000:]}")
    found = json.loads(result.stdout.strip().splitlines()[-1])
    return Sample(
        cpu_s=found["cpu_s"],
        peak_mb=found["peak_kb"] / 1024,
        compiled=tuple(found["compiled"]),
        modules=frozenset(found["modules"]),
    )


def vcpu_share(memory_mb: int) -> float:
    return min(1.0, memory_mb / VCPU_MB)


def _step_up(mb: float) -> int:
    return max(MIN_MEMORY_MB, math.ceil(mb / MEMORY_STEP_MB) * MEMORY_STEP_MB)


def cold_start_memory_mb(cpu_s: float, peak_mb: float, *, http: bool) -> int:
    """The least memory (a multiple of 64 MB) that holds the import's peak memory twice over and
    runs the import within its target at the vCPU share it buys (capped at one vCPU)."""
    by_memory = _step_up(peak_mb * MEMORY_HEADROOM)
    by_cpu = min(_step_up(VCPU_MB * cpu_s / INIT_TARGET_S["http" if http else "background"]), VCPU_MB)
    return max(by_memory, by_cpu)


def figures(spec: specs.FunctionSpec, source: Sequence[Sample], bytecode: Sequence[Sample]) -> dict[str, Any]:
    """One function's row: CPU (min/median) and peak memory without and with the asset's bytecode."""
    http = bool(spec.routes)

    def summary(samples: Sequence[Sample]) -> dict[str, Any]:
        cpu = [s.cpu_s for s in samples]
        return {
            "cpu_s_min": round(min(cpu), 3),
            "cpu_s_median": round(statistics.median(cpu), 3),
            "peak_mb": round(max(s.peak_mb for s in samples), 1),
            "compiled_modules": max(len(s.compiled) for s in samples),
        }

    after = summary(bytecode)
    return {
        "function": spec.name,
        "handler": spec.handler,
        "http": http,
        "memory_mb": spec.memory_mb,
        "without_bytecode": summary(source),
        "with_bytecode": after,
        # From the least disturbed import (the min): a busy machine only ever adds CPU time.
        "init_s_at_memory": round(after["cpu_s_min"] / vcpu_share(spec.memory_mb), 2),
        "cold_start_memory_mb": cold_start_memory_mb(after["cpu_s_min"], after["peak_mb"], http=http),
    }


def measure(
    targets: Sequence[Target],
    repeats: int,
    once: Callable[[Path, Target], Sample],
    asset: Path,
    source_only: Path,
    progress: Callable[[str], None] = lambda _: None,
) -> list[dict[str, Any]]:
    """``repeats`` imports per function from each asset, interleaved (a slow moment of the
    machine falls on both)."""
    rows = []
    for target in targets:
        source: list[Sample] = []
        bytecode: list[Sample] = []
        for _ in range(repeats):
            source.append(once(source_only, target))
            bytecode.append(once(asset, target))
        rows.append(figures(target.spec, source, bytecode))
        progress(target.spec.name)
    return rows


def text(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as a fixed-width table (docs/bench.md keeps one)."""
    header = (
        f"{'function':<20}{'memory':>7}{'import CPU s without bytecode':>31}{'with bytecode':>15}"
        f"{'peak MB':>13}{'init s':>8}{'needs MB':>10}"
    )
    lines = [
        header,
        f"{'':<20}{'MB':>7}{'min / median':>31}{'min / median':>15}{'w/o / with':>13}{'at mem':>8}",
    ]
    for r in rows:
        before, after = r["without_bytecode"], r["with_bytecode"]
        lines.append(
            f"{r['function'] + (' (http)' if r['http'] else ''):<20}{r['memory_mb']:>7}"
            f"{before['cpu_s_min']:>24.2f} / {before['cpu_s_median']:.2f}"
            f"{after['cpu_s_min']:>8.2f} / {after['cpu_s_median']:.2f}"
            f"{before['peak_mb']:>7.0f} / {after['peak_mb']:<3.0f}"
            f"{r['init_s_at_memory']:>8.2f}{r['cold_start_memory_mb']:>10}"
        )
    uncompiled = [r["function"] for r in rows if r["with_bytecode"]["compiled_modules"]]
    if uncompiled:
        lines.append(f"compiled from source despite the asset's bytecode: {', '.join(uncompiled)}")
    return "\n".join(lines)


def placeholder(logical_id: str, attribute: str) -> str:
    """A stand-in for what CloudFormation would create (nothing is called during an import)."""
    if attribute == "Arn" or logical_id.endswith("Secret"):
        return f"arn:aws:local:{REGION}:{ACCOUNT}:{logical_id}"
    return (
        f"https://{logical_id.lower()}.example"
        if "Url" in attribute or "Endpoint" in attribute
        else logical_id
    )


def targets_of(artifact: Any, names: Sequence[str] = ()) -> list[Target]:
    """Every function of the specs (or those named) with its environment from the template."""
    from local_aws.deployment import lambda_environment
    from local_aws.template import LocalTemplate

    template = LocalTemplate(
        artifact.template, region=REGION, account=ACCOUNT, stack_name="Mailstep", fallback=placeholder
    )
    configs = template.functions()
    found = []
    for spec in specs.FUNCTIONS:
        if names and spec.name not in names:
            continue
        config = configs[spec.handler]
        environment = lambda_environment(
            config.environment,
            name=spec.name,
            handler=spec.handler,
            memory_mb=config.memory_mb,
            artifact=artifact,
            endpoint="http://127.0.0.1:9",
            region=REGION,
        )
        found.append(Target(spec=spec, environment=environment))
    return found


def main(argv: list[str]) -> int:
    from local_aws import artifact as artifacts

    parser = argparse.ArgumentParser(prog="python -m bench coldstart", description=__doc__)
    parser.add_argument("functions", nargs="*", metavar="function",
                        help=f"of {[s.name for s in specs.FUNCTIONS]}; default: all")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS, help="imports per function and asset")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    known = {s.name for s in specs.FUNCTIONS}
    unknown = sorted(set(args.functions) - known)
    if unknown:
        parser.error(f"unknown function(s) {unknown}; known: {sorted(known)}")
    built = artifacts.build()
    targets = targets_of(built, args.functions)

    def once(asset: Path, target: Target) -> Sample:
        module = target.spec.handler.rsplit(".", 1)[0]
        return import_once(
            built.python, asset, module, path=[built.runtime_dir], environment=target.environment
        )

    with tempfile.TemporaryDirectory(prefix="mailstep-coldstart-") as scratch:
        source_only = Path(scratch) / "asset"
        shutil.copytree(built.asset_dir, source_only, ignore=shutil.ignore_patterns("__pycache__"))
        rows = measure(
            targets,
            args.repeats,
            once,
            built.asset_dir,
            source_only,
            progress=lambda name: print(f"measured {name}", file=sys.stderr),
        )
    print(json.dumps(rows, indent=2) if args.json else text(rows))
    return 0
