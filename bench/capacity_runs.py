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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import capacity as model
from bench.harness import Bench
from bench.meter import Measurement
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
    log: list[model.Logged]
    cpu_seconds: Mapping[str, float]  # function spec name -> CPU seconds in the step
    # function spec name -> invocations and cold starts (environments started) in the step
    invocations: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    names: Mapping[str, str] = field(default_factory=dict)  # key parts -> placeholder
    ses_share: float = 1.0
    # function spec name -> memory and concurrency, as the runtime's template deploys them
    shapes: Mapping[str, model.FunctionShape] = field(default_factory=dict)


def template_shapes(bench: Bench) -> dict[str, model.FunctionShape]:
    """Each function's memory and concurrency from the template the runtime deployed (what
    ``cdk deploy`` would deploy with the same context): its reserved concurrency, else the
    smallest maximum concurrency of its event source mappings, else the account's default."""
    deployment = bench.runtime.deployment
    assert deployment is not None
    template = deployment.template
    configs = template.functions()
    mappings = template.event_source_mappings()
    shapes = {}
    for spec in specs.FUNCTIONS:
        config = configs[spec.handler]
        limits = [
            m.max_concurrency
            for m in mappings
            if m.function_logical_id == config.logical_id and m.max_concurrency
        ]
        if config.reserved_concurrency:
            concurrency, source = config.reserved_concurrency, "reserved"
        elif limits:
            concurrency, source = min(limits), "event source maximum"
        else:
            concurrency, source = model.ACCOUNT_CONCURRENCY, "account default"
        shapes[spec.name] = model.FunctionShape(spec.name, config.memory_mb, concurrency, source)
    return shapes


def _per_function(bench: Bench) -> dict[str, dict[str, float]]:
    """Per function (spec name), so far: CPU seconds as its execution environments report it,
    invocations, and cold starts (environments started)."""
    from local_aws.lambdas import STATS

    physical = {f.name: name for name, f in bench.runtime.resources.functions.items()}
    environments = bench.runtime.environments
    with environments._lock:
        cpu = dict(environments.cpu_seconds)
    found: dict[str, dict[str, float]] = {}
    for name, spec_name in physical.items():
        pool = environments.pools.get(name)
        found[spec_name] = {
            "cpu_s": cpu.get(name, 0.0),
            "invocations": float(STATS.invocations.get(name, 0)),
            "cold_starts": float(pool.started if pool else 0),
        }
    return found


def capture(bench: Bench, name: str, description: str, units: int, unit: str, step: Callable[[], None],
            **extra: Any) -> Run:  # fmt: skip
    before = _per_function(bench)
    bench.meter.start_log(model.compact)
    try:
        measurement = bench.measure(name, units, unit, step)
    finally:
        log = bench.meter.take_log()
    after = _per_function(bench)
    used = {
        f: {k: v - before.get(f, {}).get(k, 0.0) for k, v in counts.items()}
        for f, counts in after.items()
        if counts["invocations"] > before.get(f, {}).get("invocations", 0.0)
    }
    cpu = {f: counts["cpu_s"] for f, counts in used.items()}
    invocations = {f: {"invocations": int(c["invocations"]), "cold_starts": int(c["cold_starts"])}
                   for f, c in used.items()}  # fmt: skip
    return Run(name, description, unit, measurement, log, cpu, invocations=invocations,
               shapes=template_shapes(bench), **extra)  # fmt: skip


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
    # As many executions at once as measured: every environment the step uses is warm.
    warm = deployed.subscribers(sequence, DRIP_SUBSCRIBERS, tag_half=False, prefix="warm-")
    deployed.start_and_wait(sequence, warm)
    _drain(bench, specs.ENGAGEMENT_QUEUE)  # the warm-up's Delivery events are not the step's
    profiles = deployed.subscribers(sequence, DRIP_SUBSCRIBERS, tag_half=False)
    bench.settle()  # the stats fold of the warm-up's sends and the new profiles is not the step's

    def step() -> None:
        deployed.start_and_wait(sequence, profiles)
        _drain(bench, specs.ENGAGEMENT_QUEUE)  # the step's own Delivery events
        bench.settle()  # the stats fold's counts of the step's sends (and the dispatcher's reads)

    return capture(
        bench, "sequences", f"a linear 5-mail drip x {DRIP_SUBSCRIBERS} subscribers (Step Functions), with "
        "the engagement consumer's Delivery events", DRIP_SUBSCRIBERS * 5, "mail", step,
        names={sequence: "<sequence>", "onboarding/tips": "<template>"},
    )  # fmt: skip


def _broadcast(bench: Bench, broadcast_id: str, tag: str) -> None:
    from bench.scenarios.broadcast import broadcasts_service
    from shared.broadcasts.model import parse_request

    service = broadcasts_service(bench)
    service.send(parse_request(id=broadcast_id, template=TEMPLATE, audience={"tags": [tag]}))
    deadline = time.monotonic() + 600
    with bench.meter.quiet():  # the bench watching the record is not the product's traffic
        while service.get(broadcast_id).status != "done":
            if time.monotonic() > deadline:
                raise TimeoutError(f"broadcast {broadcast_id} did not finish")
            time.sleep(0.2)
    _drain(bench, specs.ENGAGEMENT_QUEUE)  # its Delivery events


