"""``python -m bench console``: how fast the web console answers at size (docs/console.md).

On a fresh local runtime in the deployed shape:

1. ``--subscribers`` rows (default 10,000) imported as ``mailstep subscribers import`` does
   (``bench.scale``'s CSV and import: ``ops.csv_io.import_csv``, tag ``scale``);
2. a few of them unsubscribed and one suppressed (the status and suppression pages find
   something), :data:`SMALL` of them tagged ``console-small`` and sent one broadcast
   (``bench.capacity_runs._broadcast``: sent, delivered, its events drained);
3. the shipped ``onboarding`` sequence deployed and run for :data:`SEQUENCE_SUBSCRIBERS` new
   subscribers (``bench.scenarios.sequences``), to their end on the virtual clock;
4. the console served as ``mailstep console`` serves it (``console.server.serve``: uvicorn
   on 127.0.0.1, the guard, a session from the printed URL's token, the CSRF token of a page);
5. every page (:func:`pages`) asked once to warm up, then ``--repeats`` times (default 5), the
   pages interleaved; each answer timed (the request sent to the body read) and its DynamoDB
   requests counted from the meter's log (the console's requests: this process's, not the
   functions').

It prints, per page, the median and the largest answer time, whether the page answered under
:data:`BUDGET_MS`, its DynamoDB requests per answer by operation, and a flag on any Scan (the
meter's log holds DynamoDB requests only: the Reputation page's CloudWatch and SES requests are
not in it, docs/console.md lists them).
``--json``: the same as one object. Not part of ``make test``: the import alone takes minutes.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from bench.harness import Bench

DEFAULT_SUBSCRIBERS = 10_000
DEFAULT_REPEATS = 5
BUDGET_MS = 300.0
SMALL = 20  # recipients of the bench's broadcast
SMALL_TAG = "console-small"
BROADCAST_ID = "console-bench"
SEQUENCE = "onboarding"
SEQUENCE_SUBSCRIBERS = 20
UNSUBSCRIBED = 5
TEMPLATE = "newsletter/monthly"  # bench.capacity_runs.TEMPLATE


def reader(i: int) -> str:
    """The address of the ``i``-th imported row (``bench.scale.write_csv``)."""
    return f"reader{i:06d}@example.com"


@dataclass(frozen=True)
class Page:
    name: str
    path: str
    form: Mapping[str, str] | None = None  # a POST (the console's script sends the CSRF header)
    # a read in the background (console.jobs): redirected to its own URL, which answers
    # "forecasting" and refreshes itself each second until the read is done
    background: bool = False


def pages(subscribers: int) -> list[Page]:
    """Every page of the console, with the bench's data in it."""
    one = reader(3)  # tagged console-small: the broadcast reached it
    middle = reader(subscribers // 2)
    return [
        Page("overview 7 days", "/?days=7"),
        Page("overview 30 days", "/?days=30"),
        Page("overview 90 days", "/?days=90"),
        Page("subscribers", "/subscribers"),
        Page("subscribers: next page", ""),  # the first page's "more" link (filled in at run time)
        Page("subscribers: prefix", "/subscribers?" + urlencode({"q": middle[:10]})),
        Page("subscribers: address", "/subscribers?" + urlencode({"q": middle})),
        Page("subscribers: tag (10k)", "/subscribers?tag=scale"),
        Page("subscribers: tag (20)", f"/subscribers?tag={SMALL_TAG}"),
        Page("subscribers: unsubscribed", "/subscribers?status=unsubscribed"),
        Page("subscriber", "/subscribers/" + quote(one, safe="@")),
        Page("broadcasts", "/broadcasts"),
        Page("broadcast", f"/broadcasts/{BROADCAST_ID}"),
        Page("broadcast progress (json)", f"/api/broadcasts/{BROADCAST_ID}"),
        Page("new broadcast", "/broadcasts/new"),
        Page("dry-run count (20)", "/api/audience", {"template": TEMPLATE, "tags": SMALL_TAG}),
        Page("dry-run count (10k)", "/api/audience", {"template": TEMPLATE, "tags": "scale"}),
        Page("templates", "/templates"),
        Page("template preview", "/templates/view?" + urlencode({"key": TEMPLATE})),
        Page("template render (iframe)", "/templates/render/" + TEMPLATE),
        Page("sequences", "/sequences"),
        Page("sequence", f"/sequences/{SEQUENCE}"),
        Page("topics", "/topics"),
        Page("suppression", "/suppression?" + urlencode({"q": reader(1)})),
        Page("sign-ups", "/signups?" + urlencode({"q": "nobody@example.com"})),
        Page("outbox", "/outbox"),
        Page("webhooks", "/webhooks"),
        Page("reputation", "/reputation"),
        Page("hygiene", "/hygiene"),
        Page("hygiene: forecast now", "/hygiene?live=1", background=True),
    ]


# ----- the report (pure) -------------------------------------------------------------------------
@dataclass
class Samples:
    """What the answers of one page took: milliseconds and DynamoDB requests, per answer."""

    page: str
    path: str
    ms: list[float] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    requests: list[Counter[str]] = field(default_factory=list)  # DynamoDB operation -> count
    # a live count (the dry-run count's answers, each a part of the audience): the whole count
    # followed to its end once, its parts, their total and largest time, and the size found
    whole: dict[str, Any] | None = None
    # a background read (Page.background): each one followed to its answer
    reads: list[dict[str, Any]] = field(default_factory=list)

    def add(self, ms: float, status: int, operations: Iterable[str]) -> None:
        self.ms.append(ms)
        self.statuses.append(status)
        self.requests.append(Counter(operations))


def row(samples: Samples, budget_ms: float = BUDGET_MS) -> dict[str, Any]:
    """One page's line of the report: median and largest time, whether every answer (or the
    median only) came under ``budget_ms``, the DynamoDB requests of its answers (the largest
    count of each operation) and whether any was a Scan."""
    if not samples.ms:
        raise ValueError(f"no answers of {samples.page}")
    median, largest = statistics.median(samples.ms), max(samples.ms)
    per_answer: Counter[str] = Counter()
    for counted in samples.requests:
        per_answer |= counted  # the largest count of each operation over the answers
    return {
        "page": samples.page,
        "path": samples.path,
        "answers": len(samples.ms),
        "statuses": sorted(set(samples.statuses)),
        "median_ms": round(median, 1),
        "max_ms": round(largest, 1),
        "under_budget": "yes" if largest < budget_ms else "median only" if median < budget_ms else "no",
        "dynamodb": dict(sorted(per_answer.items())),
        "dynamodb_requests": sum(per_answer.values()),
        "scan": per_answer.get("Scan", 0) > 0,
        **({"whole_count": samples.whole} if samples.whole else {}),
        **({"background_reads": background(samples.reads)} if samples.reads else {}),
    }


def background(reads: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The background reads of a page: how many, how long each took (the page's own figure)."""
    seconds = [r["read_s"] for r in reads if r["read_s"] is not None]
    first = [r["answers_ms"][0] for r in reads]
    refreshes = [ms for r in reads for ms in r["answers_ms"][1:-1]]  # "still reading" again
    shown = [r["answers_ms"][-1] for r in reads if len(r["answers_ms"]) > 1]  # the answer
    return {
        "reads": len(reads),
        "first_max_ms": max(first),
        "refresh_max_ms": max(refreshes, default=None),
        "shown_max_ms": max(shown, default=None),
        "median_s": round(statistics.median(seconds), 1) if seconds else None,
        "max_s": round(max(seconds), 1) if seconds else None,
        "dynamodb_requests": max(len(r["requests"]) for r in reads),
    }


def summary(rows: Sequence[Mapping[str, Any]], budget_ms: float = BUDGET_MS) -> dict[str, Any]:
    return {
        "pages": len(rows),
        "budget_ms": budget_ms,
        "over_budget": [r["page"] for r in rows if r["under_budget"] != "yes"],
        "scans": [r["page"] for r in rows if r["scan"]],
        "failed": [r["page"] for r in rows if any(s >= 400 for s in r["statuses"])],
    }


def text(result: Mapping[str, Any]) -> str:
    """The report for a terminal (``--json`` prints the object itself)."""
    rows = result["rows"]
    width = max(len(r["page"]) for r in rows)
    budget = result["summary"]["budget_ms"]
    lines = [
        f"console at {result['subscribers']:,} subscribers, {result['repeats']} answers per page "
        f"(after one warm-up), budget {budget:.0f} ms",
        f"{'page':<{width}}  {'median ms':>9}  {'max ms':>8}  {f'< {budget:.0f} ms':>11}  "
        "DynamoDB requests per answer",
    ]
    for r in rows:
        requests = ", ".join(f"{op} {n}" for op, n in r["dynamodb"].items()) or "none"
        flag = "  SCAN" if r["scan"] else ""
        status = "" if r["statuses"] == [200] else f"  (HTTP {','.join(map(str, r['statuses']))})"
        lines.append(
            f"{r['page']:<{width}}  {r['median_ms']:>9.1f}  {r['max_ms']:>8.1f}  {r['under_budget']:>11}  "
            f"{requests}{flag}{status}"
        )
    for r in rows:
        if "whole_count" in r:
            w = r["whole_count"]
            lines.append(
                f"{r['page']}, followed to its end: {w['size']:,} recipients in {w['parts']} answers, "
                f"{w['total_ms']:,.0f} ms in all, the slowest {w['max_ms']:.0f} ms"
            )
        if "background_reads" in r:
            b = r["background_reads"]
            lines.append(
                f"{r['page']}: {b['reads']} reads in the background, each {b['median_s']} s "
                f"(median; the longest {b['max_s']} s), {b['dynamodb_requests']} DynamoDB requests; "
                f"the slowest first answer {b['first_max_ms']} ms, refresh while reading "
                f"{b['refresh_max_ms']} ms, answer shown {b['shown_max_ms']} ms"
            )
    if "forecast_apart" in result:
        a = result["forecast_apart"]
        lines.append(
            f"the forecast through `mailstep console` in its own process: {a['reads']} reads, each "
            f"{a['median_s']} s (median); the slowest answer {a['max_ms']:,.0f} ms (first "
            f"{a['first_max_ms']}, refresh {a['refresh_max_ms']}, answer {a['shown_max_ms']})"
        )
    if "gc" in result:
        g = result["gc"]
        lines.append(
            f"full garbage collections meanwhile: {g['full_collections']}, "
            f"the longest {g['longest_ms']:,.0f} ms"
        )
    s = result["summary"]
    lines.append(f"over {budget:.0f} ms: {', '.join(s['over_budget']) or 'none'}")
    lines.append(f"scans: {', '.join(s['scans']) or 'none'}")
    if s["failed"]:
        lines.append(f"failed: {', '.join(s['failed'])}")
    return "\n".join(lines)


def more_link(html: str) -> str | None:
    """The subscribers page's link to its next page (``?...cursor=...``), unescaped."""
    found = re.search(r'href="(/subscribers)?(\?[^"]*cursor=[^"]*)"', html)
    return "/subscribers" + found.group(2).replace("&amp;", "&") if found else None


# ----- the run -----------------------------------------------------------------------------------
class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


@dataclass
class Browser:
    """A signed-in client of the console (its session cookie and CSRF token)."""

    base: str
    cookie: str = ""
    csrf: str = ""

    def send(self, path: str, form: Mapping[str, str] | None = None) -> tuple[int, dict[str, str], str]:
        opener = urllib.request.build_opener(_NoRedirect)
        data = urlencode(form).encode() if form is not None else None
        request = urllib.request.Request(self.base + path, data=data, method="POST" if form else "GET")
        if self.cookie:
            request.add_header("cookie", self.cookie)
        if form is not None:
            request.add_header("content-type", "application/x-www-form-urlencoded")
            request.add_header("x-csrf-token", self.csrf)
        try:
            with opener.open(request, timeout=120) as answer:  # noqa: S310 - the console on 127.0.0.1
                return answer.status, dict(answer.headers.items()), answer.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers.items()), exc.read().decode()

    def sign_in(self, url: str) -> None:
        status, headers, _ = self.send(url.removeprefix(self.base))
        if status != 303:
            raise RuntimeError(f"the console's sign-in answered {status}")
        self.cookie = {k.lower(): v for k, v in headers.items()}["set-cookie"].split(";", 1)[0]
        _, _, html = self.send("/templates")
        found = re.search(r'<meta name="csrf" content="([^"]+)">', html)
        if not found:
            raise RuntimeError("no CSRF token in the console's page")
        self.csrf = found.group(1)


def prepare(bench: Bench, subscribers: int, say: Callable[[str], None]) -> dict[str, Any]:
    """The data of the run (steps 1-3 of the module docstring): the import's figures."""
    from bench import capacity_runs, scale
    from bench.scenarios import sequences
    from ops.admin import SubscriberAdmin
    from shared.core import specs
    from shared.engagement.suppression import Suppression, Suppressions
    from shared.store.subscribers import SubscriberStore

    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "subscribers.csv"
        scale.write_csv(source, subscribers)
        say(f"importing {subscribers:,} subscribers")
        imported = scale._import(bench, source)
    if imported.created != subscribers:
        raise RuntimeError(f"the import created {imported.created} of {subscribers} subscribers")
    say(f"imported in {imported.seconds:,.1f} s; a broadcast to {SMALL} and sequence {SEQUENCE}")

    tables = bench.runtime.resources.tables
    store = SubscriberStore(
        tables["table_name"], tables["events_table_name"], client=bench.aws.client("dynamodb")
    )
    for i in range(SMALL):
        store.upsert(reader(i), add_tags=[SMALL_TAG])
    deployed = sequences.deploy(bench)
    admin = SubscriberAdmin(store, deployed.engine)
    for i in range(UNSUBSCRIBED):
        admin.unsubscribe(reader(subscribers - 1 - i))
    Suppressions(store).suppress(
        Suppression(
            email=reader(1), reason="bounce", detail="bench: a permanent bounce", at="2025-01-01T00:00:00Z"
        )
    )
    capacity_runs._broadcast(bench, BROADCAST_ID, SMALL_TAG)
    deployed.start_and_wait(SEQUENCE, deployed.subscribers(SEQUENCE, SEQUENCE_SUBSCRIBERS, tag_half=True))
    capacity_runs._drain(bench, specs.ENGAGEMENT_QUEUE)  # the sequence mails' Delivery events
    return {"rows": imported.rows, "created": imported.created, "seconds": round(imported.seconds, 1)}


def measure(
    bench: Bench, browser: Browser, listed: Sequence[Page], repeats: int, say: Callable[[str], None]
) -> list[dict[str, Any]]:
    """Each page once to warm up, then ``repeats`` rounds of every page: the report's rows."""
    samples = {p.name: Samples(p.name, p.path) for p in listed}
    resolved = list(listed)
    for round_ in range(repeats + 1):
        if round_:
            say(f"round {round_} of {repeats}")
        for page in resolved:
            if page.background:
                followed = follow_background(bench, browser, page)
                if round_:
                    answers = zip(followed["answers_ms"], followed["statuses"], strict=True)
                    for n, (ms, status) in enumerate(answers):
                        samples[page.name].add(ms, status, followed["requests"] if n == 0 else ())
                    samples[page.name].reads.append(followed)
                continue
            bench.meter.start_log()
            started = time.perf_counter()
            status, _, body = browser.send(page.path, page.form)
            took = (time.perf_counter() - started) * 1000
            log = bench.meter.take_log()
            if page.path == "/subscribers" and round_ == 0:
                nxt = next((i for i, p in enumerate(resolved) if p.name == "subscribers: next page"), None)
                link = more_link(body)
                if nxt is not None and link:
                    resolved[nxt] = Page(resolved[nxt].name, link)
                    samples[resolved[nxt].name].path = link
            if not page.path:
                continue
            if round_:
                operations = (r.operation for r in log if r.origin == "runtime" and r.service == "dynamodb")
                samples[page.name].add(took, status, operations)
                if round_ == repeats and page.form is not None and status == 200 and "cursor" in body:
                    samples[page.name].whole = follow_count(browser, page, took, json.loads(body))
            elif status >= 400:
                say(f"{page.name} answered {status}: {body[:200]}")
    return [row(s) for s in samples.values() if s.ms]


def follow_background(bench: Bench, browser: Browser, page: Page) -> dict[str, Any]:
    """A background read followed as a browser does: the redirect to the read's own URL, then
    that URL once a second (the page's refresh) until it shows the answer. Each answer's time
    (the redirect and the first answer together, as one wait), the read's own time (the page
    prints it) and its DynamoDB requests (all of them, made in the background)."""
    bench.meter.start_log()
    started = time.perf_counter()
    status, headers, body = browser.send(page.path)
    location = {k.lower(): v for k, v in headers.items()}.get("location")
    if status != 303 or not location:
        raise RuntimeError(f"{page.name} answered {status}, not a redirect to its read: {body[:200]}")
    answers_ms: list[float] = []
    statuses: list[int] = []
    while True:
        status, _, body = browser.send(location)
        answers_ms.append(round((time.perf_counter() - started) * 1000, 1))
        statuses.append(status)
        if status != 200 or 'id="forecasting"' not in body:
            break
        time.sleep(1.0)  # the page's <meta http-equiv="refresh" content="1">
        started = time.perf_counter()
    ready = re.search(r"read in ([0-9.]+) s", body)
    log = bench.meter.take_log()
    return {
        "answers_ms": answers_ms,
        "statuses": statuses,
        "read_s": float(ready.group(1)) if ready else None,
        "requests": [r.operation for r in log if r.origin == "runtime" and r.service == "dynamodb"],
    }


def follow_count(browser: Browser, page: Page, first_ms: float, first: Mapping[str, Any]) -> dict[str, Any]:
    """A live count followed from its first answer to its end, as the console's script does."""
    times, size, answer = [first_ms], int(first["size"]), first
    while answer.get("cursor"):
        started = time.perf_counter()
        status, _, body = browser.send(page.path, {**(page.form or {}), "cursor": str(answer["cursor"])})
        times.append((time.perf_counter() - started) * 1000)
        if status != 200:
            raise RuntimeError(f"{page.name}: a part of the count answered {status}: {body[:200]}")
        answer = json.loads(body)
        size += int(answer["size"])
    return {"size": size, "parts": len(times), "total_ms": round(sum(times)), "max_ms": round(max(times))}


def run(bench: Bench, subscribers: int, repeats: int, say: Callable[[str], None]) -> dict[str, Any]:
    from console.server import serve
    from ops.targets import local_target

    imported = prepare(bench, subscribers, say)
    runtime = bench.runtime
    target = local_target(str(runtime.state_dir), runtime.config.region, aws=runtime.aws)
    served = serve(target, 0, state_dir=runtime.state_dir, outbox=runtime.outbox)
    served.start()
    try:
        browser = Browser(f"http://127.0.0.1:{served.port}")
        deadline = time.monotonic() + 30
        while True:
            try:
                browser.sign_in(served.url)
                break
            except (OSError, RuntimeError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        say(f"console at {browser.base}: {len(pages(subscribers))} pages x {repeats}")
        with collections() as pauses:
            rows = measure(bench, browser, pages(subscribers), repeats, say)
    finally:
        served.stop()
    say(f"the forecast through `mailstep console` in a process of its own, {repeats} times")
    apart = forecast_apart(bench, repeats)
    return {
        "subscribers": subscribers,
        "repeats": repeats,
        "import": imported,
        "rows": rows,
        "gc": pauses,
        "forecast_apart": apart,
        "summary": summary(rows),
    }


CONSOLE_URL = re.compile(r"console: (http://127\.0\.0\.1:[0-9]+)/\?token=\S+")


def forecast_apart(bench: Bench, repeats: int) -> dict[str, Any]:
    """ "Forecast now" followed ``repeats`` times through ``mailstep console --target local``
    run as a process of its own, as an operator runs it beside ``mailstep dev``: the console's
    answers no longer share a process (and its interpreter lock) with the emulator serving the
    read's requests, as they do in the table. Answer times only: that process's DynamoDB
    requests are not in this process's meter."""
    page = next(p for p in pages(SMALL) if p.background)
    command = [sys.executable, "-m", "cli.main", "console", "--target", "local"]
    command += ["--state-dir", str(bench.runtime.state_dir), "--port", "0", "--no-open"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MOTO_"))}
    with tempfile.TemporaryFile("w+") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)  # noqa: S603
        try:
            deadline = time.monotonic() + 90
            while not (found := CONSOLE_URL.search(_read(out))):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"mailstep console did not start: {_read(out)[-2000:]}")
                time.sleep(0.2)
            browser = Browser(found.group(1))
            browser.sign_in(found.group(0).removeprefix("console: "))
            reads = [follow_background(bench, browser, page) for _ in range(repeats)]
        finally:
            process.terminate()
            process.wait(timeout=30)
    found_reads = background(reads)
    found_reads.pop("dynamodb_requests")
    return {**found_reads, "max_ms": max(ms for r in reads for ms in r["answers_ms"])}


def _read(out: Any) -> str:
    out.seek(0)
    return str(out.read())


@contextlib.contextmanager
def collections() -> Iterator[dict[str, Any]]:
    """Python's collections of its oldest generation in this process while the pages are asked
    (the emulator's items, the console and the bench share it): how many and the longest, in ms.
    Each one stops every thread for a pass over every object the emulator holds."""
    found: dict[str, Any] = {"full_collections": 0, "longest_ms": 0.0}
    started: list[float] = []

    def timed(phase: str, info: dict[str, int]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            started[:] = [time.perf_counter()]
        elif started:
            found["full_collections"] += 1
            found["longest_ms"] = round(
                max(found["longest_ms"], (time.perf_counter() - started[0]) * 1000), 1
            )

    gc.callbacks.append(timed)
    try:
        yield found
    finally:
        gc.callbacks.remove(timed)


def main(argv: list[str], runtime: Callable[[], contextlib.AbstractContextManager[Bench]]) -> int:
    """``python -m bench console [--subscribers N] [--repeats N] [--json]``; ``runtime`` starts
    the local runtime the bench measures (``bench.__main__._runtime``)."""
    parser = argparse.ArgumentParser(
        prog="python -m bench console",
        description="The web console's answer times at N subscribers on the local runtime (docs/console.md).",
    )
    parser.add_argument("--subscribers", type=int, default=DEFAULT_SUBSCRIBERS,
                        help=f"subscribers to import (default {DEFAULT_SUBSCRIBERS:,})")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS,
                        help=f"answers timed per page (default {DEFAULT_REPEATS})")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    args = parser.parse_args(argv)
    if args.subscribers < SMALL or args.repeats < 1:
        parser.error(f"--subscribers must be at least {SMALL} and --repeats at least 1")

    def say(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    say("starting the local runtime")
    with runtime() as bench:
        result = run(bench, args.subscribers, args.repeats, say)
    print(json.dumps(result, indent=2) if args.json else text(result))
    return 0
