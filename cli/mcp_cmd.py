"""``mailstep mcp``: the MCP server on stdio, for an AI assistant (see docs/operations.md)."""

from __future__ import annotations

from pathlib import Path

from cli.target import REGION, STACK, STATE_DIR, TARGET, select


def mcp(
    target: str | None = TARGET,
    stack: str | None = STACK,
    state_dir: Path = STATE_DIR,
    region: str | None = REGION,
) -> None:
    """Serve mailstep's operations as MCP tools on stdin/stdout (an assistant starts this)."""
    from cli.mcp_server import serve

    serve(select(target, stack, state_dir, region))
