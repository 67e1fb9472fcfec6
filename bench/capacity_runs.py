"""``python -m bench capacity``: the five scenarios of the capacity model, each run on the local
runtime (every function from the artifact in execution environments of its own), each step
measured with the meter's request log and the environments' CPU time, then derived with
:mod:`bench.capacity`.

Each scenario warms its functions up first (imports, secrets, first renders are not charged to
the steady state) and then measures one step; its unit is a mail, except for subscribe and
import (a new subscriber).
"""

from __future__ import annotations

import csv
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import capacity as model
from bench.harness import Bench
from bench.meter import Measurement, Request
from shared.core import specs

SUBSCRIBERS = 100  # subscribe: one batch of 100 new subscribers (POST /v1/events)
DRIP_SUBSCRIBERS = 20  # sequences: the linear 5-mail drip
BROADCAST_RECIPIENTS = 300
IMPORT_ROWS = 200
TEMPLATE = "newsletter/monthly"


@dataclass
class Run:
    """One measured step: what the meter counted, the requests it logged, the CPU it took."""

    name: str
    description: str
    unit: str
    measurement: Measurement
    log: list[Request]
    cpu_seconds: Mapping[str, float]  # function spec name -> CPU seconds in the step
    names: Mapping[str, str] = field(default_factory=dict)  # key parts -> placeholder
    ses_share: float = 1.0


def _cpu(bench: Bench) -> dict[str, float]:
    """CPU seconds so far per function (spec name), as the execution environments report it."""
    physical = {f.name: name for name, f in bench.runtime.resources.functions.items()}
    environments = bench.runtime.environments
    found: dict[str, float] = {}
    with environments._lock:
        for name, seconds in environments.cpu_seconds.items():
            spec_name = physical.get(name, name)
            found[spec_name] = found.get(spec_name, 0.0) + seconds
    return found


def capture(bench: Bench, name: str, description: str, units: int, unit: str, step: Callable[[], None],
            **extra: Any) -> Run:  # fmt: skip
    before = _cpu(bench)
    bench.meter.start_log()
    try:
        measurement = bench.measure(name, units, unit, step)
    finally:
        log = bench.meter.take_log()
    after = _cpu(bench)
    cpu = {f: s - before.get(f, 0.0) for f, s in after.items() if s > before.get(f, 0.0)}
    return Run(name, description, unit, measurement, log, cpu, **extra)


def _drain(bench: Bench, queue: specs.QueueSpec, timeout_s: float = 600) -> None:
    from bench.scenarios.broadcast import _drained

    url = bench.runtime.resources.queues[queue.id].url
    deadline = time.monotonic() + timeout_s
    with bench.meter.quiet():
        while not _drained(bench.aws, url):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{queue.local_name} did not drain")
            time.sleep(0.2)


# ----- the scenarios ---------------------------------------------------------------------------
def subscribe(bench: Bench) -> Run:
    from bench.scenarios.subscribe import _event, _expect_ok

    _expect_ok(*bench.post("/v1/events", {"events": [_event("capwarm", i) for i in range(10)]}))

    def step() -> None:
        _expect_ok(*bench.post("/v1/events", {"events": [_event("cap", i) for i in range(SUBSCRIBERS)]}))

    return capture(
        bench, "subscribe", f"a batch of {SUBSCRIBERS} new subscribers (2 tags each) via POST /v1/events",
        SUBSCRIBERS, "subscriber", step, names={"newsletter": "<tag>", "trial": "<tag>"},
    )  # fmt: skip


def sequences(bench: Bench) -> Run:
    from bench.scenarios.sequences import deploy

    deployed = deploy(bench)
    sequence = "bench-linear"
    deployed.start_and_wait(sequence, deployed.subscribers(sequence, 2, tag_half=False, prefix="warm-"))
    profiles = deployed.subscribers(sequence, DRIP_SUBSCRIBERS, tag_half=False)
    return capture(
        bench, "sequences", f"a linear 5-mail drip x {DRIP_SUBSCRIBERS} subscribers (Step Functions)",
        DRIP_SUBSCRIBERS * 5, "mail", lambda: deployed.start_and_wait(sequence, profiles),
        names={sequence: "<sequence>", "onboarding/tips": "<template>"},
    )  # fmt: skip


