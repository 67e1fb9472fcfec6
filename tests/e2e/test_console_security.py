"""`mailstep console` against the local runtime, as an attacker sees it: without the token
nothing (401, no data); a foreign Host header (DNS rebinding) refused; a state-changing request
without the CSRF token refused with nothing changed; the port bound to 127.0.0.1 only; the
printed link signs in once (a second use is refused, `mailstep console token` gives a fresh one,
which also signs in once); the console's control file is its owner's only.

The console runs as the operator runs it (``mailstep console --port 0 --no-open``, a
subprocess); :func:`start_console` is also the browser tests' way in.
"""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

from console.control import fresh_url
from tests.e2e.conftest import ROOT, Local, subprocess_env
from tests.e2e.helpers import add_contact, eventually, item, unique_email

URL = re.compile(r"console: (http://127\.0\.0\.1:(\d+)/\?token=(\S+))")


@dataclass
class Console:
    url: str  # with ?token=
    base: str
    port: int
    token: str
    process: subprocess.Popen[str]
    log: Path
    state_dir: Path  # its control file is in consoles/<port>.json here

    def fresh_url(self) -> str:
        """A fresh sign-in URL (what `mailstep console token` prints): each signs in once."""
        return fresh_url(self.state_dir, self.port)[0]


def start_console(local: Local, log: Path) -> Console:
    """``mailstep console --target local --port 0 --no-open`` for ``local``; its first line
    names the URL."""
    out = log.open("w")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cli.main",
            "console",
            "--target",
            "local",
            "--state-dir",
            str(local.state_dir),
        ]
        + ["--port", "0", "--no-open"],
        cwd=ROOT,
        env=subprocess_env(),
        stdout=out,
        stderr=subprocess.STDOUT,
        text=True,
    )

    def printed() -> re.Match[str] | None:
        if process.poll() is not None:
            raise AssertionError(f"mailstep console exited {process.returncode}: {log.read_text()[-2000:]}")
        return URL.search(log.read_text())

    found = eventually(printed, 90, "mailstep console to print its URL", interval_s=0.2)
    port = int(found.group(2))
    base = f"http://127.0.0.1:{port}"
    eventually(lambda: _answers(base), 30, "the console to answer", interval_s=0.2)
    return Console(found.group(1), base, port, found.group(3), process, log, local.state_dir)


def _answers(base: str) -> bool:
    try:
        urllib.request.urlopen(base + "/static/console.css", timeout=5).close()
        return True
    except (urllib.error.URLError, OSError):
        return False


def stop_console(console: Console) -> None:
    console.process.terminate()
    try:
        console.process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        console.process.kill()
        console.process.wait()


@pytest.fixture(scope="module", name="console")
def running_console(local: Local, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    """`mailstep console` on the session runtime, one per test module (test_console_browser.py too)."""
    running = start_console(local, tmp_path_factory.mktemp("console") / "console.log")
    try:
        yield running
    finally:
        stop_console(running)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        return None


def send(
    url: str, method: str = "GET", body: str | None = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], str]:
    """One request, redirects not followed: (status, headers, body)."""
    opener = urllib.request.build_opener(_NoRedirect)
    data = body.encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if body is not None:
        request.add_header("content-type", "application/x-www-form-urlencoded")
    try:
        with opener.open(request, timeout=60) as answer:
            return answer.status, {k.lower(): v for k, v in answer.headers.items()}, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read().decode()


def signed_in(console: Console, url: str | None = None) -> str:
    """The session cookie a sign-in URL sets (``name=value``): ``url``, else a fresh one."""
    status, headers, _ = send(url or console.fresh_url())
    assert status == 303 and headers["location"] == "/", (status, headers)
    cookie = headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie, cookie
    return cookie.split(";", 1)[0]


def csrf_of(console: Console, cookie: str) -> str:
    status, _, html = send(console.base + "/subscribers", headers={"cookie": cookie})
    assert status == 200
    found = re.search(r'<meta name="csrf" content="([^"]+)">', html)
    assert found, "no CSRF token in the page"
    return found.group(1)


PAGES = (
    "/",
    "/subscribers",
    "/broadcasts",
    "/templates",
    "/sequences",
    "/topics",
    "/suppression",
    "/reputation",
    "/hygiene",
    "/outbox",
)


def test_without_the_token_every_page_answers_401_and_no_data(console: Console, local: Local) -> None:
    email = unique_email("console-secret")
    add_contact(local, email, first_name="Hidden")
    for path in (
        *PAGES,
        f"/subscribers/{quote(email)}",
        f"/subscribers?q={quote(email)}",
        "/api/broadcasts/x",
    ):
        status, _, body = send(console.base + path)
        assert status == 401, (path, status)
        assert email not in body and "Hidden" not in body, path
    # a wrong token or a forged cookie is no better
    assert send(console.base + "/?token=" + "x" * len(console.token))[0] == 401
    status, _, body = send(
        console.base + f"/subscribers/{quote(email)}", headers={"cookie": "mailstep_console=x"}
    )
    assert status == 401 and email not in body
    # with the cookie of the printed URL the same page shows the subscriber (the test above can fail)
    cookie = signed_in(console)
    status, headers, body = send(console.base + f"/subscribers/{quote(email)}", headers={"cookie": cookie})
    assert status == 200 and email in body and "Hidden" in body
    csp = headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert headers["x-frame-options"] == "DENY" and headers["cache-control"] == "no-store"


