"""``make demo``'s story: chapters told through a running local runtime's HTTP API, each checking
what it shows. Uses ``local_aws`` (the runtime it is told on), ``ops`` and ``shared``; nothing imports
it but the ``mailstep demo`` command."""
