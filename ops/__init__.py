"""Operator logic for the CLI and the MCP server: stack targets, subscriber admin, topics
and pending sign-ups, CSV import/export, doctor checks and broadcast operations.

Not part of the Lambda asset. Imports ``shared``; never ``cli`` or ``functions``.
"""
