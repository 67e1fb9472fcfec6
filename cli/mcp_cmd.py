"""``mailstep mcp``: the MCP server on stdio, for an AI assistant (see docs/operations.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cli.target import targeted

if TYPE_CHECKING:
    from ops.targets import Target


@targeted
def mcp(*, target: Target) -> None:
    """Serve mailstep's operations as MCP tools on stdin/stdout (an assistant starts this)."""
    from mcp_server.tools import serve

    serve(target)
