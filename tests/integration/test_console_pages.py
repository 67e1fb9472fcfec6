"""The console's Reputation and Hygiene pages on moto, through the whole application (the guard,
the routes, the templates), without a browser or a socket: an ASGI request at a time, signed in
with the start's token, the forms posted as a browser posts them (``tests.forms``).

Given the guardrail's alarms and SES's rates in CloudWatch, the marketing set paused (the local
runtime's SES emulation on moto) and a broadcast held by the pause, the Reputation page shows the
rates, thresholds and the held broadcast; a resume is refused with the reason while a rate is
above its threshold and changes nothing; a POST without the CSRF token changes nothing; the
forced resume needs the configuration set's name typed. The Hygiene page shows
``ops.hygiene.report``; its dry run writes nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from html import unescape
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, parse_qsl, urlencode, urlsplit

import pytest
from botocore.awsrequest import AWSResponse

from console.app import build
from console.guard import COOKIE, CSRF_FIELD, Secrets
from console.site import Console
from local_aws.provision import LocalResources
from local_aws.ses import LocalSes
from ops.targets import Target
from shared.broadcasts.model import PAUSED_REPUTATION, SENDING, BroadcastRequest
from shared.broadcasts.records import BroadcastStore
from shared.core import specs
from shared.core.aws import client, register_hook, unregister_hook
from shared.reputation.store import ReputationStore
from shared.store import keys
from shared.store.dynamo import deserialize, key
from shared.store.stats import day_adds
from shared.store.subscribers import SubscriberStore
from tests.eventually import eventually
from tests.forms import submission
from tests.integration.reputation_support import (
    BOUNCE,
    COMPLAINT,
    MARKETING,
    forget_cloudwatch,
    guard_alarms,
    install_local_ses,
    messaging_world,
    publish_rate,
    settings_of,
)

PORT = 8790
FORM = "application/x-www-form-urlencoded"


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    text: str

    @property
    def location(self) -> str:
        return self.headers.get("location", "")

    def query(self) -> dict[str, str]:
        """The redirect's query (msg=..., error=...)."""
        return {k: v[0] for k, v in parse_qs(urlsplit(self.location).query).items()}


@dataclass
class Browser:
    """The console's ASGI application and a signed-in session (the cookie the printed URL sets)."""

    app: Any
    secrets: Secrets
    cookie: str = ""
    seen: list[str] = field(default_factory=list)

    def request(
        self, method: str, path: str, body: str = "", headers: dict[str, str] | None = None
    ) -> Answer:
        url = urlsplit(path)
        sent: list[dict[str, Any]] = []
        all_headers = {"host": f"127.0.0.1:{PORT}", **({"cookie": self.cookie} if self.cookie else {})}
        if method == "POST":
            all_headers |= {"content-type": FORM, "origin": f"http://127.0.0.1:{PORT}"}
        all_headers |= headers or {}
        scope = {
            "type": "http",
            "http_version": "1.1",
            "scheme": "http",
            "method": method,
            "path": url.path,
            "raw_path": url.path.encode(),
            "root_path": "",
            "query_string": url.query.encode(),
            "headers": [(k.encode(), v.encode()) for k, v in all_headers.items()],
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", PORT),
        }
        chunks = [body.encode()]

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": chunks.pop(0) if chunks else b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        asyncio.run(self.app(scope, receive, send))
        start = next(m for m in sent if m["type"] == "http.response.start")
        text = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body").decode()
        self.seen.append(f"{method} {path} {start['status']}")
        return Answer(start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, text)

    def sign_in(self) -> None:
        answer = self.request("GET", f"/?token={self.secrets.token}")
        assert answer.status == 303, answer
        self.cookie = answer.headers["set-cookie"].split(";", 1)[0]
        assert self.cookie.startswith(f"{COOKIE}=")

    def get(self, path: str) -> Answer:
        answer = self.request("GET", path)
        assert answer.status == 200, (answer.status, answer.text[:2000])
        return answer

    def forecast(self, path: str) -> Answer:
        """A Hygiene forecast (``/hygiene?live=1`` or ``?at=``) followed as the page's refresh
        does: the redirect to its own URL, then that URL until it no longer says "forecasting"."""
        started = self.request("GET", path)
        assert started.status == 303, (started.status, started.text[:2000])
        url = started.headers["location"]
        assert re.fullmatch(r"/hygiene\?(live=1|at=[0-9-]+)&run=[0-9a-f]{16}", url), url

        def finished() -> Answer | None:
            answer = self.get(url)
            if 'id="forecasting"' not in answer.text:
                return answer
            assert '<meta http-equiv="refresh" content="1">' in answer.text
            return None

        return eventually(finished, 60, "the forecast's page without 'forecasting'", interval_s=0.05)

    def press(self, path: str, button: str, **fill: str) -> Answer:
        """Load ``path``, fill the fields ``fill`` names and press ``button`` (its form's own
        fields: the CSRF token included)."""
        url, body = submission(path, self.get(path).text, button)
        fields = [(k, fill.pop(k) if k in fill else v) for k, v in parse_qsl(body, keep_blank_values=True)]
        assert not fill, f"no such fields: {fill}"
        return self.request("POST", url, urlencode(fields))


