"""Every listener of `mailstep dev` serves this machine's own pages only, as a hostile web page
in the developer's browser would meet them (docs/local-runtime.md, "Who may reach the local
runtime"):

- the AWS endpoint answers no CORS: a preflight from another origin is refused with no
  ``Access-Control-*`` header, and Secrets Manager's ListSecrets sent with a foreign ``Origin``
  or a foreign ``Host`` (DNS rebinding) is refused with none of the secrets, while the same
  request from this machine (no Origin, a loopback Host) lists them, and boto3 still works;
- the HTTP API and the public https front refuse a foreign ``Host`` before any function runs,
  and their ``/_local/`` control endpoints take no cross-origin request;
- the API answers CORS as API Gateway would, for the template's configured origins only;
- ``runtime.json`` (the API key) and the TLS key are readable by their owner only (0600).
"""

from __future__ import annotations

import copy
import http.client
import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.e2e.conftest import Local, dev_runtime

EVIL = "https://evil.example"
ALLOWED = "https://www.acme.test"
# what a page would send: the SDK's header shape (moto routes by the credential scope's service)
SIGNED = (
    "AWS4-HMAC-SHA256 Credential=e2e/20260101/us-east-1/secretsmanager/aws4_request, "
    "SignedHeaders=host, Signature=0"
)
LIST_SECRETS = {
    "x-amz-target": "secretsmanager.ListSecrets",
    "content-type": "application/x-amz-json-1.1",
    "authorization": SIGNED,
}