def _broadcast(bench: Bench, broadcast_id: str, tag: str) -> None:
    from bench.scenarios.broadcast import _service
    from shared.broadcasts.model import parse_request

    service = _service(bench)
    service.send(parse_request(id=broadcast_id, template=TEMPLATE, audience={"tags": [tag]}))
    deadline = time.monotonic() + 600
    with bench.meter.quiet():  # the bench watching the record is not the product's traffic
        while service.get(broadcast_id).status != "done":
            if time.monotonic() > deadline:
                raise TimeoutError(f"broadcast {broadcast_id} did not finish")
            time.sleep(0.2)
    _drain(bench, specs.ENGAGEMENT_QUEUE)  # its Delivery events


def broadcast(bench: Bench) -> Run:
    from bench.scenarios.broadcast import WARM_RECIPIENTS, _seed

    table = bench.runtime.resources.tables["table_name"]
    _seed(bench.aws, table, "cap-warm", WARM_RECIPIENTS)
    _seed(bench.aws, table, "cap-news", BROADCAST_RECIPIENTS)
    _broadcast(bench, "cap-warmup", "cap-warm")
    share = specs_rate_share()
    return capture(
        bench, "broadcast", f"a broadcast to {BROADCAST_RECIPIENTS} recipients (a tag audience), with the "
        "engagement consumer's Delivery events", BROADCAST_RECIPIENTS, "mail",
        lambda: _broadcast(bench, "cap-news", "cap-news"),
        names={"cap-news": "<broadcast>", TEMPLATE: "<template>"}, ses_share=share,
    )  # fmt: skip


def specs_rate_share() -> float:
    """The share of the account's rate broadcasts use (the settings' default)."""
    from shared.core.settings import Settings

    return float(Settings.model_fields["broadcast_rate_share"].default)


def engagement(bench: Bench) -> Run:
    """An Open for every mail of the measured broadcast and a Click for every other one,
    published by the local SES as SES publishes them (run after :func:`broadcast`)."""
    from cli.local import ses_events as ev
    from cli.local.ses import read_outbox
    from shared.sending.sender import decode_tag_value

    mails = [
        m["mail"]
        for m in read_outbox(bench.runtime.outbox)
        if decode_tag_value(m.get("email_tags", {}).get("source", "")) == "cap-news"
    ]
    if not mails:
        raise RuntimeError("engagement runs after the broadcast scenario: no mail of cap-news")

    def step() -> None:
        for i, mail in enumerate(mails):
            bench.runtime.ses.emit(ev.open_event(mail))
            if i % 2 == 0:
                bench.runtime.ses.emit(ev.click_event(mail, "https://example.com/"))
        _drain(bench, specs.ENGAGEMENT_QUEUE)

    return capture(
        bench, "engagement", f"SES events of the {len(mails)} broadcast mails: an Open each, a Click "
        "for every other one (1.5 events per mail)", len(mails), "mail", step,
        names={"cap-news": "<broadcast>", TEMPLATE: "<template>"},
    )  # fmt: skip


def import_(bench: Bench) -> Run:
    """``mailstep subscribers import FILE --tag newsletter`` (in the operator's process, one
    worker as against the local runtime), no sequence triggered."""
    from ops.csv_io import import_csv
    from shared.store.subscribers import SubscriberStore

    tables = bench.runtime.resources.tables
    store = SubscriberStore(
        tables["table_name"], tables["events_table_name"], client=bench.aws.client("dynamodb")
    )
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "import.csv"
        with source.open("w", newline="") as out:
            writer = csv.writer(out)
            writer.writerow(["email", "first_name", "plan"])
            for i in range(IMPORT_ROWS):
                writer.writerow([f"import{i}@example.com", f"Reader {i}", "free"])

        def step() -> None:
            report = import_csv(source, store, extra_tags=("newsletter",), workers=1)
            if report.created != IMPORT_ROWS:
                raise RuntimeError(f"import created {report.created} of {IMPORT_ROWS}")

        return capture(
            bench, "import", f"a CSV import of {IMPORT_ROWS} new subscribers with --tag newsletter",
            IMPORT_ROWS, "subscriber", step, names={"newsletter": "<tag>"},
        )  # fmt: skip


