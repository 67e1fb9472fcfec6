"""Logger and metrics are created once, here, and imported everywhere.

No Powertools Tracer: it imports ``aws_xray_sdk``, which the Lambda asset does not ship
(docs/configuration.md, "Tracing").
"""

from __future__ import annotations

import hashlib

from aws_lambda_powertools import Logger, Metrics

SERVICE = "mailstep"
NAMESPACE = "Mailstep"

logger = Logger(service=SERVICE)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)


def redact_email(email: str) -> str:
    """A stable, non-reversible handle for an address, safe to log."""
    return "sub_" + hashlib.sha256(email.encode()).hexdigest()[:12]
