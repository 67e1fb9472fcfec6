"""Web: the HTTP error mapping, events ingestion (``POST /v1/events``) and the signed-link
pages (unsubscribe, resubscribe).

Imports ``core``, ``store``, ``sending`` and ``sequences``; never ``engagement`` or ``broadcasts``.
"""