SCENARIOS: dict[str, Callable[[Bench], Run]] = {
    "subscribe": subscribe,
    "sequences": sequences,
    "broadcast": broadcast,
    "engagement": engagement,  # after broadcast: the events of its mails
    "import": import_,
}


# ----- the derivation --------------------------------------------------------------------------
def derive(run: Run, ses_rate: float = model.DEFAULT_SES_RATE) -> dict[str, Any]:
    """The capacity model's numbers for one run (the JSON object of one scenario)."""
    m = run.measurement
    units = max(1, m.units)
    write_uses = [u for r in run.log for u in model.writes(r)]
    read_uses = [u for r in run.log for u in model.reads(r)]
    hot_writes = model.hottest_keys(write_uses, units, run.names, unit="wcu")
    hot_reads = model.hottest_keys(read_uses, units, run.names, unit="rcu")
    hot_write, hot_read = model.hottest(hot_writes), model.hottest(hot_reads)
    tx, tx_item = model.max_tx_per_item(run.log, units, run.names)
    cpu_ms = {f: round(s * 1000 / units, 3) for f, s in sorted(run.cpu_seconds.items())}
    starts = sum(1 for r in run.log if (r.service, r.operation) == ("stepfunctions", "StartExecution"))
    inputs = model.Inputs(
        hot_write=hot_write,
        hot_read=hot_read,
        cpu_ms_per_mail=cpu_ms,
        ses_sends_per_mail=m.ses_sends / units,
        starts_per_mail=starts / units,
        transitions_per_mail=m.sfn_transitions / units,
        http_per_mail=m.http_requests / units,
        ses_rate=ses_rate,
        ses_share=run.ses_share if m.ses_sends else 1.0,
    )
    shapes = {f.name: model.function_shape(f) for f in specs.FUNCTIONS}
    limits = model.ceilings(inputs, shapes)
    rate, limited_by = model.ceiling(limits)
    return {
        "description": run.description,
        "unit": run.unit,
        "units": m.units,
        "ceiling_per_s": round(rate, 1),
        "limited_by": limited_by,
        "hottest_key_wcu_per_mail": round(hot_write.per_mail, 4) if hot_write else 0.0,
        "hottest_key": f"{hot_write.where}: {hot_write.pattern}" if hot_write else "",
        "hottest_key_rcu_per_mail": round(hot_read.per_mail, 4) if hot_read else 0.0,
        "hottest_read_key": f"{hot_read.where}: {hot_read.pattern}" if hot_read else "",
        "hottest_keys_wcu": {w: h.public() for w, h in hot_writes.items()},
        "hottest_keys_rcu": {w: h.public() for w, h in hot_reads.items()},
        "max_tx_per_item_per_mail": round(tx, 4),
        "max_tx_item": tx_item,
        "cpu_ms_per_mail": cpu_ms,
        "functions": {
            f: {
                "memory_mb": shapes[f].memory_mb,
                "vcpu": round(shapes[f].vcpu, 3),
                "concurrency": shapes[f].concurrency,
                "concurrency_from": shapes[f].concurrency_from,
            }
            for f in cpu_ms
            if f in shapes
        },  # fmt: skip
        "per_mail": {
            "ses_sends": round(inputs.ses_sends_per_mail, 4),
            "start_executions": round(inputs.starts_per_mail, 4),
            "state_transitions": round(inputs.transitions_per_mail, 4),
            "http_requests": round(inputs.http_per_mail, 4),
            "wru": round(m.wru / units, 3),
            "rru": round(m.rru / units, 3),
            "cost_usd_per_1000": round(m.cost_per_1000(), 5),
        },
        "ceilings_per_s": {name: round(v, 1) for name, v in sorted(limits.items(), key=lambda kv: kv[1])},
    }
