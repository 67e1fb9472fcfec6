"""The local runtime's endpoint keeps connections open (``local_aws.hooks.KeepAliveRequestHandler``).

werkzeug's development server closes the connection after every answer; the runtime's handler
answers over HTTP/1.1 with the body's length and keeps the connection for the next request.

- an SDK client's requests (DynamoDB on moto's application) all travel over one connection, and
  answer what moto answers: a large item, a missing table's error;
- a request body is handed to the application whole; a HEAD answer has the length and no body;
- an application that fails answers 500 and closes the connection; a chunked request body is
  left to werkzeug's own handling, which closes it too.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import make_server

from local_aws.hooks import KeepAliveRequestHandler


def _serve(app: Any) -> Iterator[int]:
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=KeepAliveRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        thread.join(timeout=5)


CLIENT_PORTS: list[str] = []  # the client's end of each request's connection


@pytest.fixture
def moto_port() -> Iterator[int]:
    moto_app = DomainDispatcherApplication(create_backend_app)

    def noted(environ: dict[str, Any], start_response: Any) -> Any:
        CLIENT_PORTS.append(environ["REMOTE_PORT"])
        return moto_app(environ, start_response)

    CLIENT_PORTS.clear()
    yield from _serve(noted)


def test_an_sdk_client_s_requests_share_one_connection_and_answer_as_moto_does(moto_port: int) -> None:
    client = boto3.client(
        "dynamodb",
        endpoint_url=f"http://127.0.0.1:{moto_port}",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",  # noqa: S106 - moto's fake credentials
    )
    client.create_table(
        TableName="kept",
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    large = "x" * 300_000
    for i in range(20):
        client.put_item(TableName="kept", Item={"PK": {"S": f"k{i}"}, "v": {"S": large}})
    got = client.get_item(TableName="kept", Key={"PK": {"S": "k7"}})["Item"]["v"]["S"]
    assert got == large
    with pytest.raises(ClientError) as missing:
        client.get_item(TableName="absent", Key={"PK": {"S": "k"}})
    assert missing.value.response["Error"]["Code"] == "ResourceNotFoundException"
    pages = client.get_paginator("scan").paginate(TableName="kept", Select="COUNT")
    assert sum(page["Count"] for page in pages) == 20  # pages of 1 MB: 3 items each, 7 pages
    assert len(CLIENT_PORTS) == 30 and len(set(CLIENT_PORTS)) == 1  # 30 requests, one connection


def _echo(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    if environ["PATH_INFO"] == "/fail":
        raise RuntimeError("the application failed")
    body = environ["wsgi.input"].read()
    answer = f"{environ['REQUEST_METHOD']} {environ['REMOTE_PORT']} {len(body)} ".encode() + body[:10]
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [answer]


@pytest.fixture
def echo_port() -> Iterator[int]:
    yield from _serve(_echo)


def test_bodies_heads_failures_and_chunked_bodies(echo_port: int) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", echo_port, timeout=10)
    answers = []
    for body in (b"first body", b"", b"y" * 100_000):
        connection.request("POST", "/echo", body=body)
        response = connection.getresponse()
        assert response.status == 200 and response.getheader("Connection") is None
        answers.append(response.read().decode())
    assert [a.split()[0] for a in answers] == ["POST"] * 3
    assert [int(a.split()[2]) for a in answers] == [10, 0, 100_000]
    assert answers[0].endswith("first body")
    assert len({a.split()[1] for a in answers}) == 1  # one connection for the three

    connection.request("HEAD", "/echo")
    head = connection.getresponse()
    assert head.status == 200 and int(head.getheader("Content-Length")) > 0 and head.read() == b""

    connection.request("GET", "/fail")
    failed = connection.getresponse()
    assert failed.status == 500 and failed.getheader("Connection") == "close"
    failed.read()
    connection.close()

    chunked = http.client.HTTPConnection("127.0.0.1", echo_port, timeout=10)
    chunked.request("POST", "/echo", body=iter([b"abc", b"defg"]), encode_chunked=True)
    response = chunked.getresponse()
    assert response.status == 200 and response.getheader("Connection") == "close"
    assert response.read().decode().split()[2] == "7"
    chunked.close()
