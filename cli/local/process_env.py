"""The local runtime's one write of its own process environment: :func:`in_process_environment`.

The runtime reaches its embedded endpoint through a ``shared.core.aws.ClientFactory`` built
from values (``LocalRuntime.aws``), and so do provisioning, deployment, the CloudFormation
registration and EventBridge. Some code in the runtime's process still finds AWS and its
settings through the environment, as a Lambda does, and is why this module exists:

- functions run in this process (``RuntimeConfig(artifact=False)``, ``cli.local.lambdas``)
  read ``Settings.from_env()`` when their handler is imported and use the shared library's
  ``shared.core.aws.client()``, configured by ``AWS_ENDPOINT_URL``, region and credentials;
- moto's Step Functions interpreter calls Lambda back on ``MOTO_PORT``;
- tools that drive a runtime in their own process (``mailstep demo``) use the shared
  library's default clients.

The artifact's execution environments are other processes, each given its environment when
it starts (``cli.local.environments``), which ``cli.local.bootstrap`` installs in that child.
``tests/unit/test_no_env_writes.py`` fails on a write of ``os.environ`` anywhere else under
``cli/`` or ``ops/``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager


@contextmanager
def in_process_environment(values: Mapping[str, str], *, unset: Iterable[str] = ()) -> Iterator[None]:
    """Set ``values`` in ``os.environ`` and remove the names in ``unset`` for the block; on exit
    every one of those names gets back the value it had (or is removed again).

    ``os.environ`` is the whole process's: the caller holds a lock when threads that read it
    may run meanwhile (``cli.local.lambdas`` imports handlers under one). A change of ``TZ``
    is applied to the ``time`` module (``time.tzset``) on the way in and out.
    """
    removed = [name for name in unset if name not in values]
    saved = {name: os.environ.get(name) for name in [*values, *removed]}
    try:
        for name in removed:
            os.environ.pop(name, None)
        os.environ.update(values)
        if "TZ" in saved:
            time.tzset()
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if "TZ" in saved:
            time.tzset()
