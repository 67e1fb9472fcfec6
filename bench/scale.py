"""``python -m bench scale``: the scale tier on the local runtime (docs/bench-scale.md).

One run, on a fresh local runtime in the deployed shape (every function from the artifact in
execution environments of its own, the account's SES rate set high enough not to limit):

1. **import**: ``--subscribers`` rows (default 100,000) written to a CSV file and imported with
   ``ops.csv_io.import_csv`` as ``mailstep subscribers import FILE --tag scale`` does against the
   local runtime (one worker);
2. **broadcast**: one broadcast to the tag (every imported subscriber), resolved by the resolver
   function and sent by the workers through the local SES, then the engagement consumer's
   Delivery events drained, measured like the capacity model's broadcast scenario
   (``bench.capacity_runs.capture``) and derived with ``bench.capacity_runs.derive``.

It reports the import's time and rate, the audience's resolution time (from the send request to
the record marked resolved), the send's time and rate, each function's peak resident memory (the
largest any of its execution environments reached, as the environments report it) against its
configured memory, and the capacity model's numbers for the broadcast of this run.

Not part of ``make test``: at 100,000 subscribers it runs for tens of minutes.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import resource
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import capacity_runs
from bench.capacity import DEFAULT_SES_RATE
from bench.harness import Bench
from shared.core import specs

DEFAULT_SUBSCRIBERS = 100_000
TAG = "scale"
BROADCAST_ID = "scale-broadcast"
TEMPLATE = capacity_runs.TEMPLATE
POLL_S = 0.25
PROGRESS_S = 60.0
# The longest the bench waits for the broadcast: generous at the emulator's speed (a few ms of
# each of several processes per mail on a shared machine), and never less than ten minutes.
DEADLINE_S_PER_RECIPIENT = 0.1
MIN_DEADLINE_S = 600.0


@dataclass(frozen=True)
class ImportFigures:
    rows: int
    created: int
    rejected: int
    seconds: float


@dataclass(frozen=True)
class BroadcastFigures:
    recipients: int  # the resolved audience
    sent: int
    failed: int
    resolution_s: float  # the send request -> the record marked resolved (every page read)
    send_s: float  # the send request -> the record done (every recipient counted)
    events_s: float  # the send request -> the engagement queue drained (its Delivery events)


def write_csv(path: Path, subscribers: int) -> None:
    """``subscribers`` rows: a new address, a first name and a ``plan`` attribute each."""
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["email", "first_name", "plan"])
        for i in range(subscribers):
            writer.writerow([f"reader{i:06d}@example.com", f"Reader {i}", "pro" if i % 10 == 0 else "free"])


def rate(count: int, seconds: float) -> float | None:
    return round(count / seconds, 1) if seconds > 0 else None


def peak_memory(
    peak_rss_kb: Mapping[str, int],
    physical: Mapping[str, str],
    configured_mb: Mapping[str, int],
    environments: Mapping[str, int],
) -> dict[str, dict[str, Any]]:
    """Per function (spec name) that ran: the largest peak resident memory any of its execution
    environments reported (MB), its configured memory (MB), the share of it used, and how many
    environments it started. Every mapping is keyed by the function's physical name;
    ``physical`` maps it to the spec name the report uses."""
    found: dict[str, dict[str, Any]] = {}
    for name, peak_kb in sorted(peak_rss_kb.items(), key=lambda kv: physical.get(kv[0], kv[0])):
        function = physical.get(name, name)
        peak_mb = round(peak_kb / 1024, 1)
        memory_mb = configured_mb.get(name)
        found[function] = {
            "peak_rss_mb": peak_mb,
            "memory_mb": memory_mb,
            "used": round(peak_mb / memory_mb, 3) if memory_mb else None,
            "environments": environments.get(name, 0),
        }
    return found


def report(
    subscribers: int,
    imported: ImportFigures,
    broadcast: BroadcastFigures,
    memory: Mapping[str, Mapping[str, Any]],
    model: Mapping[str, Any],
    runtime_peak_rss_mb: float,
) -> dict[str, Any]:
    """The JSON object of one scale run (docs/bench-scale.md names each key)."""
    return {
        "subscribers": subscribers,
        "import": {
            "rows": imported.rows,
            "created": imported.created,
            "rejected": imported.rejected,
            "seconds": round(imported.seconds, 1),
            "rows_per_s": rate(imported.rows, imported.seconds),
        },
        "broadcast": {
            "recipients": broadcast.recipients,
            "sent": broadcast.sent,
            "failed": broadcast.failed,
            "resolution_s": round(broadcast.resolution_s, 1),
            "send_s": round(broadcast.send_s, 1),
            "send_rate_per_s": rate(broadcast.sent, broadcast.send_s),
            "with_events_s": round(broadcast.events_s, 1),
        },
        "peak_memory": dict(memory),
        "runtime_peak_rss_mb": round(runtime_peak_rss_mb, 1),
        "model": {
            key: model.get(key)
            for key in (
                "ceiling_per_s",
                "limited_by",
                "hottest_key_wcu_per_mail",
                "hottest_key",
                "hottest_key_rcu_per_mail",
                "hottest_read_key",
                "max_tx_per_item_per_mail",
                "max_tx_item",
                "cpu_ms_per_mail",
                "functions",
                "per_mail",
                "ceilings_per_s",
            )
        },
    }


def text(result: Mapping[str, Any]) -> str:
    """The report for a terminal (``--json`` prints the object itself)."""
    imported, sent, model = result["import"], result["broadcast"], result["model"]
    lines = [
        f"scale: {result['subscribers']:,} subscribers",
        f"import      {imported['rows']:,} rows ({imported['created']:,} created, {imported['rejected']} "
        f"rejected) in {imported['seconds']:,.1f} s: {imported['rows_per_s'] or 0:,.1f} rows/s",
        f"resolution  {sent['recipients']:,} recipients resolved in {sent['resolution_s']:,.1f} s",
        f"send        {sent['sent']:,} sent ({sent['failed']} failed) in {sent['send_s']:,.1f} s: "
        f"{sent['send_rate_per_s'] or 0:,.1f} mails/s; with the Delivery events "
        f"{sent['with_events_s']:,.1f} s",
        "peak memory (largest of each function's execution environments):",
    ]
    for function, m in result["peak_memory"].items():
        share = f" ({m['used']:.0%} of {m['memory_mb']} MB)" if m["used"] is not None else ""
        lines.append(
            f"  {function:<28} {m['peak_rss_mb']:>7.1f} MB{share}, {m['environments']} environment(s)"
        )
    lines.append(f"  {'(runtime process, moto)':<28} {result['runtime_peak_rss_mb']:>7.1f} MB")
    ceiling = model["ceiling_per_s"]
    lines += [
        "capacity model, this broadcast:",
        f"  ceiling            {'no limit' if ceiling is None else f'{ceiling:,.1f} mails/s'} "
        f"(limited by {model['limited_by']})",
        f"  hottest key        {model['hottest_key_wcu_per_mail']:.3f} WCU per mail ({model['hottest_key']})",
        f"  tx per item        {model['max_tx_per_item_per_mail']:.4f} per mail ({model['max_tx_item']})",
        "  CPU ms per mail    "
        + ", ".join(f"{f} {ms:.2f}" for f, ms in (model["cpu_ms_per_mail"] or {}).items()),
    ]
    return "\n".join(lines)


# ----- the run ---------------------------------------------------------------------------------
def _import(bench: Bench, source: Path) -> ImportFigures:
    from ops.csv_io import import_csv
    from shared.store.subscribers import SubscriberStore

    tables = bench.runtime.resources.tables
    store = SubscriberStore(
        tables["table_name"], tables["events_table_name"], client=bench.aws.client("dynamodb")
    )
    # As `mailstep subscribers import` runs against the local runtime: one worker.
    imported = import_csv(source, store, extra_tags=(TAG,), workers=1)
    return ImportFigures(imported.rows, imported.created, len(imported.rejected), imported.seconds)


def _broadcast(bench: Bench, subscribers: int, timings: dict[str, float], say: Callable[[str], None]) -> None:
    """Send the broadcast and wait for it (resolution, every recipient counted, its Delivery
    events), noting when each happened in ``timings`` (seconds after the send request) and
    telling its progress every :data:`PROGRESS_S`."""
    from bench.scenarios.broadcast import _drained, broadcasts_service
    from shared.broadcasts.model import parse_request

    service = broadcasts_service(bench)
    queue = bench.runtime.resources.queues[specs.ENGAGEMENT_QUEUE.id].url
    deadline_s = max(MIN_DEADLINE_S, subscribers * DEADLINE_S_PER_RECIPIENT)
    started = told = time.monotonic()
    service.send(parse_request(id=BROADCAST_ID, template=TEMPLATE, audience={"tags": [TAG]}))
    with bench.meter.quiet():  # the bench watching the record is not the product's traffic
        while True:
            record = service.get(BROADCAST_ID)
            took = time.monotonic() - started
            if record.resolved and "resolution_s" not in timings:
                timings["resolution_s"] = took
            if record.status != "sending" and record.status != "resolving":
                timings["send_s"] = took
                timings.setdefault("resolution_s", took)
                break
            if took > deadline_s:
                raise TimeoutError(f"broadcast {BROADCAST_ID} did not finish: {record.public()}")
            if time.monotonic() - told >= PROGRESS_S:
                told = time.monotonic()
                say(
                    f"{record.status}: {record.audience_size:,} resolved, {record.sent:,} sent, {took:,.0f} s"
                )
            time.sleep(POLL_S)
        while not _drained(bench.aws, queue):
            if time.monotonic() - started > deadline_s:
                raise TimeoutError("the engagement queue did not drain")
            time.sleep(POLL_S)
    timings["events_s"] = time.monotonic() - started


def run(bench: Bench, subscribers: int, ses_rate: float = DEFAULT_SES_RATE,
        say: Callable[[str], None] = lambda _: None) -> dict[str, Any]:  # fmt: skip
    """One scale run on ``bench`` (a fresh local runtime): its report (:func:`report`)."""
    from bench.scenarios.broadcast import broadcasts_service

    quota = bench.runtime.ses.max_24_hour_send
    if quota < subscribers:  # the local SES would defer the rest for a day, as SES does
        raise RuntimeError(f"the local SES's 24-hour quota ({quota:,}) is below {subscribers:,} mails")
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "scale.csv"
        write_csv(source, subscribers)
        say(f"importing {subscribers:,} subscribers")
        imported = _import(bench, source)
    if imported.created != subscribers:
        raise RuntimeError(f"the import created {imported.created} of {subscribers} subscribers")

    say(f"broadcasting to {subscribers:,} subscribers")
    timings: dict[str, float] = {}
    measured = capacity_runs.capture(
        bench, "broadcast", f"a broadcast to the {subscribers:,} imported subscribers (a tag audience), "
        "with the engagement consumer's Delivery events", subscribers, "mail",
        lambda: _broadcast(bench, subscribers, timings, say),
        names={BROADCAST_ID: "<broadcast>", TAG: "<tag>", TEMPLATE: "<template>"},
        ses_share=capacity_runs.specs_rate_share(),
    )  # fmt: skip
    model = capacity_runs.derive(measured, ses_rate)
    record = broadcasts_service(bench).get(BROADCAST_ID)
    figures = BroadcastFigures(
        recipients=record.audience_size,
        sent=record.sent,
        failed=record.failed,
        resolution_s=timings["resolution_s"],
        send_s=timings["send_s"],
        events_s=timings["events_s"],
    )
    if record.status != "done" or record.sent != subscribers:
        raise RuntimeError(f"the broadcast ended {record.status} with {record.sent} of {subscribers} sent")

    environments = bench.runtime.environments
    with environments._lock:
        peaks = dict(environments.peak_rss_kb)
    memory = peak_memory(
        peaks,
        physical={f.name: name for name, f in bench.runtime.resources.functions.items()},
        configured_mb={name: spec.memory_mb for name, spec in environments.specs.items()},  # the template's
        environments={name: pool.started for name, pool in environments.pools.items()},
    )
    runtime_peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return report(subscribers, imported, figures, memory, model, runtime_peak_mb)


def main(argv: list[str], runtime: Callable[..., contextlib.AbstractContextManager[Bench]]) -> int:
    """``python -m bench scale [--subscribers N] [--json]``; ``runtime`` starts the local runtime
    the bench measures (``bench.__main__._runtime``), its template synthesized for the capacity
    model's account (``mailstep:sesMaxSendRate`` = :data:`DEFAULT_SES_RATE`), as
    ``python -m bench capacity`` does: the broadcast workers' concurrency is the one such a
    deployment has (8 environments at most locally)."""
    parser = argparse.ArgumentParser(
        prog="python -m bench scale",
        description="The scale tier: import N subscribers and send them one broadcast on the local "
        "runtime (docs/bench-scale.md).",
    )
    parser.add_argument(
        "--subscribers",
        type=int,
        default=DEFAULT_SUBSCRIBERS,
        help=f"subscribers to import and broadcast to (default {DEFAULT_SUBSCRIBERS:,})",
    )
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    args = parser.parse_args(argv)
    if args.subscribers < 1:
        parser.error("--subscribers must be at least 1")

    def say(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    with _runtime_announced(lambda: runtime({"mailstep:sesMaxSendRate": DEFAULT_SES_RATE}), say) as bench:
        result = run(bench, args.subscribers, say=say)
    print(json.dumps(result, indent=2) if args.json else text(result))
    return 0


@contextlib.contextmanager
def _runtime_announced(
    runtime: Callable[[], contextlib.AbstractContextManager[Bench]], say: Callable[[str], None]
) -> Iterator[Bench]:
    say("starting the local runtime")
    with runtime() as bench:
        yield bench
    say("local runtime stopped")
