"""List health through the local runtime: a subscriber who unsubscribes through the HTTP API is
counted in the console overview's unsubscribes (the profile's change on the main table's stream,
folded by the stats-fold function from its bundled asset, beside the webhook dispatcher reading
the same stream), and the overview is rendered without a Scan."""

from __future__ import annotations

import uuid

from bench.meter import Meter
from console.app import build
from console.guard import Secrets
from console.site import Console
from ops.targets import local_target
from shared.core.aws import AwsConfig, ClientFactory
from tests.e2e.conftest import Local
from tests.eventually import eventually
from tests.integration.test_console_pages import PORT, Browser, text_of


def overview_browser(local: Local) -> Browser:
    aws = ClientFactory(AwsConfig.emulated(local.state["endpoint"], local.state["region"]))
    secrets = Secrets()
    browser = Browser(
        build(Console(local_target(str(local.state_dir), local.state["region"], aws), secrets), PORT), secrets
    )
    browser.sign_in()
    return browser


def count(browser: Browser, element_id: str) -> int:
    return int(text_of(browser.get("/?days=7").text, element_id).replace(",", "").lstrip("+"))


def test_an_unsubscribe_through_the_api_appears_in_the_overview_s_unsubscribes(local: Local) -> None:
    browser = overview_browser(local)
    email = f"leaver-{uuid.uuid4().hex[:8]}@example.com"
    # Given a subscriber, counted as new
    before_new = count(browser, "list-new")
    code, _ = local.http(
        "POST", "/v1/events", {"type": "subscriber.subscribed", "email": email}, local.api_key
    )
    assert code == 200
    eventually(lambda: count(browser, "list-new") > before_new, 60, "the new subscriber in the overview")
    # When they unsubscribe through the API (not an unsubscribe link)
    before = count(browser, "list-unsubscribed")
    code, answer = local.http(
        "POST", "/v1/events", {"type": "subscriber.unsubscribed", "email": email}, local.api_key
    )
    assert code == 200, answer
    # Then the overview counts them among the day's unsubscribes
    eventually(
        lambda: count(browser, "list-unsubscribed") > before, 60, "the API unsubscribe in the overview"
    )


def test_the_overview_reads_the_list_s_counts_without_a_scan(local: Local) -> None:
    browser = overview_browser(local)
    meter = Meter()
    meter.install()
    try:
        meter.start_log()
        page = browser.get("/")
        requests = meter.take_log()
    finally:
        meter.uninstall()
    assert 'id="list-mailable"' in page.text and 'id="chart-list"' in page.text
    operations = {r.operation for r in requests if r.service == "dynamodb"}
    assert operations and "Scan" not in operations, operations