def flash(answer: Answer) -> str:
    return answer.query().get("error") or answer.query().get("msg") or ""


def text_of(html: str, element_id: str) -> str:
    """The text of the element with ``element_id`` (tags dropped, spaces squeezed)."""
    match = re.search(rf'<(\w+)[^>]*\bid="{element_id}"[^>]*>(.*?)</\1>', html, re.S)
    assert match, f"no #{element_id} in {html[:3000]}"
    inner = match.group(2).replace("<wbr>", "")  # a line-break opportunity, not a space
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", inner)).split())


@pytest.fixture
def ses(aws: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LocalSes:
    return install_local_ses(tmp_path / "outbox", monkeypatch)


@pytest.fixture
def world(ses: LocalSes) -> Iterator[LocalResources]:
    forget_cloudwatch()
    with messaging_world() as res:
        yield res
    forget_cloudwatch()


@pytest.fixture
def target(world: LocalResources) -> Target:
    return Target(kind="stack", name="t", region="us-east-1", settings=settings_of(world))


@pytest.fixture
def browser(target: Target) -> Browser:
    secrets = Secrets()
    signed = Browser(build(Console(target, secrets), PORT), secrets)
    signed.sign_in()
    return signed


def held_broadcast(world: LocalResources, broadcast_id: str = "held-1") -> None:
    """A broadcast in progress that the guardrail moved to ``paused_reputation``."""
    records = BroadcastStore(world.tables["table_name"])
    created, _ = records.create(
        BroadcastRequest.model_validate({"id": broadcast_id, "template": "newsletter/monthly"}),
        send_rate=1000,
    )
    moving = records.set_status(created, SENDING, leaving=frozenset({created.status}))
    assert moving is not None and records.pause_for_reputation(moving) is not None


def paused(world: LocalResources, ses: LocalSes) -> None:
    """What the guardrail leaves after an alarm: the marketing set paused, the pause recorded."""
    ses.set_sending(MARKETING, False)
    ReputationStore(world.tables["table_name"]).mark_paused(
        specs.PAUSABLE_CONFIGURATION_SET.id,
        MARKETING,
        alarm="guard-complaint",
        metric=COMPLAINT,
        threshold=0.0008,
        reason="Threshold Crossed",
        at="2026-11-27T03:00:00+00:00",
    )


def paused_by_complaints(world: LocalResources, ses: LocalSes, rate: float) -> None:
    """The marketing set paused by the guardrail's complaint alarm (above 0.08 %), the complaint
    rate now ``rate``."""
    guard_alarms(complaint=0.0008)
    publish_rate(COMPLAINT, rate)
    paused(world, ses)


@pytest.fixture
def quota(monkeypatch: pytest.MonkeyPatch) -> None:
    """SES's sending quota as a resume reads it: 14 mails a second."""
    monkeypatch.setattr("ops.broadcasts.read_quota", lambda _c: type("Q", (), {"max_send_rate": 14.0})())


def status_of(world: LocalResources, broadcast_id: str) -> str:
    record = BroadcastStore(world.tables["table_name"]).get(broadcast_id)
    assert record is not None
    return record.status


# ----- reputation ---------------------------------------------------------------------------------
def test_the_reputation_page_shows_each_set_against_the_thresholds_and_the_held_broadcasts(
    world: LocalResources, ses: LocalSes, browser: Browser
) -> None:
    guard_alarms(bounce=0.04, complaint=0.0008)
    publish_rate(COMPLAINT, 0.002)
    publish_rate(BOUNCE, 0.01)
    paused(world, ses)
    held_broadcast(world)

    page = browser.get("/reputation").text

    marketing = text_of(page, "set-marketing")
    assert MARKETING in marketing and "paused since 2026-11-27 03:00 UTC" in marketing
    # bounce 1.00 % (pauses above 4.00 %, SES 5 % / 10 %), complaint 0.20 % (above 0.08 %)
    assert "1.00% 4.00% 5.00% / 10.00%" in marketing and "0.20% 0.08% 0.10% / 0.50%" in marketing
    assert "complaint rate 0.20% is above 0.08%" in page
    transactional = text_of(page, "set-transactional")
    assert transactional.split()[:4] == [
        "transactional",
        specs.TRANSACTIONAL_CONFIGURATION_SET.local_name,
        "on",
        "-",
    ]
    assert "- never 5.00% / 10.00%" in transactional  # the guardrail never pauses it
    assert "held-1" in text_of(page, "held")
    assert browser.get("/").text.count('id="paused-banner"') == 1  # the overview says it too


def test_the_overview_answers_when_the_credentials_may_not_read_ses(
    world: LocalResources, browser: Browser
) -> None:
    # Given an operator whose credentials SES refuses (GetConfigurationSet: AccessDenied)
    def refuse(**_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        error = {
            "Error": {"Code": "AccessDeniedException", "Message": "not authorized"},
            "ResponseMetadata": {"HTTPStatusCode": 403},
        }
        return AWSResponse("https://email.us-east-1.amazonaws.com/", 403, {}, None), error

    register_hook("before-call.sesv2.GetConfigurationSet", refuse)
    try:
        answer = browser.get("/")
    finally:
        unregister_hook("before-call.sesv2.GetConfigurationSet", refuse)

    # Then the overview is there, saying the pause is not known, and why
    assert answer.status == 200 and 'id="overview-data"' in answer.text
    assert "SES answered AccessDeniedException" in text_of(answer.text, "paused-unknown")
    assert 'id="paused-banner"' not in answer.text


def test_a_resume_above_the_threshold_is_refused_with_the_reason_and_changes_nothing(
    world: LocalResources, ses: LocalSes, browser: Browser
) -> None:
    paused_by_complaints(world, ses, rate=0.002)
    held_broadcast(world)

    answer = browser.press("/reputation", "Resume marketing sending")

    assert answer.status == 303 and answer.location.startswith("/reputation?")
    assert "not resumed" in flash(answer) and "complaint rate 0.20% is above 0.08%" in flash(answer)
    assert not ses.sending_enabled(MARKETING)
    record = ReputationStore(world.tables["table_name"]).get(specs.PAUSABLE_CONFIGURATION_SET.id)
    assert record is not None and record.paused
    assert status_of(world, "held-1") == PAUSED_REPUTATION
    assert "not resumed" in browser.get(answer.location).text  # the page shows why


def test_a_post_without_the_csrf_token_is_refused_and_changes_nothing(
    world: LocalResources, ses: LocalSes, browser: Browser, quota: None
) -> None:
    paused(world, ses)  # no alarm, no rate: a resume would go through
    held_broadcast(world)
    url, body = submission("/reputation", browser.get("/reputation").text, "Resume anyway")
    fields = {k: v[0] for k, v in parse_qs(body, keep_blank_values=True).items()}
    fields["confirm"] = MARKETING
    without = urlencode({k: v for k, v in fields.items() if k != CSRF_FIELD})
    wrong = urlencode({**fields, CSRF_FIELD: "not-the-token"})

    for sent in (without, wrong):
        answer = browser.request("POST", url, sent)
        assert answer.status == 403 and "CSRF" in answer.text
    assert browser.request("POST", "/hygiene/dry-run", "at=").status == 403

    assert not ses.sending_enabled(MARKETING)
    assert status_of(world, "held-1") == PAUSED_REPUTATION
    # the same form with its token goes through: the refusal was the token's
    assert browser.request("POST", url, urlencode(fields)).status == 303
    assert ses.sending_enabled(MARKETING)


def test_resume_anyway_needs_the_set_name_typed_then_resumes_the_held_broadcasts(
    world: LocalResources, ses: LocalSes, browser: Browser, quota: None
) -> None:
    paused_by_complaints(world, ses, rate=0.002)
    held_broadcast(world)
    page = browser.get("/reputation").text
    assert f'data-expect="{MARKETING}"' in page  # the page's script enables the button on it

    for typed in ("", "yes", MARKETING + "x"):
        refused = browser.press("/reputation", "Resume anyway", confirm=typed)
        assert (
            refused.status == 303
            and f"type the marketing configuration set's name ({MARKETING})" in flash(refused)
        )
        assert not ses.sending_enabled(MARKETING) and status_of(world, "held-1") == PAUSED_REPUTATION

    done = browser.press("/reputation", "Resume anyway", confirm=f" {MARKETING} ")

    assert flash(done) == f"marketing sending resumed on {MARKETING} (forced); broadcasts resumed: held-1"
    assert ses.sending_enabled(MARKETING)
    record = ReputationStore(world.tables["table_name"]).get(specs.PAUSABLE_CONFIGURATION_SET.id)
    assert record is not None and not record.paused and record.forced
    assert status_of(world, "held-1") == "resolving"
    after = browser.get("/reputation").text
    assert "paused" not in text_of(after, "set-marketing") and "held-1" not in text_of(after, "held")
    assert 'id="paused-banner"' not in browser.get("/").text


def test_below_the_thresholds_a_plain_resume_goes_through(
    world: LocalResources, ses: LocalSes, browser: Browser, quota: None
) -> None:
    paused_by_complaints(world, ses, rate=0.0005)

    answer = browser.press("/reputation", "Resume marketing sending")

    assert flash(answer) == f"marketing sending resumed on {MARKETING}; broadcasts resumed: none"
    assert ses.sending_enabled(MARKETING)


# ----- hygiene ------------------------------------------------------------------------------------
def hygiene_items(world: LocalResources) -> list[dict[str, Any]]:
    ddb = client("dynamodb")
    return [deserialize(i) for i in ddb.scan(TableName=world.tables["events_table_name"])["Items"]]


def test_the_hygiene_page_shows_the_report_and_its_dry_run_writes_nothing(
    world: LocalResources, browser: Browser
) -> None:
    store = SubscriberStore(world.tables["table_name"], world.tables["events_table_name"])
    readers = [f"quiet{i}@example.com" for i in range(3)]
    for email in readers:
        store.upsert(email, first_name="Q")  # their hygiene item starts today
    now = datetime.now(UTC)
    ddb = client("dynamodb")
    ddb.transact_write_items(
        TransactItems=[
            day_adds(world.tables["table_name"], {"open": 3, "open_machine": 1}, at=now.isoformat())
        ]
    )
    young = (date.today() + timedelta(days=30)).isoformat()  # new subscribers turn cold after 30 days

    opened = browser.get("/hygiene").text  # as it opens: the at-risk and the next run on request
    assert text_of(opened, "forecast").startswith("Forecast now : who turns cold in the next 14 days")
    assert 'id="next-run"' not in opened and 'id="at-risk"' not in opened
    today = browser.forecast("/hygiene?live=1").text  # "Forecast now"
    assert text_of(today, "policy").startswith("Cold after 90 days without a human open or click (30 days")
    assert "unsubscribed 30 days later" in text_of(today, "policy")
    assert text_of(today, "last-run") == "never"
    assert "0 to mark cold, 0 to unsubscribe" in text_of(today, "next-run")
    machines = text_of(today, "machines")
    assert "opens (Apple MPP) 3 1 25.00%" in machines and "clicks (security scanners) 0 0 -" in machines

    ahead = browser.forecast(f"/hygiene?at={young}").text
    assert "3 to mark cold, 0 to unsubscribe" in text_of(ahead, "next-run")
    assert all(f"/subscribers/{email.replace('@', '%40')}" in ahead for email in readers)
    at_risk = browser.forecast(f"/hygiene?at={(date.today() + timedelta(days=20)).isoformat()}").text
    assert f"{young} 3" in text_of(at_risk, "at-risk")

    before = hygiene_items(world)
    dry = browser.press("/hygiene", "Dry run now", at=young)

    assert dry.status == 200 and f"Dry run for {young}" in dry.text
    assert "3 to mark cold, 0 to unsubscribe" in text_of(dry.text, "dry-run")
    assert hygiene_items(world) == before  # nothing written: no cold mark, no checkpoint
    assert (
        ddb.get_item(TableName=world.tables["table_name"], Key=key(keys.HYGIENE_PK, keys.HYGIENE_STATE)).get(
            "Item"
        )
        is None
    )
    assert all("cold" not in store.require_profile(email).tags for email in readers)
    assert browser.request("GET", "/hygiene?at=tomorrow").status == 400  # a day, or the problem page


def test_the_navigation_links_both_pages(browser: Browser) -> None:
    page = browser.get("/hygiene").text
    assert '<a href="/reputation"' in page and '<a href="/hygiene" aria-current="page"' in page


# ----- the CLI shows what the pages show (one set of operations) ---------------------------------
def test_the_cli_lists_the_held_broadcasts_and_the_machine_share(
    world: LocalResources, ses: LocalSes, target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from cli.main import app

    paused(world, ses)
    held_broadcast(world)
    ddb = client("dynamodb")
    ddb.transact_write_items(
        TransactItems=[
            day_adds(
                world.tables["table_name"], {"click": 1, "click_machine": 3}, at=datetime.now(UTC).isoformat()
            )
        ]
    )
    monkeypatch.setattr("cli.target.select", lambda *_: target)
    monkeypatch.setenv("COLUMNS", "200")

    status = CliRunner().invoke(app, ["reputation", "status"])
    report = CliRunner().invoke(app, ["hygiene", "report"])

    assert status.exit_code == 0, status.output
    assert "broadcasts paused by the guardrail (resumed by `resume`): held-1" in status.output
    assert report.exit_code == 0, report.output
    assert "- (none) of opens, 75% (3 of 4) of clicks" in report.output


def test_the_hygiene_page_opens_without_reading_a_day_bucket_and_forecasts_on_request(
    world: LocalResources, browser: Browser, target: Target
) -> None:
    from ops import hygiene

    # Given three new subscribers (cold after 30 days) and a daily run twenty days from now
    store = SubscriberStore(world.tables["table_name"], world.tables["events_table_name"])
    for i in range(3):
        store.upsert(f"new{i}@example.com")
    run_day = (date.today() + timedelta(days=20)).isoformat()
    young = (date.today() + timedelta(days=30)).isoformat()
    assert hygiene.run(target, dry_run=False, at=run_day)["marked_cold"] == 0

    reads: list[str] = []

    def count(params: dict[str, Any], **_: Any) -> None:
        if "HygieneIndex" in str(params.get("body", "")):
            reads.append("HygieneIndex")

    register_hook("before-call.dynamodb.Query", count)
    try:
        # When the page opens, then when "Forecast now" is followed
        opened = browser.get("/hygiene").text
        on_opening = len(reads)
        forecast = browser.forecast(f"/hygiene?at={run_day}").text  # a day asked for: the full report
    finally:
        unregister_hook("before-call.dynamodb.Query", count)

    # Then opening read no day bucket and showed the last run; the report of the run's day read
    # them and shows the three turning cold on their 30th day
    assert on_opening == 0 and len(reads) > 0
    assert text_of(opened, "last-run").startswith(f"{run_day}: 0 marked cold, 0 unsubscribed")
    assert 'href="/hygiene?live=1"' in opened and 'id="at-risk"' not in opened
    assert f"{young} 3" in text_of(forecast, "at-risk")
    assert "0 to mark cold, 0 to unsubscribe" in text_of(forecast, "next-run")


def test_a_forecast_reads_in_the_background_once_per_run_and_a_new_one_reads_again(
    world: LocalResources, browser: Browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ops import hygiene

    store = SubscriberStore(world.tables["table_name"], world.tables["events_table_name"])
    store.upsert("new0@example.com")
    gate = threading.Event()
    reads: list[str] = []
    report = hygiene.report

    def slow_report(*args: Any, **kwargs: Any) -> dict[str, Any]:
        reads.append("report")
        assert gate.wait(30), "the test never let the forecast finish"
        return report(*args, **kwargs)

    monkeypatch.setattr(hygiene, "report", slow_report)

    # When "Forecast now" is followed while the read is slower than a page may wait
    started = browser.request("GET", "/hygiene?live=1")
    url = started.headers["location"]
    waiting = browser.get(url).text
    again = browser.get(url).text  # the refresh, still reading
    gate.set()
    done = eventually(
        lambda: answer if 'id="forecasting"' not in (answer := browser.get(url)).text else None,
        60,
        "the forecast's page without 'forecasting'",
        interval_s=0.05,
    )
    reloaded = browser.get(url).text
    fresh = browser.forecast("/hygiene?live=1").text

    # Then the page answered at once, saying so and refreshing itself, and one read served the
    # waiting pages, the answer and its reload; a new "Forecast now" read again
    assert started.status == 303
    for page in (waiting, again):
        assert text_of(page, "forecasting").startswith("Forecasting today: reading the day buckets")
        assert '<meta http-equiv="refresh" content="1">' in page and 'id="hygiene-tiles"' not in page
    assert text_of(done.text, "forecast-read").startswith("Forecast for ")
    assert 'id="at-risk"' in done.text and 'http-equiv="refresh"' not in done.text
    assert text_of(reloaded, "forecast-read") == text_of(done.text, "forecast-read")
    assert 'id="at-risk"' in fresh and reads == ["report", "report"]


def test_the_console_s_forecast_keeps_fewer_bucket_queries_in_flight_than_the_cli_s_report(
    target: Target, browser: Browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    from console.pages import FORECAST_READERS
    from ops import hygiene
    from shared.engagement import sunset

    # Given every at-risk bucket Query counted while it is in flight
    original = sunset._index_items
    lock, in_flight, peaks = threading.Lock(), [0], [0]

    def counted(store: SubscriberStore, index_key: str) -> Iterator[dict[str, Any]]:
        with lock:
            in_flight[0] += 1
            peaks[0] = max(peaks[0], in_flight[0])
        try:
            time.sleep(0.002)  # long enough for the other readers to overlap
            yield from original(store, index_key)
        finally:
            with lock:
                in_flight[0] -= 1

    monkeypatch.setattr(sunset, "_index_items", counted)

    # When the console forecasts, and when the CLI's report (ops.hygiene.report as it is) reads
    browser.forecast("/hygiene?live=1")
    console_peak, peaks[0] = peaks[0], 0
    hygiene.report(target)

    # Then the console's read kept at most its readers in flight, where the CLI's kept more
    assert 1 < console_peak <= FORECAST_READERS < peaks[0] <= sunset.AT_RISK_READERS


# ----- a held broadcast (docs/broadcasts.md, "Held") ------------------------------------------------
def test_a_held_broadcast_s_page_says_why_and_when_and_resume_now_starts_a_round(
    world: LocalResources, browser: Browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    from moto.sesv2.responses import SESV2Response

    from local_aws import hooks

    monkeypatch.setattr(SESV2Response, "get_account", hooks._get_account, raising=False)  # the resume's rate
    records = BroadcastStore(world.tables["table_name"])
    created, _ = records.create(
        BroadcastRequest.model_validate({"id": "quota-1", "template": "newsletter/monthly"}), send_rate=1000
    )
    moving = records.set_status(created, SENDING, leaving=frozenset({created.status}))
    assert moving is not None and records.hold(moving, "daily_quota", "2026-11-29T00:00:01.000Z") is not None

    page = browser.get("/broadcasts/quota-1").text
    assert text_of(page, "b-status") == "held: SES says not yet"
    held = text_of(page, "b-held")
    assert held.startswith("the account's 24-hour SES quota is spent; nothing failed, it resumes by itself")
    assert "at 2026-11-29 00:00 UTC (" in held  # the time with its zone, and how far off
    answer = browser.press("/broadcasts/quota-1", "Resume now")
    assert flash(answer) == "broadcast quota-1 resumed (round 2)"
    assert status_of(world, "quota-1") == "resolving"


# ----- the new-broadcast form's engagement conditions (docs/console.md, "Broadcasts") -------------
SPRING = "spring"  # the broadcast some readers opened
OPENERS = [f"open{i}@example.com" for i in range(3)]  # opened it as people
MACHINE_OPENER = "machine@example.com"  # only Apple's prefetch opened it
IDLE = [f"idle{i}@example.com" for i in range(2)]  # did nothing


@pytest.fixture
def opened_spring(world: LocalResources) -> None:
    """Six readers tagged ``news``, three of whom opened ``spring`` as people and one only by a
    machine, their opens written by the engagement consumer from SES events."""
    from shared.engagement.consumer import EngagementContext, process_body
    from shared.engagement.machine import MPP_USER_AGENT
    from shared.engagement.suppression import Suppressions
    from tests.integration.test_engagement import event, sns

    store = SubscriberStore(world.tables["table_name"], world.tables["events_table_name"])
    for email in [*OPENERS, MACHINE_OPENER, *IDLE]:
        store.upsert(email, add_tags=["news"])
    BroadcastStore(world.tables["table_name"]).create(
        BroadcastRequest.model_validate({"id": SPRING, "template": "newsletter/monthly"}), send_rate=1000
    )
    ctx = EngagementContext(store=store, suppressions=Suppressions(store))
    at = (datetime.now(UTC) - timedelta(days=1)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    for email in [*OPENERS, MACHINE_OPENER]:
        machine = {"userAgent": MPP_USER_AGENT} if email == MACHINE_OPENER else {}
        record = event("open", email=email, source=SPRING, template="newsletter/monthly",
                       message_id=f"m-{email}", at=at, **machine)  # fmt: skip
        process_body(sns(record), ctx)


def new_broadcast_form(browser: Browser, **fill: str) -> tuple[str, dict[str, str]]:
    """The new-broadcast form's action and fields as the page serves them (its text fields, the
    CSRF token), filled with ``fill``: the select and the boxes a browser would set."""
    url, body = submission("/broadcasts/new", browser.get("/broadcasts/new").text, "Send broadcast")
    fields = dict(parse_qsl(body, keep_blank_values=True))
    for name in ("opened", "clicked", "not_opened", "engaged_within_days", "not_engaged_within_days"):
        assert name in fields, f"the form has no {name} field"
    return url, {**fields, "template": "newsletter/monthly", "tags": "news", **fill}


def live_count(browser: Browser, fields: dict[str, str]) -> Answer:
    """The live count's request, as console.js sends the form (one part: a small audience)."""
    return browser.request(
        "POST", "/api/audience", urlencode(fields), headers={"x-csrf-token": browser.secrets.csrf}
    )


def test_the_form_counts_and_sends_an_audience_of_human_openers(
    world: LocalResources, browser: Browser, opened_spring: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from moto.sesv2.responses import SESV2Response

    from local_aws import hooks

    monkeypatch.setattr(SESV2Response, "get_account", hooks._get_account, raising=False)  # the send's rate
    page = browser.get("/broadcasts/new").text
    assert f'<option value="{SPRING}">' in page  # offered among the recent broadcasts
    assert "only people&#39;s opens" in page or "only people's opens" in page

    url, fields = new_broadcast_form(browser, opened=SPRING)
    counted = live_count(browser, fields)
    assert counted.status == 200, counted.text
    answer = json.loads(counted.text)
    assert answer["cursor"] is None and answer["size"] == len(OPENERS)
    assert sorted(answer["sample"]) == sorted(OPENERS)
    assert f"opened {SPRING} as a person" in answer["audience"]

    # the box: the machine's open counts too
    with_machines = json.loads(live_count(browser, {**fields, "machine_opens": "yes"}).text)
    assert sorted(with_machines["sample"]) == sorted([*OPENERS, MACHINE_OPENER])

    sent = browser.request("POST", url, urlencode({**fields, "confirm": "yes"}))
    assert sent.status == 303 and "broadcast sent" in flash(sent), sent.location
    broadcast_id = sent.location.split("?")[0].rsplit("/", 1)[1]
    record = BroadcastStore(world.tables["table_name"]).get(broadcast_id)
    assert record is not None
    assert list(record.audience.opened) == [SPRING] and record.audience.machine_opens is False


def refused_naming(
    world: LocalResources, browser: Browser, url: str, fields: dict[str, str], name: str
) -> None:
    """The live count and the send of ``fields`` are refused with an error naming the
    field's ``name``; the send writes no broadcast."""
    records = BroadcastStore(world.tables["table_name"])
    before = [b.id for b in records.list()]
    counted = live_count(browser, fields)
    assert counted.status == 400 and name in json.loads(counted.text)["error"]

    sent = browser.request("POST", url, urlencode({**fields, "confirm": "yes"}))
    assert sent.status == 303 and sent.location.startswith("/broadcasts/new?")
    assert name in flash(sent)
    assert [b.id for b in records.list()] == before


# ----- the new-broadcast form's A/B test (docs/console.md, "Broadcasts") --------------------------
AB_READERS = [f"ab{i:02d}@example.com" for i in range(40)]


@pytest.fixture
def ab_world(world: LocalResources, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Forty readers tagged ``ab``; the console's broadcasts with a schedule state machine (the
    rest waits for the decision time) that keeps what it would start; the send's SES rate."""
    from moto.sesv2.responses import SESV2Response

    from local_aws import hooks
    from ops.broadcasts import Broadcasts
    from tests.integration.test_ab_tests import FakeScheduler

    store = SubscriberStore(world.tables["table_name"], world.tables["events_table_name"])
    for email in AB_READERS:
        store.upsert(email, add_tags=["ab"])
    monkeypatch.setattr(SESV2Response, "get_account", hooks._get_account, raising=False)
    scheduler = FakeScheduler()
    wired = Broadcasts.from_settings

    def with_scheduler(*args: Any, **kwargs: Any) -> Broadcasts:
        return dataclasses.replace(wired(*args, **kwargs), scheduler=scheduler)  # type: ignore[arg-type]

    monkeypatch.setattr(Broadcasts, "from_settings", with_scheduler)
    return scheduler


def ab_form(browser: Browser, **fill: str) -> tuple[str, dict[str, str]]:
    """The form with its A/B test ticked: variant A the template and subject above, B another
    subject, half the audience in the test, decided on people's clicks."""
    url, fields = new_broadcast_form(browser, tags="ab", subject="Spring")
    for name in ("ab_id", "variant_subject_1", "test_share", "decide_after", "min_sample"):
        assert name in fields, f"the form has no {name} field"
    test = {"ab": "yes", "variant_subject_1": "Our spring sale", "test_share": "50", "metric": "clicks"}
    return url, {**fields, **test, "min_sample": "5", **fill}


def test_the_form_s_ab_test_counts_each_variant_s_group_and_sends_the_test_and_its_rest(
    world: LocalResources, ab_world: Any, browser: Browser
) -> None:
    from ops.broadcasts import Broadcasts
    from shared.broadcasts.abtest import decide, in_test, variant_of

    assert 'id="ab-test"' in browser.get("/broadcasts/new").text
    url, fields = ab_form(browser)
    test_id = fields["ab_id"]
    expected = {"A": 0, "B": 0, "rest": 0}
    for email in AB_READERS:
        group = "AB"[variant_of(test_id, email, 2)] if in_test(test_id, email, 50) else "rest"
        expected[group] += 1
    assert min(expected.values()) > 0, expected

    counted = live_count(browser, fields)
    assert counted.status == 200, counted.text
    answer = json.loads(counted.text)
    assert answer["groups"] == expected and answer["size"] == len(AB_READERS)
    assert answer["cursor"] is None and "all of ab" in answer["audience"]
    # without the box, the same fields count the whole audience as one broadcast
    plain = json.loads(live_count(browser, {k: v for k, v in fields.items() if k != "ab"}).text)
    assert "groups" not in plain and plain["size"] == len(AB_READERS)

    sent = browser.request("POST", url, urlencode({**fields, "confirm": "yes"}))
    assert sent.status == 303 and flash(sent) == f"broadcast sent {test_id}", sent.location
    service = Broadcasts.from_settings(settings_of(world))
    test = service.get(test_id)
    assert test.ab is not None and test.audience.split is not None
    assert [(v.template, v.subject) for v in test.ab.variants] == [
        ("newsletter/monthly", "Spring"),
        ("newsletter/monthly", "Our spring sale"),
    ]
    settings = (test.ab.share, test.ab.metric, test.ab.decide_after_s, test.ab.min_sample)
    assert settings == (50, "clicks", 4 * 3600, 5)
    rest = service.get(f"{test_id}-rest")
    assert test.ab.rest_id == rest.id and rest.status == "scheduled" and rest.id in ab_world.started
    assert rest.audience.split is not None and rest.audience.split.side == "rest"
    assert list(rest.audience.tags) == ["ab"]

    # The test's page shows its setup, the rest and, once decided, the winner and the numbers
    page = browser.get(f"/broadcasts/{test_id}").text
    assert 'id="ab-setup"' in page and "50% of the audience" in page and f"/broadcasts/{rest.id}" in page
    assert "Not decided yet" in page and 'id="follow-up"' in page and "The rest (the winner)" in page
    decision = decide(test.ab, [40, 42], [4, 9], decided_at="2026-11-28T12:00:00.000Z")
    assert service.records.record_decision(test, decision) is not None
    page = browser.get(f"/broadcasts/{test_id}").text
    assert "Variant B won" in page and "the higher rate" in page and "21.43%" in page, page


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("engaged_within_days", "-1"),
        ("engaged_within_days", "soon"),
        ("test_share", "0"),
        ("test_share", "x"),
    ],
)
def test_a_bad_field_is_refused_naming_it_and_nothing_is_written(
    world: LocalResources, ab_world: Any, browser: Browser, name: str, value: str
) -> None:
    """A bad number of days (an engagement condition), a bad test share (the A/B test)."""
    url, fields = (ab_form if name == "test_share" else new_broadcast_form)(browser, **{name: value})
    refused_naming(world, browser, url, fields, name)
    assert ab_world.started == {}  # no rest scheduled either


# ----- a broadcast's report (docs/console.md, "Broadcasts") ---------------------------------------
def test_a_broadcast_s_report_shows_opens_over_time_the_non_openers_the_mail_and_its_times(
    browser: Browser, opened_spring: None
) -> None:
    page = browser.get(f"/broadcasts/{SPRING}").text
    over_time = text_of(page, "over-time")
    assert over_time.startswith("hour (UTC) opens clicks ")
    assert f" {len(OPENERS)} 0" in over_time  # the people's opens in their hour, the machine's not
    assert page.count('<meter class="open"') == 1  # one hour: one bar each
    assert text_of(page, "unopened") == "nobody"  # never resolved: no recipients
    assert '<iframe sandbox src="/templates/render/newsletter/monthly"' in page
    assert text_of(page, "b-end") == "not yet" and text_of(page, "b-duration") == "-"
    assert "UTC" in text_of(page, "b-start")

    answer = browser.get(f"/broadcasts/{SPRING}/did-not-open.csv")
    assert answer.headers["content-type"].startswith("text/csv")
    assert answer.text.splitlines() == ["email"]
    assert browser.request("GET", "/broadcasts/no-such/did-not-open.csv").status == 404


# ----- the new-broadcast form's tag suggestions, preview and test send ---------------------------
@pytest.fixture
def unsubscribe_secret(target: Target) -> Iterator[str]:
    """The unsubscribe links' secret the target's settings name, while the test sends mail."""
    sm = client("secretsmanager")
    name = target.settings.unsubscribe_secret
    sm.create_secret(Name=name, SecretString="s" * 32)
    yield name
    sm.delete_secret(SecretId=name, ForceDeleteWithoutRecovery=True)


def test_the_form_suggests_the_tags_in_use_and_test_sends_its_template_and_subject_inline(
    world: LocalResources,
    ses: LocalSes,
    browser: Browser,
    target: Target,
    unsubscribe_secret: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from moto.sesv2.responses import SESV2Response

    from local_aws import hooks

    monkeypatch.setattr(SESV2Response, "get_account", hooks._get_account, raising=False)
    audience = {"tags": ["news"], "exclude_tags": ["churned"]}
    request = {"id": "tagged", "template": "newsletter/monthly", "audience": audience}
    records = BroadcastStore(world.tables["table_name"])
    records.create(BroadcastRequest.model_validate(request), send_rate=1000)
    page = browser.get("/broadcasts/new").text
    hints = text_of(page, "tag-hints")  # a recent broadcast's, and onboarding's (if pro, tag onboarded)
    for tag in ("churned", "news", "onboarded", "pro"):
        assert f" {tag}" in hints, hints
    assert '<option value="onboarded">' in page and 'list="known-tags"' in page
    assert 'id="template-preview"' in page and 'src="/templates/render/' in page

    def test_send(**fields: str) -> Answer:
        return browser.request(
            "POST", "/api/test-send", urlencode(fields), headers={"x-csrf-token": browser.secrets.csrf}
        )

    answer = test_send(template="newsletter/monthly", subject="Spring, inline", test_to="Me@Example.com")
    assert answer.status == 200, answer.text
    assert json.loads(answer.text) == {"message": "test mail sent to Me@example.com"}  # the domain lowered
    (meta,) = [json.loads(p.read_text()) for p in ses.outbox.glob("*.json")]
    assert meta["destination"] == ["Me@example.com"] and meta["subject"] == "Spring, inline"

    refused = test_send(template="newsletter/monthly", subject="", test_to="not an address")
    assert refused.status == 400 and "email" in json.loads(refused.text)["error"]
    assert len(list(ses.outbox.glob("*.json"))) == 1  # nothing more went out
    no_csrf = browser.request("POST", "/api/test-send", urlencode({"template": "newsletter/monthly"}))
    assert no_csrf.status == 403
