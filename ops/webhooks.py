"""Webhook endpoints for the operator: ``mailstep webhooks ...``, the MCP tools and doctor.

add (URL checked by the SSRF guard, events checked against the catalog, the secret created in
Secrets Manager and shown once), list, remove, enable, test (a ``webhook.test`` delivery to one
endpoint), deliveries (``--failed``: the dead letters), replay (failed deliveries since a time,
queued again under their own ``webhook-id``) and rotate (a new secret; the previous one keeps
signing for 24 hours). Everything goes through ``shared.webhooks``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta

from ops.targets import LOCAL, Target
from shared.core import clock
from shared.core.errors import FieldProblem, InvalidInput
from shared.webhooks import signing, ssrf
from shared.webhooks.delivery import ROTATION_OVERLAP_S, DeliveryQueue
from shared.webhooks.dispatch import DispatchContext, deliver
from shared.webhooks.events import WebhookEvent, event_id, parse_filters
from shared.webhooks.store import (
    DISABLED,
    ENABLED,
    FAILED,
    MAX_DESCRIPTION,
    Delivery,
    Endpoint,
    EndpointSecrets,
    WebhookStore,
    check_endpoint_id,
    new_endpoint_id,
    secret_name_prefix,
)

TEST_EVENT = "webhook.test"
MAX_LISTED = 500


@dataclass(frozen=True)
class Added:
    endpoint: Endpoint
    secret: str  # shown once


@dataclass
class Webhooks:
    """The webhook operations of one target."""

    store: WebhookStore
    queue: DeliveryQueue
    table_name: str
    data_ttl_days: int
    allow_loopback_http: bool = False
    resolver: ssrf.Resolver | None = None

    @classmethod
    def for_target(cls, target: Target) -> Webhooks:
        settings = target.settings
        if not settings.webhook_queue_url:
            raise InvalidInput(
                "this deployment has no webhook queue: deploy the current version (cdk deploy)"
            )
        return cls(
            store=WebhookStore(
                settings.table_name,
                client=target.client("dynamodb"),
                secrets_client=target.client("secretsmanager"),
            ),
            queue=DeliveryQueue(settings.webhook_queue_url, client=target.client("sqs")),
            table_name=settings.table_name,
            data_ttl_days=settings.data_ttl_days,
            # the local runtime delivers to http receivers on loopback (its template says so too)
            allow_loopback_http=target.kind == LOCAL,
        )

    # ----- endpoints ----------------------------------------------------------------------
    def add(self, url: str, events: str | list[str], description: str = "") -> Added:
        """Check everything first, then write: the secret, then the endpoint."""
        try:
            ssrf.resolve(url, allow_loopback_http=self.allow_loopback_http, resolver=self.resolver)
        except ssrf.UnsafeUrl as exc:
            raise InvalidInput(str(exc), [FieldProblem("url", str(exc).removeprefix("url: "))]) from None
        filters = parse_filters(events)
        if len(description) > MAX_DESCRIPTION or any(ord(ch) < 32 for ch in description):
            problem = FieldProblem("description", f"at most {MAX_DESCRIPTION} printable characters")
            raise InvalidInput(f"description: {problem.message}", [problem])
        endpoint_id = new_endpoint_id()
        secret = signing.new_secret()
        endpoint = Endpoint(
            id=endpoint_id,
            url=url,
            events=filters,
            description=description,
            secret_name=secret_name_prefix(self.table_name) + endpoint_id,
            created_at=clock.iso(),
        )
        self.store.create_secret(endpoint.secret_name, EndpointSecrets(current=secret))
        try:
            self.store.put_endpoint(endpoint)
        except Exception:
            self.store.delete_secret(endpoint.secret_name)  # nothing half-written
            raise
        return Added(endpoint=endpoint, secret=secret)

    def endpoints(self) -> list[Endpoint]:
        return sorted(self.store.endpoints(consistent=True), key=lambda e: e.created_at)

    def get(self, endpoint_id: str) -> Endpoint:
        return self.store.get_endpoint(check_endpoint_id(endpoint_id))

    def remove(self, endpoint_id: str) -> Endpoint:
        """The secret first, then the endpoint: a failure in between leaves the endpoint listed,
        and running ``remove`` again finishes it (no secret is left behind unlisted)."""
        endpoint = self.get(endpoint_id)
        self.store.delete_secret(endpoint.secret_name)
        self.store.delete_endpoint(endpoint.id)
        return endpoint

    def enable(self, endpoint_id: str) -> Endpoint:
        endpoint = self.get(endpoint_id)
        self.store.update_endpoint(
            endpoint.id, status=ENABLED, disabled_reason=None, disabled_at=None, failing_since=None
        )
        return self.get(endpoint.id)

    def rotate(self, endpoint_id: str) -> Added:
        """A new secret; the previous one signs too for ``ROTATION_OVERLAP_S`` (24 hours)."""
        endpoint = self.get(endpoint_id)
        current = self.store.read_secret(endpoint.secret_name, fresh=True)
        secret = signing.new_secret()
        until = clock.iso(clock.utc_now() + timedelta(seconds=ROTATION_OVERLAP_S))
        self.store.put_secret(
            endpoint.secret_name,
            EndpointSecrets(current=secret, previous=current.current, previous_until=until),
        )
        self.store.update_endpoint(endpoint.id, secret_version=endpoint.secret_version + 1)
        return Added(endpoint=self.get(endpoint.id), secret=secret)

    # ----- deliveries ---------------------------------------------------------------------
    def test(self, endpoint_id: str) -> str:
        """Queue a ``webhook.test`` event to this endpoint (whatever its filters); its message id."""
        endpoint = self.get(endpoint_id)
        if endpoint.status == DISABLED:
            raise InvalidInput(
                f"endpoint {endpoint.id} is disabled: `mailstep webhooks enable {endpoint.id}` first"
            )
        moment = clock.iso()
        event = WebhookEvent(
            id=event_id(uuid.uuid4().hex, TEST_EVENT),
            type=TEST_EVENT,
            timestamp=moment,
            data={"endpoint_id": endpoint.id, "description": "a test event from mailstep webhooks test"},
        )
        deliver(
            event,
            endpoint,
            DispatchContext(store=self.store, queue=self.queue, data_ttl_days=self.data_ttl_days),
        )
        return event.id

    def deliveries(self, endpoint_id: str, *, failed: bool = False, limit: int = 50) -> list[Delivery]:
        endpoint = self.get(endpoint_id)
        limit = max(1, min(MAX_LISTED, limit))
        return list(self.store.deliveries(endpoint.id, status=FAILED if failed else None, limit=limit))

    def replay(self, endpoint_id: str, since: str) -> list[str]:
        """Queue again every failed delivery of the endpoint from ``since`` (ISO time): the same
        body and ``webhook-id``, one more attempt each. Returns their message ids."""
        endpoint = self.get(endpoint_id)
        if endpoint.status == DISABLED:
            raise InvalidInput(
                f"endpoint {endpoint.id} is disabled: `mailstep webhooks enable {endpoint.id}` first"
            )
        try:
            start = clock.iso(clock.parse_iso(since))
        except ValueError:
            raise InvalidInput(
                "since: not an ISO 8601 time", [FieldProblem("since", "an ISO 8601 time")]
            ) from None
        replayed = []
        for delivery in self.store.deliveries(endpoint.id, since=start, status=FAILED, limit=10_000):
            attempts = self.store.reopen(endpoint.id, delivery.sk)
            self.queue.schedule(endpoint.id, delivery.sk, attempts + 1, 0)
            replayed.append(delivery.message_id)
        return replayed
