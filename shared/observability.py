"""Logger, metrics and tracer are created once, here, and imported everywhere."""

from __future__ import annotations

import hashlib

from aws_lambda_powertools import Logger, Metrics, Tracer

SERVICE = "mailstep"
NAMESPACE = "Mailstep"

logger = Logger(service=SERVICE)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)
tracer = Tracer(service=SERVICE, disabled=True)


def redact_email(email: str) -> str:
    """A stable, non-reversible handle for an address, safe to log."""
    return "sub_" + hashlib.sha256(email.encode()).hexdigest()[:12]
