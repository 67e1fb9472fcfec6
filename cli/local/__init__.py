"""The local runtime: mailstep on an embedded emulated AWS (moto), for dev, demo, tests and bench."""

from cli.local.runtime import LocalRuntime, RuntimeConfig, read_state

__all__ = ["LocalRuntime", "RuntimeConfig", "read_state"]