def broadcast(bench: Bench) -> Run:
    from bench.scenarios.broadcast import WARM_RECIPIENTS, seed_tagged

    table = bench.runtime.resources.tables["table_name"]
    seed_tagged(bench.aws, table, "cap-warm", WARM_RECIPIENTS)
    seed_tagged(bench.aws, table, "cap-news", BROADCAST_RECIPIENTS)
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
    from local_aws import ses_events as ev
    from ops.outbox import read_outbox
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
def derive(run: Run, q: model.Quotas | None = None) -> dict[str, Any]:
    """The capacity model's numbers for one run (the JSON object of one scenario), under the
    quotas ``q`` (default: us-east-1, a mature account at 1,000 mails/s, fresh tables)."""
    q = q or model.quotas()
    m = run.measurement
    units = max(1, m.units)
    write_uses = [u for r in run.log for u in r.writes]
    read_uses = [u for r in run.log for u in r.reads]
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
        ses_rate=q.ses_rate,
        ses_share=run.ses_share if m.ses_sends else 1.0,
        table_units=model.table_units(run.log, units),
        # the requests a function waits for: DynamoDB's and the starts (the log: not the bench's
        # own watching) and the SES sends
        requests_per_mail=(len(run.log) + m.ses_sends) / units,
        broadcast=specs.BROADCAST_WORKER_FUNCTION.name in cpu_ms,
        schedules_per_mail=sum(m.requests[("scheduler", op)] for op in ("CreateSchedule", "UpdateSchedule"))
        / units,
        resumes_per_mail=m.requests[("stepfunctions", "SendTaskSuccess")] / units,
    )
    shapes = dict(run.shapes) or {f.name: model.function_shape(f) for f in specs.FUNCTIONS}
    return {
        "description": run.description,
        "unit": run.unit,
        "units": m.units,
        **model.result(inputs, shapes, q),
        "hottest_key_wcu_per_mail": round(hot_write.per_mail, 4) if hot_write else 0.0,
        "hottest_key": f"{hot_write.where}: {hot_write.pattern}" if hot_write else "",
        "hottest_key_rcu_per_mail": round(hot_read.per_mail, 4) if hot_read else 0.0,
        "hottest_read_key": f"{hot_read.where}: {hot_read.pattern}" if hot_read else "",
        "hottest_keys_wcu": {w: h.public() for w, h in hot_writes.items()},
        "hottest_keys_rcu": {w: h.public() for w, h in hot_reads.items()},
        "table_units_per_mail": {
            w: {"wcu": round(u[0], 3), "rcu": round(u[1], 3)} for w, u in inputs.table_units.items()
        },  # fmt: skip
        "max_tx_per_item_per_mail": round(tx, 4),
        "max_tx_item": tx_item,
        "cpu_ms_per_mail": cpu_ms,
        "functions": {
            f: {
                "memory_mb": shapes[f].memory_mb,
                "vcpu": round(shapes[f].vcpu, 3),
                "concurrency": shapes[f].concurrency,
                "concurrency_from": shapes[f].concurrency_from,
                **run.invocations.get(f, {}),
            }
            for f in cpu_ms
            if f in shapes
        },  # fmt: skip
        "per_mail": {
            "ses_sends": round(inputs.ses_sends_per_mail, 4),
            "start_executions": round(inputs.starts_per_mail, 4),
            "state_transitions": round(inputs.transitions_per_mail, 4),
            "schedules": round(inputs.schedules_per_mail, 4),  # callback Tasks' CreateSchedule
            "task_successes": round(inputs.resumes_per_mail, 4),  # the schedules that fired
            "http_requests": round(inputs.http_per_mail, 4),
            "waited_requests": round(inputs.requests_per_mail, 3),
            "wru": round(m.wru / units, 3),
            "rru": round(m.rru / units, 3),
            "cost_usd_per_1000": round(m.cost_per_1000(), 5),
        },
        # what the model needs to recompute this scenario elsewhere (``--inputs``)
        "inputs": inputs.public(),
        "shapes": {f: asdict(shape) for f, shape in shapes.items()},
    }


def at_a_million(results: Mapping[str, Mapping[str, Any]], subscribers: int = 1_000_000) -> dict[str, Any]:
    """A broadcast to ``subscribers`` recipients from the measured scenarios: time to resolve
    (the resolver's CPU alone, and the chain with its requests' latency and SQS hops), to
    send (at the broadcast ceiling), to absorb the events (Deliveries are in the broadcast's
    numbers; Opens and Clicks at the engagement ceiling) and the cost (measured cost per mail)."""
    found: dict[str, Any] = {"recipients": subscribers}
    broadcast = results.get("broadcast")
    if broadcast:
        resolver = broadcast["functions"].get("broadcast-resolver")
        if resolver:
            cpu_ms = broadcast["cpu_ms_per_mail"]["broadcast-resolver"]
            found["resolve_s_cpu_bound"] = round(subscribers * cpu_ms / 1000 / resolver["vcpu"])
            found["resolve_s"] = round(subscribers / model.resolution_rate(cpu_ms, resolver["vcpu"]))
            found["resolve_assumes"] = model.RESOLVER_LATENCY
        if broadcast["ceiling_per_s"]:
            found["send_s"] = round(subscribers / broadcast["ceiling_per_s"])
            found["send_limited_by"] = broadcast["limited_by"]
        found["cost_usd"] = round(subscribers * broadcast["per_mail"]["cost_usd_per_1000"] / 1000, 2)
    engagement = results.get("engagement")
    if engagement and engagement["ceiling_per_s"]:
        found["events_s"] = round(subscribers / engagement["ceiling_per_s"])
        found["events_limited_by"] = engagement["limited_by"]
        found["events_cost_usd"] = round(subscribers * engagement["per_mail"]["cost_usd_per_1000"] / 1000, 2)
    return found
