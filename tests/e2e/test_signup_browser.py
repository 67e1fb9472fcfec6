"""A real browser through sign-up, confirmation and the preference centre.

Headless Chromium (Debian's ``chromium`` package; `make test` installs it) is driven over the
Chrome DevTools Protocol on ``--remote-debugging-pipe`` (NUL-separated JSON on file
descriptors 3 and 4: no websocket library, no driver binary). The page it loads is the HTML
form snippet of ``docs/signup.md``, served by a small static server, pointing at the local
runtime's API; the runtime runs the synthesized template with that server's origin added to
``SIGNUP_ALLOWED_ORIGINS`` (``mailstep dev --template``), so the form's ``redirect`` works.

Screenshots of every step are kept in ``tests/artifacts/screenshots/`` (git-ignored); the
test prints the folder. Without ``/usr/bin/chromium`` the test fails and says how to install
it: it is never skipped.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import itertools
import json
import os
import queue
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ROOT, Local, dev_runtime
from tests.e2e.helpers import eml, eventually, item, mails, unique_email

CHROMIUM = os.environ.get("MAILSTEP_CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = ROOT / "tests" / "artifacts" / "screenshots"
SNIPPET = re.compile(
    r"```html\n(<form method=\"post\" action=\"https://YOUR-API/v1/signup\">.*?</form>)\n```", re.S
)


# ----- a small CDP client over --remote-debugging-pipe -----------------------------------------
class Browser:
    """Headless Chromium with one page; ``call`` sends a CDP command to that page."""

    def __init__(self, profile_dir: Path) -> None:
        if not Path(CHROMIUM).exists():
            pytest.fail(
                f"{CHROMIUM} is missing: the browser test needs Debian's chromium "
                "(`make test` installs it; or `sudo apt-get install -y chromium`)"
            )
        commands_read, self._commands = os.pipe()
        self._answers, answers_write = os.pipe()

        def wire() -> None:  # in the child: fd 3 reads commands, fd 4 writes answers
            os.dup2(commands_read, 3)
            os.dup2(answers_write, 4)

        self.process = subprocess.Popen(  # noqa: S603
            [
                CHROMIUM,
                "--headless=new",
                "--no-sandbox",  # root in CI containers
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--remote-debugging-pipe",
                f"--user-data-dir={profile_dir}",
                "--window-size=900,1100",
                "about:blank",
            ],
            preexec_fn=wire,  # noqa: PLW1509 - the CDP pipe must be fds 3 and 4
            close_fds=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(commands_read)
        os.close(answers_write)
        self._ids = itertools.count(1)
        self._waiting: dict[int, queue.Queue[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()
        target = self.call("Target.createTarget", url="about:blank", session=None)["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True, session=None)[
            "sessionId"
        ]
        self.call("Page.enable")
        # Headless Chromium composites no frame for a tab in the background, and a screenshot
        # waits for a frame: the tab this browser drives is the one in front.
        self.call("Page.bringToFront")
        # The runtime's https front has a self-signed certificate: this browser trusts it.
        self.call("Security.setIgnoreCertificateErrors", ignore=True, session=None)

    def _read(self) -> None:
        buffer = b""
        while chunk := os.read(self._answers, 65536):
            buffer += chunk
            while b"\0" in buffer:
                raw, buffer = buffer.split(b"\0", 1)
                message = json.loads(raw)
                self._note(message)
                waiting = self._waiting.get(message.get("id", -1))
                if waiting is not None:
                    waiting.put(message)

    def _note(self, message: dict[str, Any]) -> None:
        """Every message from the browser, answers and events, as it arrives (subclasses
        collect events here)."""

    def call(self, method: str, session: Any = ..., timeout_s: float = 30, **params: Any) -> dict[str, Any]:
        number = next(self._ids)
        answer: queue.Queue[dict[str, Any]] = queue.Queue()
        self._waiting[number] = answer
        message: dict[str, Any] = {"id": number, "method": method, "params": params}
        if session is ...:
            session = self.session
        if session is not None:
            message["sessionId"] = session
        with self._lock:
            os.write(self._commands, json.dumps(message).encode() + b"\0")
        try:
            result = answer.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(f"chromium did not answer {method} within {timeout_s:g} s") from None
        finally:
            del self._waiting[number]
        if "error" in result:
            raise AssertionError(f"{method}: {result['error']}")
        return dict(result.get("result", {}))

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        self.wait_for_page(lambda: self.evaluate("location.href") == url, f"{url} to load")

    def wait_for_page(self, check: Any, what: str) -> None:
        def ready() -> bool:
            try:
                return bool(check()) and self.evaluate("document.readyState") == "complete"
            except AssertionError:  # the page was navigating: its context went away
                return False

        eventually(ready, 30, what, interval_s=0.2)

    def text(self) -> str:
        return str(self.evaluate("document.body.innerText"))

    def click(self, selector: str) -> None:
        """A real mouse click in the middle of the element, once it is scrolled into view, stays
        where it is for 50 ms and is what is under that point (a page still laying out, or a
        full-page screenshot restoring the view, may move it or put something else there)."""
        aim = (
            f"(async () => {{ const e = document.querySelector({json.dumps(selector)}); if (!e) return null;"
            " e.scrollIntoView({block: 'center', inline: 'center'});"
            " const a = e.getBoundingClientRect(); await new Promise(done => setTimeout(done, 50));"
            " const r = e.getBoundingClientRect();"
            " if (a.x !== r.x || a.y !== r.y || a.width !== r.width || a.height !== r.height) return null;"
            " const x = r.x + r.width / 2, y = r.y + r.height / 2;"
            " const hit = document.elementFromPoint(x, y);"
            " return hit && (hit === e || e.contains(hit)) ? [x, y] : null; })()"
        )
        box = eventually(lambda: self.evaluate(aim), 10, f"{selector} under the pointer", interval_s=0.2)
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)

    def follow(self, selector: str, path: str) -> None:
        """Click a link and wait for its page. A click dispatched while the view was changing
        (a full-page screenshot restores it afterwards) can land nowhere: clicked again, at most
        three times in all."""

        def opened() -> bool:
            try:
                return bool(self.evaluate("location.pathname") == path)
            except AssertionError:  # navigating: the old page's context went away
                return False

        for _ in range(3):
            self.click(selector)
            with contextlib.suppress(AssertionError):
                eventually(opened, 5, f"{path} to open")
                return
        raise AssertionError(f"clicking {selector} three times did not open {path}")

    def type(self, selector: str, text: str) -> None:
        """Click the field until it has the focus (a page still laying out may put something
        else under the click's point), then type ``text`` into it."""
        element = f"document.querySelector({json.dumps(selector)})"

        def focused() -> bool:
            self.click(selector)
            return bool(self.evaluate(f"document.activeElement === {element}"))

        eventually(focused, 10, f"{selector} to have the focus", interval_s=0.2)
        self.call("Input.insertText", text=text)

    def capture(self, **params: Any) -> str:
        """``Page.captureScreenshot``, base64 PNG. A capture waits for the compositor's next frame,
        and headless Chromium sometimes leaves the surface idle and never answers: a capture not
        answered in 15 s wakes the compositor (the tab to the front, a screencast's first frame)
        and is asked again, three times in all."""
        for attempt in range(3):
            try:
                return str(self.call("Page.captureScreenshot", timeout_s=15, format="png", **params)["data"])
            except AssertionError as exc:
                if "did not answer" not in str(exc) or attempt == 2:
                    raise
            self.call("Page.bringToFront")
            self.call("Page.startScreencast", format="jpeg", quality=10, maxWidth=64, maxHeight=64)
            time.sleep(0.3)
            self.call("Page.stopScreencast")
        raise AssertionError("unreachable")

    def screenshot(self, name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        path.write_bytes(base64.b64decode(self.capture()))
        return path

    def close(self) -> None:
        try:
            self.call("Browser.close", session=None)
            self.process.wait(timeout=10)
        except (AssertionError, OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
        for fd in (self._commands, self._answers):
            with contextlib.suppress(OSError):
                os.close(fd)


# ----- the website: the documented snippet on a static server -----------------------------------
def documented_snippet() -> str:
    found = SNIPPET.search((ROOT / "docs" / "signup.md").read_text())
    assert found, "docs/signup.md has no HTML form snippet posting to https://YOUR-API/v1/signup"
    return found.group(1)


@pytest.fixture(scope="module")
def website(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(origin, folder) of a static server on a free port; the test writes its pages."""
    folder = tmp_path_factory.mktemp("website")
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", folder
    finally:
        server.shutdown()
        server.server_close()


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        return


@pytest.fixture(scope="module")
def runtime(
    website: tuple[str, Path], artifact: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Local]:
    """A runtime of the synthesized template whose sign-up function allows the website's origin."""
    origin, _ = website
    template = copy.deepcopy(artifact.template)
    (signup,) = [
        r
        for r in template["Resources"].values()
        if r["Type"] == "AWS::Lambda::Function"
        and r["Properties"]["Handler"] == "functions.signup.handler.handler"
    ]
    signup["Properties"]["Environment"]["Variables"]["SIGNUP_ALLOWED_ORIGINS"] = origin
    state_dir = tmp_path_factory.mktemp("mailstep-browser")
    path = state_dir / "template.json"
    path.write_text(json.dumps(template))
    with dev_runtime(state_dir, "--template", str(path)) as local:
        yield local


@pytest.fixture
def browser() -> Iterator[Browser]:
    profile = Path(tempfile.mkdtemp(prefix="mailstep-chromium-"))
    chromium = Browser(profile)
    try:
        yield chromium
    finally:
        chromium.close()
        shutil.rmtree(profile, ignore_errors=True)


def mail_link(local: Local, email: str, template: str, path: str) -> str:
    """The first https link to ``path`` in the HTML part of the reader's ``template`` mail."""

    def find() -> str | None:
        for meta in mails(local, {email})[email]:
            if meta["template"] == template:
                html = eml(local, meta).get_body(("html",)).get_content()  # type: ignore[union-attr]
                found = re.search(r'href="(https://[^"]+' + re.escape(path) + r'[^"]+)"', html)
                if found:
                    return found.group(1).replace("&amp;", "&")
        return None

    return str(eventually(find, 60, f"a {template} mail to {email} with a {path} link"))


def test_a_reader_signs_up_confirms_and_chooses_topics_in_a_real_browser(
    runtime: Local, website: tuple[str, Path], browser: Browser
) -> None:
    origin, folder = website
    email = unique_email("browser")
    snippet = (
        documented_snippet()
        .replace("https://YOUR-API", runtime.api_url)
        .replace("https://www.example.com/thanks", f"{origin}/thanks.html")
    )
    (folder / "index.html").write_text(
        f"<!DOCTYPE html><html lang='en'><title>Sign up</title><body>{snippet}</body></html>"
    )
    (folder / "thanks.html").write_text(
        "<!DOCTYPE html><html lang='en'><title>Thanks</title><body><h1>Thanks!</h1></body></html>"
    )
    print(f"\nscreenshots: {SCREENSHOTS}")

    # The reader fills in the documented form and also ticks the newsletter
    browser.open(f"{origin}/index.html")
    browser.type("input[name=email]", email)
    browser.type("input[name=first_name]", "Ada")
    browser.click("input[value=newsletter]")
    browser.screenshot("1-form")
    browser.click("button[type=submit]")
    browser.wait_for_page(
        lambda: browser.evaluate("location.href") == f"{origin}/thanks.html", "the redirect"
    )
    browser.screenshot("2-thanks")
    pending = item(runtime, f"SUB#{email}", "PENDING")
    assert pending is not None and item(runtime, f"SUB#{email}", "PROFILE") is None
    assert sorted(t["S"] for t in pending["topics"]["L"]) == ["newsletter", "product-updates"]

    # follows the link of the confirmation mail: the page asks; the click confirms
    browser.open(mail_link(runtime, email, "system/confirm", "/c/"))
    assert "Confirm your subscription" in browser.text()
    browser.screenshot("3-confirm")
    assert item(runtime, f"SUB#{email}", "PROFILE") is None
    browser.click("button[type=submit]")
    browser.wait_for_page(lambda: "You are subscribed" in browser.text(), "the confirmed page")
    browser.screenshot("4-confirmed")
    profile = item(runtime, f"SUB#{email}", "PROFILE")
    assert profile is not None and profile["status"]["S"] == "subscribed"
    assert profile["consent"]["M"]["user_agent"]["S"].startswith("Mozilla/5.0")
    assert profile["consent"]["M"]["form"]["S"] == "footer"

    # opens the preference centre from the welcome mail, unticks product updates and saves
    browser.open(mail_link(runtime, email, "welcome", "/u/"))
    assert browser.evaluate("document.querySelector('input[value=newsletter]').checked") is True
    assert browser.evaluate("document.querySelector('input[value=\"product-updates\"]').checked") is True
    browser.screenshot("5-preferences")
    browser.click("input[value='product-updates']")
    browser.click("button[name=save]")
    browser.wait_for_page(lambda: "Saved." in browser.text(), "the saved page")
    browser.screenshot("6-saved")
    assert browser.evaluate("document.querySelector('input[value=\"product-updates\"]').checked") is False

    # Then the stored choices are the ones the reader saved
    saved = item(runtime, f"SUB#{email}", "PROFILE")
    assert saved is not None and saved["status"]["S"] == "subscribed"
    assert saved["topics_in"]["SS"] == ["newsletter"] and saved["topics_out"]["SS"] == ["product-updates"]
    shots = {p.name for p in SCREENSHOTS.glob("*.png")}
    assert {
        f"{n}.png" for n in ("1-form", "2-thanks", "3-confirm", "4-confirmed", "5-preferences", "6-saved")
    } <= shots
