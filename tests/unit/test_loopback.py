"""The one rule of every local listener (``ops.loopback``): which ``Host`` and ``Origin`` headers
are this machine, and secret files written 0600 whatever was there before."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ops.loopback import loopback_host, own_origin, write_private

PORT = 4566


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "127.0.0.1:4566", "localhost", "LOCALHOST:4566", "[::1]", "[::1]:4566"]
)
def test_loopback_with_or_without_the_listener_s_port_is_this_machine(host: str) -> None:
    assert loopback_host(host, PORT)


@pytest.mark.parametrize(
    "host",
    [
        None,
        "",
        "evil.example",
        "evil.example:4566",
        "127.0.0.1:4567",  # another listener's port
        "127.0.0.1.nip.io:4566",  # a public name that resolves to 127.0.0.1 (DNS rebinding)
        "localhost.:4566",
        "127.0.0.2:4566",
        "0.0.0.0:4566",
        "::1",
        "127.0.0.1:4566 ",
        "user@127.0.0.1:4566",
    ],
)
def test_any_other_host_is_not(host: str | None) -> None:
    assert not loopback_host(host, PORT)


def test_the_own_origin_is_the_scheme_a_loopback_name_and_the_port() -> None:
    assert own_origin("http://127.0.0.1:4566", "http", PORT)
    assert own_origin("http://localhost:4566", "http", PORT)
    assert own_origin("https://[::1]", "https", 443)  # the default port: browsers leave it out
    for origin in (None, "null", "https://127.0.0.1:4566", "http://127.0.0.1:4567", "http://evil.example"):
        assert not own_origin(origin, "http", PORT), origin


def test_a_private_file_is_0600_even_over_a_wider_file_and_a_stale_partial(tmp_path: Path) -> None:
    path = tmp_path / "runtime.json"
    path.write_text("old")
    path.chmod(0o644)
    stale = tmp_path / ".runtime.json.partial"
    stale.write_text("half")
    stale.chmod(0o666)
    previous = os.umask(0)  # even a permissive umask
    try:
        write_private(path, b"{}")
    finally:
        os.umask(previous)
    assert path.read_bytes() == b"{}" and path.stat().st_mode & 0o777 == 0o600
    assert not stale.exists()
