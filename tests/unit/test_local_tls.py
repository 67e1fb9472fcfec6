"""The local runtime's self-signed certificate: what it covers, when it is reused, and that a
client trusting it (and only it) completes a verified handshake for 127.0.0.1 and localhost."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509

from local_aws.tls import VALID_DAYS, client_context, ensure_certificate, server_context

NOW = datetime(2026, 1, 10, tzinfo=UTC)


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_the_certificate_covers_loopback_for_server_auth_and_the_key_is_private(tmp_path: Path) -> None:
    files = ensure_certificate(tmp_path / "tls", now=NOW)
    cert = _cert(files.cert)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert names.get_values_for_type(x509.DNSName) == ["localhost"]
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    assert cert.not_valid_after_utc == NOW + timedelta(days=VALID_DAYS)
    assert files.key.stat().st_mode & 0o077 == 0


def test_a_valid_pair_is_reused_and_one_about_to_expire_or_broken_is_replaced(tmp_path: Path) -> None:
    directory = tmp_path / "tls"
    first = ensure_certificate(directory, now=NOW)
    serial = _cert(first.cert).serial_number
    assert _cert(ensure_certificate(directory, now=NOW + timedelta(days=30)).cert).serial_number == serial

    renewed = ensure_certificate(directory, now=NOW + timedelta(days=VALID_DAYS - 3))
    assert _cert(renewed.cert).serial_number != serial

    serial = _cert(renewed.cert).serial_number
    renewed.key.write_bytes(b"not a key")
    repaired = ensure_certificate(directory, now=NOW + timedelta(days=VALID_DAYS - 3))
    assert _cert(repaired.cert).serial_number != serial
    server_context(repaired)  # the new key matches the new certificate


def test_a_key_others_could_read_is_made_private(tmp_path: Path) -> None:
    files = ensure_certificate(tmp_path / "tls", now=NOW)
    files.key.chmod(0o644)  # e.g. copied, or written by an older version over a wider file
    ensure_certificate(tmp_path / "tls", now=NOW)  # reused ...
    assert files.key.stat().st_mode & 0o777 == 0o600  # ... and its owner's only


@contextlib.contextmanager
def _connected(serve: Callable[[socket.socket], None]) -> Iterator[socket.socket]:
    """A client's plain TCP connection to a loopback server that hands its one accepted
    connection to ``serve`` (in a thread, joined on the way out)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        thread = threading.Thread(target=lambda: serve(listener.accept()[0]), daemon=True)
        thread.start()
        with socket.create_connection(listener.getsockname(), timeout=5) as raw:
            yield raw
        thread.join(5)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_client_trusting_the_certificate_verifies_the_handshake(tmp_path: Path, host: str) -> None:
    files = ensure_certificate(tmp_path / "tls")
    server = server_context(files)

    def serve(conn: socket.socket) -> None:
        with server.wrap_socket(conn, server_side=True) as tls:
            tls.sendall(b"ok")

    with _connected(serve) as raw, client_context(files.cert).wrap_socket(raw, server_hostname=host) as tls:
        assert tls.recv(2) == b"ok"


def test_a_client_without_the_certificate_refuses_the_server(tmp_path: Path) -> None:
    files = ensure_certificate(tmp_path / "tls")
    other = ensure_certificate(tmp_path / "other")  # a different self-signed certificate
    server = server_context(files)

    def serve(conn: socket.socket) -> None:
        with conn, contextlib.suppress(ssl.SSLError, OSError):
            server.wrap_socket(conn, server_side=True)  # the client aborts the handshake

    with _connected(serve) as raw, pytest.raises(ssl.SSLCertVerificationError):
        client_context(other.cert).wrap_socket(raw, server_hostname="127.0.0.1")
