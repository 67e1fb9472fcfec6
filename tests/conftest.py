"""Shared fixtures: one in-process moto for the session, cleaned between tests."""

from __future__ import annotations

import os

os.environ.setdefault("TZ", "UTC")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "Mailstep")
os.environ.setdefault("POWERTOOLS_DEV", "false")