def send(
    base: str,
    method: str,
    path: str,
    headers: dict[str, str],
    body: bytes | None = None,
    context: ssl.SSLContext | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One request with exactly these headers (``Host`` too, when given): status, headers, body."""
    url = urlsplit(base)
    assert url.hostname is not None and url.port is not None
    connection = (
        http.client.HTTPSConnection(url.hostname, url.port, timeout=30, context=context)
        if url.scheme == "https"
        else http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    )
    try:
        connection.request(method, path, body=body, headers=headers)
        answer = connection.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        connection.close()


def cors_headers(headers: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.startswith("access-control-")}


def test_the_aws_endpoint_answers_no_cross_origin_request_and_no_foreign_host(local: Local) -> None:
    endpoint = local.state["endpoint"]
    port = urlsplit(endpoint).port
    # this machine's own request lists the secrets (so the refusals below hide them)
    status, _, body = send(endpoint, "POST", "/", LIST_SECRETS, b"{}")
    names = [s["Name"] for s in json.loads(body)["SecretList"]]
    assert status == 200 and names, body[:300]
    assert send(endpoint, "POST", "/", {**LIST_SECRETS, "host": f"localhost:{port}"}, b"{}")[0] == 200

    preflight = {
        "origin": EVIL,
        "access-control-request-method": "POST",
        "access-control-request-headers": "x-amz-target,authorization,content-type",
    }
    for path in ("/", "/moto-api/reset"):
        status, headers, _ = send(endpoint, "OPTIONS", path, preflight)
        assert status == 403 and cors_headers(headers) == {}, (path, status, headers)

    refused = [
        ({**LIST_SECRETS, "origin": EVIL}, 403),
        ({**LIST_SECRETS, "origin": "null"}, 403),
        ({**LIST_SECRETS, "origin": f"http://localhost:{port + 1}"}, 403),  # another local page
        ({**LIST_SECRETS, "host": "evil.example"}, 421),  # DNS rebinding: the page's own name
        ({**LIST_SECRETS, "host": f"evil.example:{port}"}, 421),
        ({**LIST_SECRETS, "host": f"127.0.0.1.nip.io:{port}"}, 421),
    ]
    for headers, expected in refused:
        status, answered, body = send(endpoint, "POST", "/", headers, b"{}")
        assert status == expected and cors_headers(answered) == {}, (headers, status, answered)
        assert not any(name.encode() in body for name in names) and b"SecretList" not in body
    # the SDK's calls from this machine go on (the rest of the suite makes thousands)
    listed = local.client("secretsmanager").list_secrets()["SecretList"]
    assert sorted(s["Name"] for s in listed) == sorted(names)


def test_the_http_api_and_the_public_front_refuse_a_foreign_host(local: Local) -> None:
    event = json.dumps({"type": "subscriber.subscribed", "email": "rebind@example.com"}).encode()
    api = {"authorization": f"Bearer {local.api_key}", "content-type": "application/json"}
    before = local.status()["http"]["requests"]
    for base, context in ((local.api_url, None), (local.public_url, local.ssl_context())):
        for host in ("evil.example", f"evil.example:{urlsplit(base).port}", "127.0.0.1:1"):
            status, _, body = send(base, "POST", "/v1/events", {**api, "host": host}, event, context)
            assert status == 421 and b"message_id" not in body, (base, host, status, body)
            status, _, body = send(base, "GET", "/_local/status", {"host": host}, None, context)
            assert status == 421 and b"clock" not in body, (base, host, status)
    # none reached the API's routes (the function never ran)
    assert local.status()["http"]["requests"] == before
    # a loopback Host, with or without the port, is this machine
    for base, context in ((local.api_url, None), (local.public_url, local.ssl_context())):
        port = urlsplit(base).port
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"[::1]:{port}"):
            status, _, body = send(base, "GET", "/_local/status", {"host": host}, None, context)
            assert status == 200 and b"clock" in body, (base, host, status)


def test_the_control_endpoints_take_no_cross_origin_request(local: Local) -> None:
    quota = json.dumps({"max_send_rate": 1000}).encode()
    port = urlsplit(local.api_url).port
    for origin in (EVIL, "null", f"http://localhost:{port + 1}"):
        status, headers, _ = send(local.api_url, "POST", "/_local/ses", {"origin": origin}, quota)
        assert status == 403 and cors_headers(headers) == {}, (origin, status)
        preflight = {"origin": origin, "access-control-request-method": "POST"}
        assert send(local.api_url, "OPTIONS", "/_local/clock", preflight)[0] == 403
    # its own origin (and no Origin at all, the CLI) is this machine
    status, _, body = send(
        local.api_url, "POST", "/_local/ses", {"origin": f"http://127.0.0.1:{port}"}, quota
    )
    assert status == 200 and json.loads(body)["MaxSendRate"] == 1000


def test_the_api_without_a_cors_configuration_answers_no_cors(local: Local) -> None:
    """The session runtime's template configures no origin: nothing is allowed cross-origin."""
    preflight = {"origin": EVIL, "access-control-request-method": "POST"}
    status, headers, _ = send(local.api_url, "OPTIONS", "/v1/signup", preflight)
    assert status == 404 and cors_headers(headers) == {}
    status, headers, _ = send(local.api_url, "POST", "/v1/events", {"origin": EVIL}, b"{}")
    assert status == 401 and cors_headers(headers) == {}


@pytest.fixture(scope="module")
def cors_runtime(artifact: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Local]:
    """A runtime of the synthesized template whose HTTP API allows one origin (as
    mailstep:signupAllowedOrigins makes it), started over a stale ``.runtime.json.partial`` that
    anyone could read (a crash's leftover)."""
    template = copy.deepcopy(artifact.template)
    (api,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::ApiGatewayV2::Api"]
    api["Properties"]["CorsConfiguration"] = {
        "AllowOrigins": [ALLOWED],
        "AllowMethods": ["POST"],
        "AllowHeaders": ["content-type"],
        "MaxAge": 3600,
    }
    state_dir = tmp_path_factory.mktemp("mailstep-cors")
    (state_dir / "template.json").write_text(json.dumps(template))
    stale = state_dir / ".runtime.json.partial"
    stale.write_text("{}")
    stale.chmod(0o644)
    with dev_runtime(state_dir, "--template", str(state_dir / "template.json")) as local:
        yield local


def test_the_api_answers_cors_for_its_configured_origins_only(cors_runtime: Local) -> None:
    local = cors_runtime
    preflight = {"access-control-request-method": "POST", "access-control-request-headers": "content-type"}
    status, headers, _ = send(local.api_url, "OPTIONS", "/v1/signup", {**preflight, "origin": ALLOWED})
    assert status == 204 and headers["access-control-allow-origin"] == ALLOWED
    assert headers["access-control-allow-methods"] == "POST" and headers["access-control-max-age"] == "3600"
    for origin in (EVIL, "https://www.acme.test.evil.example", "http://www.acme.test", "null"):
        status, headers, _ = send(local.api_url, "OPTIONS", "/v1/signup", {**preflight, "origin": origin})
        assert status == 204 and cors_headers(headers) == {}, (origin, headers)
        status, headers, _ = send(local.api_url, "POST", "/v1/events", {"origin": origin}, b"{}")
        assert status == 401 and cors_headers(headers) == {}, (origin, headers)
    status, headers, _ = send(
        local.public_url, "POST", "/v1/events", {"origin": ALLOWED}, b"{}", local.ssl_context()
    )
    assert status == 401 and headers["access-control-allow-origin"] == ALLOWED


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_runtime_json_and_the_tls_key_are_their_owner_s_only(local: Local, cors_runtime: Local) -> None:
    for runtime in (local, cors_runtime):
        assert mode(runtime.state_dir / "runtime.json") == 0o600
        assert json.loads((runtime.state_dir / "runtime.json").read_text())["api_key"] == runtime.api_key
        assert mode(Path(runtime.state["tls_cert"]).with_name("key.pem")) == 0o600
    assert not (cors_runtime.state_dir / ".runtime.json.partial").exists()  # the stale one replaced
