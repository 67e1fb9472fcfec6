"""`mailstep console` in a real browser (Debian's headless Chromium over the DevTools pipe, as
``test_signup_browser.py`` drives it) against the session's local runtime.

- every page loads without a console error (a script error, a failed request, a Content-
  Security-Policy violation), with screenshots at 1280 and 390 px wide kept in
  ``tests/artifacts/screenshots/console-*.png``;
- three flows through the UI: find a subscriber and erase them; build an audience, see its
  dry-run count, send a broadcast and watch its progress; open a sequence and see its counts
  move after virtual time runs;
- the reputation page's "resume anyway" waits for the configuration set's name (it is not
  pressed: the runtime is shared), and the hygiene page's dry run answers (read-only).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.e2e.conftest import Local
from tests.e2e.helpers import (
    add_contact,
    broadcast_record,
    eventually,
    item,
    mails,
    ops,
    paused_clock,
    post,
    sent_by,
    subscribe,
    unique,
)
from tests.e2e.test_console_security import Console, running_console  # noqa: F401 - the `console` fixture
from tests.e2e.test_sequences import pair, waiting
from tests.e2e.test_signup_browser import SCREENSHOTS, Browser

WIDTHS = (1280, 390)


class ConsoleBrowser(Browser):
    """The signup test's browser, also collecting what the page reports as errors: uncaught
    exceptions, ``console.error`` and log entries of level error (failed loads, CSP)."""

    def __init__(self, profile_dir: Path) -> None:
        self.errors: list[str] = []
        super().__init__(profile_dir)
        self.call("Runtime.enable")
        self.call("Log.enable")
        self.call("Emulation.setScrollbarsHidden", hidden=True)  # as a phone's: no gutter

    def _note(self, message: dict[str, Any]) -> None:
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.exceptionThrown":
            self.errors.append(f"exception: {params['exceptionDetails'].get('text')}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            self.errors.append(f"console.error: {params.get('args')}")
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            entry = params["entry"]
            self.errors.append(f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}")

    def width(self, pixels: int) -> None:
        self.call(
            "Emulation.setDeviceMetricsOverride", width=pixels, height=900, deviceScaleFactor=1, mobile=False
        )

    def shot(self, name: str) -> Path:
        """A full-page screenshot at the current width."""
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        self.wait_for_page(lambda: True, f"the page before the screenshot {name}")

        def capture() -> str | None:  # a page still laying out has no size yet: try again
            try:
                return self.capture(captureBeyondViewport=True)
            except AssertionError as exc:
                if "0 width" in str(exc) or "0 height" in str(exc):
                    return None
                raise

        path.write_bytes(base64.b64decode(eventually(capture, 30, f"the screenshot {name}", interval_s=0.3)))
        return path

    def wait_text(self, selector: str, check: Any, what: str, timeout_s: float = 60) -> str:
        def read() -> str | None:
            try:
                text = self.evaluate(
                    f"(document.querySelector({json.dumps(selector)}) || {{}}).textContent || ''"
                )
            except AssertionError:
                return None
            return text if check(text) else None

        try:
            return str(eventually(read, timeout_s, what, interval_s=0.3))
        except AssertionError as exc:
            where = self.evaluate("location.href + ': ' + document.body.innerText.slice(0, 600)")
            raise AssertionError(f"{exc}; the page: {where}; errors: {self.errors}") from None


@pytest.fixture
def browser(console: Console) -> Iterator[ConsoleBrowser]:
    profile = Path(tempfile.mkdtemp(prefix="mailstep-console-chromium-"))
    chromium = ConsoleBrowser(profile)
    try:
        chromium.width(1280)
        chromium.call("Page.navigate", url=console.fresh_url())  # signs in (once): the cookie, then /
        chromium.wait_for_page(
            lambda: chromium.evaluate("location.pathname") == "/", "the signed-in overview"
        )
        yield chromium
    finally:
        chromium.close()
        shutil.rmtree(profile, ignore_errors=True)


# What a page does wrong at the browser's width: the document wider than the window (a
# horizontal scroll), and words broken in a table cell (a word's text spread over two lines:
# "schedul|ed"). A word is a run without spaces, hyphens or slashes (a line may break after
# those); an address or id breaks only after @ . - _ / (the console's <wbr>); text in a `.free`
# element (JSON, URLs, errors) may break anywhere and is not checked.
LAYOUT = """(() => {
  const broken = [];
  for (const cell of document.querySelectorAll("main td, main th")) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      if (n.parentElement.closest(".free")) continue;
      for (const m of n.data.matchAll(/[^\\s\\/-]+[\\/-]?/g)) {
        const r = document.createRange();
        r.setStart(n, m.index);
        r.setEnd(n, m.index + m[0].length);
        const tops = [...r.getClientRects()].filter(x => x.width > 0).map(x => x.top);
        if (tops.length && Math.max(...tops) - Math.min(...tops) > 3) broken.push(m[0]);
      }
    }
  }
  const wide = [...document.querySelectorAll("main *")].filter(el => {
    const box = el.getBoundingClientRect();
    return box.width > 0 && box.right > document.documentElement.clientWidth + 1 && !el.closest(".scroll");
  }).slice(0, 5).map(el => el.tagName + (el.id ? "#" + el.id : "") + " " + el.textContent.slice(0, 40));
  const inner = document.documentElement.clientWidth;  // the window less its scroll bar
  return { scroll: document.documentElement.scrollWidth, inner: inner, broken: broken, wide: wide };
})()"""


def layout_problems(browser: ConsoleBrowser) -> list[str]:
    found = browser.evaluate(LAYOUT)
    problems = [f"broken in a cell: {word!r}" for word in found["broken"]]
    if found["scroll"] > found["inner"]:
        problems.append(
            f"scrolls sideways: {found['scroll']} px wide in {found['inner']}; wider: {found['wide']}"
        )
    return problems


NAMES = ("Анастасия", "مريم", "さくら", "Zoë Ångström-Lefèvre")
SUBJECT = "Grüße aus Köln — новости"  # sent as RFC 2047 encoded words


def realistic_data(local: Local) -> dict[str, str]:
    """Subscribers named in Cyrillic, Arabic, Japanese and accented Latin, one with an
    80-character address, engagement, and broadcasts sent, scheduled and cancelled; the pages of
    some of them by name."""
    run = unique("cp")
    tag = f"console-pages-{run[-8:]}"
    domain = "marketing-department.example.com"
    long_address = f"aleksandra.konstantinopolskaya-vasilyeva-{run[-8:]}"[: 79 - len(domain)] + "@" + domain
    assert len(long_address) == 80
    readers = [f"{run}-{i}@example.com" for i in range(len(NAMES))] + [long_address]
    for reader, name in zip(readers, [*NAMES, "Александра"], strict=True):
        add_contact(local, reader, first_name=name, tags=[tag], attributes={"plan": "pro", "city": name})

    done = unique("bc-console")
    sent = ops(local, "broadcast", "send", "--template", "newsletter/monthly", "--tag", tag,
               "--id", done, "--subject", SUBJECT, "--yes", "--no-wait")  # fmt: skip
    assert sent.returncode == 0, sent.stdout + sent.stderr
    got = eventually(
        lambda: m if len(m := sent_by(local, done)) == len(readers) else None, 120, "the broadcast's mails"
    )
    eventually(lambda: broadcast_record(local, done)["status"] == "done", 120, "the broadcast done")
    to = {m["destination"][0]: m["message_id"] for m in got}
    for command, reader in (
        ("open", readers[0]),
        ("open", readers[1]),
        ("open", long_address),
        ("click", readers[0]),
        ("bounce", readers[2]),  # suppressed from now on
        ("complain", readers[3]),
    ):
        answer = ops(local, "local", command, to[reader])
        assert answer.returncode == 0, answer.stdout + answer.stderr
    return {"tag": tag, "long": long_address, "done": done, "bounced": readers[2], "complained": readers[3]}


def scheduled_broadcasts(local: Local, tag: str) -> dict[str, str]:
    """A broadcast scheduled 12 days ahead and one cancelled before its time (while the clock is
    paused: its wait holds them scheduled)."""
    later = (datetime.now(UTC) + timedelta(days=12)).replace(microsecond=0).isoformat()
    made = {}
    for name in ("scheduled", "cancelled"):
        made[name] = unique("bc-console")
        sent = ops(local, "broadcast", "send", "--template", "newsletter/monthly", "--tag", tag,
                   "--id", made[name], "--at", later, "--yes", "--no-wait")  # fmt: skip
        assert sent.returncode == 0, sent.stdout + sent.stderr
    assert ops(local, "broadcast", "cancel", made["cancelled"]).returncode == 0
    assert broadcast_record(local, made["scheduled"])["status"] == "scheduled"
    return made


def onboarding_waits(local: Local, email: str) -> None:
    """``email`` subscribes (with the clock paused: onboarding sends its welcome and waits a
    day); back once the execution sits in that wait."""
    (started,) = post(local, {"type": "subscriber.subscribed", "email": email, "id": f"s-{email}"})
    assert started["sequences_started"] == ["onboarding"]
    arn = str(pair(local, email, "onboarding"))
    eventually(lambda: waiting(local, arn), 60, "the execution in its 1d wait")


def test_every_page_reads_well_at_both_widths_without_console_errors(
    local: Local, console: Console, browser: ConsoleBrowser
) -> None:
    data = realistic_data(local)
    with paused_clock(local):  # the scheduled broadcast stays scheduled while the pages are read
        data.update(scheduled_broadcasts(local, data["tag"]))
        data["member"] = unique("console-member") + "@example.com"  # waits in onboarding's 1d wait
        onboarding_waits(local, data["member"])
        try:
            read_every_page(local, console, browser, data)
        finally:  # it never sends
            ops(local, "broadcast", "cancel", data["scheduled"])


def read_every_page(local: Local, console: Console, browser: ConsoleBrowser, data: dict[str, str]) -> None:
    email = data["long"]
    result = local.cli("send-test", "newsletter/monthly", "--to", email, "--state-dir", str(local.state_dir))
    assert result.returncode == 0, result.stderr
    message = eventually(
        lambda: [m for m in mails(local, {email})[email] if m["source"] == "test"], 60, "the test mail"
    )[0]
    added = ops(
        local, "webhooks", "add", "http://127.0.0.1:9/console-pages", "--events", "broadcast.completed"
    )
    assert added.returncode == 0, added.stdout + added.stderr
    endpoint_id = added.stdout.split()[1]
    pages = {
        "overview": "/",
        "overview-90": "/?days=90",
        "subscribers": f"/subscribers?tag={data['tag']}",
        "subscriber": f"/subscribers/{quote(email)}",
        "broadcasts": "/broadcasts",
        "broadcast": f"/broadcasts/{data['done']}",
        "broadcast-scheduled": f"/broadcasts/{data['scheduled']}",
        "broadcast-cancelled": f"/broadcasts/{data['cancelled']}",
        "broadcast-new": "/broadcasts/new",
        "templates": "/templates",
        "template": "/templates/view?key=newsletter/monthly",
        "sequences": "/sequences",
        "sequence": "/sequences/onboarding",
        "topics": "/topics",
        "suppression": "/suppression",
        "signups": "/signups",
        "webhooks": "/webhooks",
        "webhook": f"/webhooks/{endpoint_id}?failed=1",
        "reputation": "/reputation",
        "hygiene": "/hygiene",
        "outbox": "/outbox",
        "outbox-message": f"/outbox/{message['message_id']}",
    }
    print(f"\nscreenshots: {SCREENSHOTS}")
    problems: dict[str, list[str]] = {}
    for name, path in pages.items():
        browser.width(WIDTHS[0])
        browser.open(console.base + path)
        assert browser.evaluate("document.querySelector('main h1') !== null"), name
        if name.startswith("overview"):  # the charts drew (uPlot ran under the CSP)
            browser.wait_for_page(
                lambda: browser.evaluate("document.querySelectorAll('.uplot').length") == 4, "charts"
            )
        if name.startswith("webhook"):  # the endpoint this test added is listed
            assert endpoint_id in browser.text(), (name, browser.text()[:300])
        if name == "subscriber":  # each mail once, its subject decoded; only the action that applies
            rows = browser.evaluate(
                "[...document.querySelectorAll('#timeline tr.mail')].map(r => r.dataset.message)"
            )
            assert len(rows) == 2 and len(set(rows)) == 2, rows  # the broadcast and the test mail
            timeline = browser.evaluate("document.getElementById('timeline').textContent")
            assert SUBJECT in timeline and "=?" not in timeline, timeline[:500]
            assert browser.evaluate("!!document.getElementById('unsubscribe-form')") is True
            assert browser.evaluate("!!document.getElementById('resubscribe-form')") is False
        if name == "broadcasts":  # the subject, and a scheduled one says so instead of "0 / 0"
            row = f"#broadcasts tr[data-id='{data['scheduled']}']"
            assert "counted when it sends" in browser.evaluate(f'document.querySelector("{row}").textContent')
            assert SUBJECT in browser.text()
        if name == "broadcast":  # headline figures: 3 of 5 opened, 1 of those 3 clicked
            headline = browser.evaluate("document.getElementById('headline').textContent")
            assert "60.00%" in headline and "33.33%" in headline, headline
            lost = browser.evaluate(
                "[...document.querySelectorAll('#lost tr[data-kind]')].map(r => [r.dataset.kind,"
                " r.querySelector('a').textContent])"
            )
            assert sorted(lost) == [["bounce", data["bounced"]], ["complaint", data["complained"]]], lost
        if name == "sequence":  # the member's step now, and the next with when
            rows = browser.evaluate(
                "[...document.querySelectorAll('#members tbody tr')].map(r => [...r.cells].map(c =>"
                " c.textContent.replace(/\\s+/g, ' ').trim()))"
            )
            (member,) = [row for row in rows if row[0] == data["member"]]
            assert member[2] == "wait 1d" and member[3].startswith("send onboarding/tips at "), member
            assert re.search(r"UTC \(in (23|24) hours\)$", member[3]), member  # a day after the welcome
        if name == "broadcast-new":  # no system or transactional template; a marketing one first
            options = browser.evaluate("[...document.querySelectorAll('#template option')].map(o => o.value)")
            assert options[0] == "newsletter/monthly", options
            assert not [o for o in options if o.startswith(("system/", "transactional/"))], options
            # the A/B test's fieldset, its fields shown only once its box is ticked (console.js)
            assert browser.evaluate("!!document.querySelector('fieldset#ab-test #ab')") is True
            assert browser.evaluate("document.getElementById('ab-fields').hidden") is True
            assert "{{" not in browser.evaluate("document.getElementById('template').textContent")
            # the engagement conditions suggest the recent broadcasts, and sequences where they may
            offered = browser.evaluate("[...document.querySelectorAll('#sources option')].map(o => o.value)")
            assert data["done"] in offered and "onboarding" in offered, offered
            assert browser.evaluate("document.getElementById('machine_opens').checked") is False

            # everyone in this runtime (thousands, from the other e2e tests): the first part of
            # the live count is the page loaded; the count to the end is the broadcast flow's test
            browser.wait_text(
                "#audience", lambda t: "subscriber(s)" in t or "so far" in t, "the audience count"
            )
        for width in WIDTHS:
            browser.width(width)
            if name.startswith("overview"):  # the charts are drawn again at the new width
                browser.wait_for_page(
                    lambda: browser.evaluate(
                        "[...document.querySelectorAll('.uplot')].every(u => u.offsetWidth <= innerWidth)"
                    ),
                    f"the charts redrawn at {width} px",
                )
            browser.shot(f"console-{name}-{width}")
            problems.update({f"{name} at {width} px": found for found in [layout_problems(browser)] if found})
        assert browser.errors == [], (name, browser.errors)
    assert problems == {}
    shots = {p.name for p in SCREENSHOTS.glob("console-*.png")}
    assert {f"console-{n}-{w}.png" for n in pages for w in WIDTHS} <= shots
    assert ops(local, "webhooks", "remove", endpoint_id).returncode == 0


BENCH_SUBSCRIBERS = "MAILSTEP_CONSOLE_BENCH_SUBSCRIBERS"  # e.g. 10000: the bench's data set


def bench_pages(subscribers: int) -> list[tuple[str, str]]:
    """The HTML pages ``python -m bench console`` times (``bench.console_pages.pages``), by a
    name for their screenshots: not its JSON, CSV, form posts, background reads or framed mail."""
    from bench import console_pages

    return [
        (re.sub(r"[^a-z0-9]+", "-", page.name.lower()).strip("-"), page.path)
        for page in console_pages.pages(subscribers)
        if page.path
        and page.form is None
        and not page.background
        and not page.path.startswith(("/api/", "/templates/render/"))
        and not page.path.endswith(".csv")
    ]


@pytest.mark.bench  # the data set takes minutes to import: `make bench` runs it (docs/console.md)
def test_every_page_reads_well_at_both_widths_with_the_bench_s_data_set() -> None:
    """The pages of ``python -m bench console`` with its data set (10,000 imported subscribers,
    a broadcast, the onboarding sequence run: ``bench.console_pages.prepare``) on a fresh local
    runtime of their own, read at 1280 and 390 px: no horizontal scroll, no word broken in a
    table cell, no console error; screenshots ``console-bench-<page>-<width>.png``."""
    from bench import console_pages
    from bench.__main__ import _runtime
    from console.server import serve
    from ops.targets import local_target

    subscribers = int(os.environ.get(BENCH_SUBSCRIBERS) or 10_000)
    with _runtime() as bench:
        console_pages.prepare(bench, subscribers, print)
        runtime = bench.runtime
        target = local_target(str(runtime.state_dir), runtime.config.region, aws=runtime.aws)
        served = serve(target, 0, state_dir=Path(runtime.state_dir), outbox=runtime.outbox)
        served.start()
        profile = Path(tempfile.mkdtemp(prefix="mailstep-console-bench-chromium-"))
        browser = ConsoleBrowser(profile)
        try:
            browser.width(WIDTHS[0])
            browser.call("Page.navigate", url=served.url)
            browser.wait_for_page(lambda: browser.evaluate("location.pathname") == "/", "the overview")
            base = served.url.split("/?", 1)[0]
            problems: dict[str, list[str]] = {}
            for name, path in bench_pages(subscribers):
                browser.width(WIDTHS[0])
                browser.open(base + path)
                assert browser.evaluate("document.querySelector('main h1') !== null"), name
                for width in WIDTHS:
                    browser.width(width)
                    browser.shot(f"console-bench-{name}-{width}")
                    if found := layout_problems(browser):
                        problems[f"{name} at {width} px"] = found
                assert browser.errors == [], (name, browser.errors)
            assert problems == {}
        finally:
            browser.close()
            served.stop()
            shutil.rmtree(profile, ignore_errors=True)


def test_find_a_subscriber_and_erase_them(local: Local, console: Console, browser: ConsoleBrowser) -> None:
    email = unique("console-erase") + "@example.com"
    add_contact(local, email, first_name="Grace", tags=["console-erase"])
    assert item(local, f"SUB#{email}", "PROFILE") is not None

    browser.open(console.base + "/subscribers")
    browser.type("#q", email.split("@")[0])
    browser.click("#search")
    browser.wait_text("#results", lambda t: email in t, "the subscriber among the results")
    browser.shot("console-flow-erase-1-found")
    link = f"/subscribers/{quote(email, safe='')}"
    browser.follow(f"#results a[href='{link}']", link)
    browser.wait_text("h1", lambda t: t == email, "the subscriber's page")
    browser.wait_for_page(lambda: True, "the subscriber's page's script")
    assert "Grace" in browser.text()
    # the button stays disabled until the address is typed
    assert browser.evaluate("document.getElementById('erase').disabled") is True
    browser.type("#erase-confirm", email)
    assert browser.evaluate("document.getElementById('erase').disabled") is False
    browser.shot("console-flow-erase-2-confirm")
    browser.click("#erase")
    browser.wait_text(".flash.ok", lambda t: f"{email} erased" in t, "the erase confirmation")
    browser.shot("console-flow-erase-3-erased")
    assert browser.errors == []

    # Then nothing of them is left
    assert item(local, f"SUB#{email}", "PROFILE") is None
    assert item(local, "TAG#console-erase", f"SUB#{email}") is None


def test_build_an_audience_see_its_count_send_and_watch_progress(
    local: Local, console: Console, browser: ConsoleBrowser
) -> None:
    tag = unique("console-aud")
    readers = [f"{tag}-{i}@example.com" for i in range(3)]
    for reader in readers:
        add_contact(local, reader, tags=[tag])
    add_contact(local, f"{tag}-out@example.com", tags=[tag, "console-excluded"])

    browser.open(console.base + "/broadcasts/new")
    browser.evaluate("document.getElementById('template').value = 'newsletter/monthly'")
    browser.type("#tags", tag)
    browser.type("#exclude_tags", "console-excluded")
    count = browser.wait_text("#audience", lambda t: "3 subscriber(s)" in t, "the dry-run count of 3")
    assert f"all of {tag}" in count and "none of console-excluded" in count
    sample = browser.evaluate("[...document.querySelectorAll('#sample li')].map(li => li.textContent)")
    assert sorted(sample) == sorted(readers)
    browser.shot("console-flow-broadcast-1-audience")
    browser.click("#confirm")
    browser.click("#send")
    browser.wait_for_page(
        lambda: "/broadcasts/bc-" in browser.evaluate("location.pathname"), "the broadcast page"
    )
    broadcast_id = browser.evaluate("document.getElementById('broadcast-progress').dataset.id")
    # the page follows the broadcast by itself (no reload) until it is done
    browser.wait_text("#b-status", lambda t: t == "sent", "the broadcast to be done", timeout_s=120)
    assert browser.evaluate("document.getElementById('b-status').dataset.status") == "done"
    assert browser.evaluate("document.getElementById('b-sent').textContent") == "3"
    assert browser.evaluate("document.getElementById('b-count').textContent").startswith("3 / 3")
    browser.shot("console-flow-broadcast-2-done")
    assert browser.errors == []

    # Then the three readers, and nobody else, got it
    got = eventually(
        lambda: sent_by(local, broadcast_id) if len(sent_by(local, broadcast_id)) == 3 else None,
        60,
        "the broadcast's three mails in the outbox",
    )
    assert sorted(to for m in got for to in m["destination"]) == sorted(readers)


def test_a_sequences_counts_move_after_virtual_time_runs(
    local: Local, console: Console, browser: ConsoleBrowser
) -> None:
    def counts() -> dict[str, dict[str, int]]:
        return dict(
            browser.evaluate(
                "Object.fromEntries([...document.querySelectorAll('#graph .node')].map(n => [n.dataset.code,"
                " Object.fromEntries([...n.querySelectorAll('.counts > span')].map(s =>"
                " [s.firstChild.textContent.trim(), Number(s.querySelector('b').textContent)]))]))"
            )
        )

    email = unique("console-seq") + "@example.com"
    with paused_clock(local):  # onboarding stops at its first wait (1d) after the welcome mail
        subscribe(local, email)
        eventually(
            lambda: [m for m in mails(local, {email})[email] if m["template"] == "onboarding/welcome"],
            60,
            "the welcome mail in the outbox",
        )
        browser.open(console.base + "/sequences/onboarding")

        def held() -> dict[str, dict[str, int]] | None:
            browser.open(console.base + "/sequences/onboarding")
            now = counts()
            return now if now["S2"]["waiting"] >= 1 else None

        before = eventually(held, 60, "an execution waiting at the 1d wait", interval_s=1)
        assert email in browser.text()  # a member
        browser.shot("console-flow-sequence-1-waiting")
    # virtual time runs: the wait ends, the tips mail goes out
    eventually(
        lambda: [m for m in mails(local, {email})[email] if m["template"] == "onboarding/tips"],
        60,
        "the tips mail in the outbox",
    )

    def moved() -> dict[str, dict[str, int]] | None:
        browser.open(console.base + "/sequences/onboarding")
        now = counts()
        return now if now["S3"]["sent"] > before["S3"]["sent"] else None

    after = eventually(moved, 60, "the tips step's sent count to grow", interval_s=1)
    assert after["S1"]["sent"] >= before["S1"]["sent"]
    browser.shot("console-flow-sequence-2-moved")
    assert browser.errors == []


def test_a_sequence_exit_on_a_goal_event_is_listed_as_an_exit(
    local: Local, console: Console, browser: ConsoleBrowser
) -> None:
    """A purchase stops the buyer's onboarding (one of its exit events): the sequence's page
    lists it under "Ended early" as an exit with the buyer's address and the event, not as a
    stop or a failure (the engine's StopExecution error and cause, kept by Step Functions)."""
    email = unique("console-goal") + "@example.com"
    with paused_clock(local):  # the execution waits at its first wait until the purchase
        onboarding_waits(local, email)
        (purchase,) = post(local, {"type": "purchase.completed", "email": email, "id": f"p-{email}"})
        assert purchase["sequences_stopped"] == ["onboarding"]

    def listed() -> list[str] | None:
        browser.open(console.base + "/sequences/onboarding")
        rows = browser.evaluate(
            "[...document.querySelectorAll('#ended tr[data-kind]')].map(r =>"
            " [r.dataset.kind, r.cells[0].textContent.trim(), r.cells[2].textContent.trim(),"
            " r.cells[3].textContent.trim()])"
        )
        return next((row for row in rows if row[1] == email), None)

    row = eventually(listed, 60, "the buyer's execution under Ended early", interval_s=1)
    assert row == ["exit", email, "exited", "goal reached: purchase.completed"]
    assert browser.errors == []


def test_resume_anyway_waits_for_the_typed_name_and_the_hygiene_dry_run_answers(
    local: Local, console: Console, browser: ConsoleBrowser
) -> None:
    browser.open(console.base + "/reputation")
    browser.wait_text("#set-marketing", lambda t: "marketing" in t, "the marketing set's row")
    browser.wait_for_page(lambda: True, "the reputation page's script")
    name = browser.evaluate("document.getElementById('force-confirm').dataset.expect")
    assert name and browser.evaluate("document.getElementById('force').disabled") is True
    browser.type("#force-confirm", name + "x")
    assert browser.evaluate("document.getElementById('force').disabled") is True
    browser.evaluate("document.getElementById('force-confirm').value = ''")
    browser.type("#force-confirm", name)
    assert browser.evaluate("document.getElementById('force').disabled") is False
    browser.shot("console-flow-reputation-force-typed")  # not pressed: other tests share the runtime

    browser.open(console.base + "/hygiene")
    browser.wait_text("#policy", lambda t: "Cold after" in t, "the hygiene report")
    browser.click("#forecast-now")  # read in the background: the page refreshes itself until done
    browser.wait_text("#forecast-read", lambda t: t.startswith("Forecast for"), "the forecast, refreshed in")
    assert "run=" in browser.evaluate("location.search")
    browser.wait_text("#at-risk", lambda t: "day" in t, "the at-risk table")
    browser.shot("console-flow-hygiene-forecast")
    browser.click("#dry-run-button")
    browser.wait_text("#dry-run", lambda t: "to mark cold" in t, "the dry run's answer")
    browser.shot("console-flow-hygiene-dry-run")
    assert browser.errors == []
