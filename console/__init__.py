"""``mailstep console``: the web console, served on 127.0.0.1 with the operator's credentials.

Owns the HTTP side only (the guard, the pages, the vendored assets); every read and action is a
call into ``ops`` (and the ``shared`` adapters a ``ops.targets.Target`` builds), as the CLI and the
MCP server make them. Imports ``ops`` and ``shared``; nothing in ``ops`` or ``shared`` imports it.
"""
