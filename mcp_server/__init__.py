"""The MCP server (``mailstep mcp``): mailstep's operations as tools for an AI assistant, each a
call into ``ops`` and ``shared`` as the matching CLI command makes it. Nothing imports it but
that command."""