def test_a_foreign_host_header_is_refused(console: Console, local: Local) -> None:
    email = unique_email("console-rebind")
    add_contact(local, email)
    cookie = signed_in(console)
    for host in (f"evil.example:{console.port}", f"127.0.0.1.nip.io:{console.port}", "127.0.0.1:1"):
        status, _, body = send(
            console.base + f"/subscribers/{quote(email)}", headers={"host": host, "cookie": cookie}
        )
        assert status == 421 and email not in body, host
        # even the login URL does not set a cookie under another name
        status, headers, _ = send(console.url, headers={"host": host})
        assert status == 421 and "set-cookie" not in headers, host
    for host in (f"127.0.0.1:{console.port}", f"localhost:{console.port}"):
        assert send(console.base + "/subscribers", headers={"host": host, "cookie": cookie})[0] == 200


def test_a_change_without_the_csrf_token_is_refused_and_changes_nothing(
    console: Console, local: Local
) -> None:
    email = unique_email("console-csrf")
    add_contact(local, email, tags=["keep"])
    cookie = signed_in(console)
    token = csrf_of(console, cookie)
    # the page's forms carry it (what a browser posts)
    status, _, page = send(console.base + f"/subscribers/{quote(email)}", headers={"cookie": cookie})
    assert status == 200 and page.count(f'name="csrf" value="{token}"') >= 5
    before = item(local, f"SUB#{email}", "PROFILE")
    unsubscribe = console.base + f"/subscribers/{quote(email)}/unsubscribe"
    tags = console.base + f"/subscribers/{quote(email)}/tags"
    erase = console.base + f"/subscribers/{quote(email)}/erase"
    attempts = [
        (unsubscribe, "", {"cookie": cookie}),  # no token
        (unsubscribe, "csrf=" + "x" * len(token), {"cookie": cookie}),  # a wrong one
        (tags, "remove=keep", {"cookie": cookie}),
        (erase, f"confirm={quote(email)}", {"cookie": cookie, "x-csrf-token": "nope"}),
        # the right token from another origin (a page that learnt it cannot post from elsewhere)
        (unsubscribe, f"csrf={token}", {"cookie": cookie, "origin": "http://evil.example"}),
        # the right token without the session cookie
        (unsubscribe, f"csrf={token}", {}),
    ]
    for url, body, headers in attempts:
        status, _, answer = send(url, "POST", body, headers)
        assert status in (401, 403), (url, body, status)
        assert email not in answer
    assert item(local, f"SUB#{email}", "PROFILE") == before  # nothing changed
    # the same request with the token does change it (so the refusals above were the token's)
    status, headers, _ = send(unsubscribe, "POST", f"csrf={token}", {"cookie": cookie})
    assert status == 303, status
    assert item(local, f"SUB#{email}", "PROFILE")["status"]["S"] == "unsubscribed"  # type: ignore[index]


def test_a_sign_in_link_signs_in_once_and_the_cli_prints_a_fresh_one(console: Console, local: Local) -> None:
    cookie = signed_in(console, console.url)  # the printed link, used once
    status, headers, body = send(console.url)  # ... and again, from a browser not signed in
    assert status == 403 and "set-cookie" not in headers
    assert "used already" in body and "mailstep console token" in body
    # the browser it signed in stays signed in
    assert send(console.base + "/subscribers", headers={"cookie": cookie})[0] == 200

    result = local.cli("console", "token", "--state-dir", str(local.state_dir), "--port", str(console.port))
    assert result.returncode == 0, result.stderr
    found = URL.search(result.stdout)
    assert found and int(found.group(2)) == console.port and found.group(3) != console.token, result.stdout
    fresh = signed_in(console, found.group(1))
    assert fresh != cookie and send(console.base + "/subscribers", headers={"cookie": fresh})[0] == 200
    assert send(found.group(1))[0] == 403

    # `mailstep dev` runs a console from the same state folder: without --port it asks which
    result = local.cli("console", "token", "--state-dir", str(local.state_dir))
    assert result.returncode == 2 and "--port" in result.stderr and str(console.port) in result.stderr
    # the control file only its owner can read; without its key no fresh link
    control = local.state_dir / "consoles" / f"{console.port}.json"
    assert control.stat().st_mode & 0o777 == 0o600
    for headers in ({}, {"authorization": "Bearer " + "x" * 43}):
        status, _, body = send(console.base + "/_console/token", "POST", "", headers)
        assert status == 401 and "token=" not in body


def test_the_port_is_bound_to_127_0_0_1_only(console: Console) -> None:
    listening = _listening(console.port)
    assert listening == ["127.0.0.1"], listening
    # and the command has no option to bind elsewhere
    result = subprocess.run(
        [sys.executable, "-m", "cli.main", "console", "--help"],
        cwd=ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and "--port" in result.stdout
    assert "--host" not in result.stdout and "--bind" not in result.stdout


def _listening(port: int) -> list[str]:
    """The local addresses listening on TCP ``port`` (IPv4 and IPv6), from /proc/net."""
    found = []
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.append(_address(address, width))
    return found


def _address(hex_address: str, width: int) -> str:
    if width == 8:
        return ".".join(str(int(hex_address[i : i + 2], 16)) for i in (6, 4, 2, 0))
    return hex_address  # IPv6: shown raw (never expected here)
