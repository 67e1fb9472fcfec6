"""The local runtime: mailstep on an embedded emulated AWS (moto), for dev, demo, tests and bench.

The names below load on first use, so a Lambda execution environment
(``local_aws.environments``) starts without importing moto.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from local_aws.runtime import LocalRuntime, RuntimeConfig
    from ops.targets import read_state

__all__ = ["LocalRuntime", "RuntimeConfig", "read_state"]


def __getattr__(name: str) -> Any:
    if name == "read_state":  # the state file's reader: no moto
        from ops import targets

        return targets.read_state
    if name in __all__:
        from local_aws import runtime

        return getattr(runtime, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
