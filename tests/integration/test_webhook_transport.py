"""One webhook POST against real sockets on loopback: answers, Retry-After, no redirects, the
whole-exchange timeout, and the connected address checked again."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from email.utils import format_datetime

import pytest

from shared.core import clock
from shared.webhooks import ssrf, transport


def serve(answer: bytes, trickle_s: float = 0.0) -> Iterator[int]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(5)
    port = listener.getsockname()[1]

    def run() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                try:
                    if trickle_s:
                        for byte in answer:
                            conn.sendall(bytes([byte]))
                            time.sleep(trickle_s)
                    else:
                        conn.sendall(answer)
                except OSError:
                    continue

    threading.Thread(target=run, daemon=True).start()
    yield port
    listener.close()


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[int]:
    yield from serve(*request.param)


def target(port: int) -> ssrf.Target:
    return ssrf.resolve(f"http://127.0.0.1:{port}/hook", allow_loopback_http=True)


def post(port: int, timeout_s: float = transport.TIMEOUT_S) -> transport.Answer:
    return transport.post(
        target(port), {"webhook-id": "msg_1"}, "{}", timeout_s=timeout_s, allow_loopback_http=True
    )


@pytest.mark.parametrize(
    ("server", "status"),
    [
        ((b"HTTP/1.1 204 No Content\r\n\r\n",), 204),
        ((b"HTTP/1.1 302 Found\r\nLocation: http://169.254.169.254/\r\nContent-Length: 0\r\n\r\n",), 302),
        ((b"HTTP/1.1 410 Gone\r\nContent-Length: 0\r\n\r\n",), 410),
    ],
    indirect=["server"],
)
def test_the_status_is_the_answer_and_a_redirect_is_not_followed(server: int, status: int) -> None:
    assert post(server).status == status


@pytest.mark.parametrize(
    "server", [(b"HTTP/1.1 429 Too Many\r\nRetry-After: 120\r\nContent-Length: 0\r\n\r\n",)], indirect=True
)
def test_retry_after_seconds(server: int) -> None:
    answer = post(server)
    assert (answer.status, answer.retry_after_s) == (429, 120.0)


def test_retry_after_http_date() -> None:
    later = format_datetime(clock.utc_now().replace(microsecond=0) + timedelta(seconds=90), usegmt=True)
    assert 80 <= (transport.retry_after(later) or 0) <= 90
    assert transport.retry_after("soon") is None


@pytest.mark.parametrize("server", [(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 0.2)], indirect=True)
def test_a_trickling_answer_is_cut_off_at_the_deadline(server: int) -> None:
    started = time.monotonic()
    answer = post(server, timeout_s=1.0)
    assert answer.status is None and answer.error == "timeout"
    assert time.monotonic() - started < 3


def test_a_refused_connection_is_an_error_not_an_exception() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    answer = post(port)
    assert answer.status is None and (answer.error or "").startswith("connection")


def test_the_connected_address_is_checked_again() -> None:
    # loopback is allowed only in the local runtime's mode: deployed, the peer check refuses it
    for port in serve(b"HTTP/1.1 200 OK\r\n\r\n"):
        deployed = transport.post(target(port), {}, "{}", allow_loopback_http=False)
        assert deployed.status is None and "loopback" in (deployed.error or "")


def test_a_body_trickled_after_quick_headers_is_cut_off_at_the_deadline_not_per_read() -> None:
    # each byte comes well within the socket's per-read timeout; the whole answer would take 20 s
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def run() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(head)
            for _ in range(100):
                try:
                    conn.sendall(b"x")
                except OSError:  # the client hung up at its deadline
                    return
                time.sleep(0.2)

    threading.Thread(target=run, daemon=True).start()
    started = time.monotonic()
    answer = post(listener.getsockname()[1], timeout_s=1.0)
    listener.close()
    assert answer.status is None and answer.error == "timeout"
    assert time.monotonic() - started < 2.5


def test_connecting_takes_at_most_the_connect_timeout() -> None:
    # a listener whose accept queue is full and never accepted: a new connection's SYN is dropped
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", port))
        fillers.append(filler)
    time.sleep(0.2)
    started = time.monotonic()
    answer = post(port, timeout_s=transport.TIMEOUT_S)
    elapsed = time.monotonic() - started
    for sock in (*fillers, listener):
        sock.close()
    assert answer.status is None and answer.error in ("timeout", "connection: TimeoutError")
    assert transport.CONNECT_TIMEOUT_S - 0.5 <= elapsed < transport.CONNECT_TIMEOUT_S + 2
