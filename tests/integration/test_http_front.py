"""The local HTTP front on its real server, with a stub in place of the Lambdas: many clients at
once, chunked request bodies, API Gateway's routing answers, and TLS handshakes that cannot
hold up other clients. Every wait has a deadline."""

from __future__ import annotations

import http.client
import json
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from local_aws.http_front import HttpFront
from local_aws.tls import client_context, ensure_certificate, server_context
from shared.core.specs import FunctionSpec, RouteSpec

FUNCTION = FunctionSpec(name="stub", handler="stub.handler", description="stub")
ROUTES = [
    (RouteSpec("POST", "/v1/events"), FUNCTION),
    (RouteSpec("GET", "/u/{token}"), FUNCTION),
    (RouteSpec("POST", "/u/{token}/resubscribe"), FUNCTION),
]
DEADLINE_S = 30.0


class Stub:
    """Records each event; answers with the token and body it saw."""

    def __init__(self, barrier: threading.Barrier | None = None) -> None:
        self.events: list[dict[str, Any]] = []
        self.barrier = barrier

    def __call__(self, function: FunctionSpec, event: dict[str, Any]) -> tuple[Any, bool]:
        self.events.append(event)
        if self.barrier is not None:
            self.barrier.wait()  # every client is being served at the same time
        token = (event.get("pathParameters") or {}).get("token")
        return {
            "statusCode": 200,
            "headers": {"content-type": "application/json"},
            "body": json.dumps(token),
        }, False


def control(method: str, path: str, body: bytes) -> tuple[int, Any]:
    return (200, {"method": method, "body": body.decode()}) if path == "/_local/status" else (404, {})


def serving(stub: Stub, **options: Any) -> Iterator[HttpFront]:
    front = HttpFront(ROUTES, stub, control=control, **options)
    front.start()
    try:
        yield front
    finally:
        front.stop()


def request(front: HttpFront, method: str, path: str, body: Any = None, **kwargs: Any) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", front.port, timeout=DEADLINE_S)
    try:
        connection.request(method, path, body=body, **kwargs)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_two_hundred_clients_at_once_are_all_served_together() -> None:
    clients = 200
    stub = Stub(threading.Barrier(clients, timeout=DEADLINE_S))
    gate = threading.Barrier(clients, timeout=DEADLINE_S)
    answers: dict[int, tuple[int, bytes] | BaseException] = {}

    def client(number: int, front: HttpFront) -> None:
        try:
            gate.wait()  # connect together: the listen backlog takes the burst
            answers[number] = request(front, "GET", f"/u/t{number}")
        except BaseException as exc:  # noqa: BLE001 - reported below, per client
            answers[number] = exc

    for front in serving(stub):
        threads = [threading.Thread(target=client, args=(n, front), daemon=True) for n in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(DEADLINE_S)

    failures = Counter(repr(a)[:60] for n, a in answers.items() if a != (200, json.dumps(f"t{n}").encode()))
    assert len(answers) == clients and not failures, f"{len(answers)} answers; failures: {failures}"
    assert len(stub.events) == clients


def test_a_chunked_request_body_reaches_the_function_whole() -> None:
    stub = Stub()
    chunks = [b'{"email": "ada@', b"example.com", b'", "event": "signup"}']
    for front in serving(stub):
        status, _ = request(
            front, "POST", "/v1/events", body=iter(chunks), headers={"Content-Type": "application/json"}
        )
    assert status == 200
    (event,) = stub.events
    assert event["headers"]["transfer-encoding"] == "chunked"
    assert json.loads(event["body"]) == {"email": "ada@example.com", "event": "signup"}


def test_routing_answers_like_api_gateway() -> None:
    stub = Stub()
    for front in serving(stub):
        assert request(front, "GET", "/u/a%2Fb?x=1&x=2") == (200, b'"a%2Fb"')
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        assert request(front, "POST", "/u/tok/resubscribe", body=b"a=b", headers=form) == (200, b'"tok"')
        for method, path in [("GET", "/v1/events"), ("HEAD", "/u/tok"), ("GET", "/nope"), ("GET", "/u/tok/")]:
            status, body = request(front, method, path)
            assert status == 404, (method, path)
            assert body == (b"" if method == "HEAD" else b'{"message":"Not Found"}')
        assert request(front, "POST", "/_local/status", body=b"{}") == (
            200,
            b'{"method": "POST", "body": "{}"}',
        )
    first, second = stub.events
    assert (first["routeKey"], first["rawPath"], first["rawQueryString"]) == (
        "GET /u/{token}",
        "/u/a%2Fb",
        "x=1&x=2",
    )
    assert first["queryStringParameters"] == {"x": "1,2"}
    assert (second["routeKey"], second["body"]) == ("POST /u/{token}/resubscribe", "a=b")


@pytest.mark.parametrize("stalled_bytes", [b"", b"GET / HTTP/1.1\r\n\r\n"], ids=["silent", "plain-http"])
def test_a_client_that_stalls_or_fails_the_tls_handshake_holds_up_no_one(
    tmp_path: Path, stalled_bytes: bytes
) -> None:
    files = ensure_certificate(tmp_path / "tls")
    stub = Stub()
    for front in serving(stub, ssl_context=server_context(files)):
        with socket.create_connection(("127.0.0.1", front.port), timeout=DEADLINE_S) as stalled:
            stalled.sendall(stalled_bytes)
            connection = http.client.HTTPSConnection(
                "127.0.0.1", front.port, timeout=5, context=client_context(files.cert)
            )
            try:
                connection.request("GET", "/u/tok")
                response = connection.getresponse()
                assert (response.status, response.read()) == (200, b'"tok"')
            finally:
                connection.close()
