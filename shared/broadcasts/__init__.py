"""Broadcasts (DESIGN.md sections 3, 6, 6b; docs/broadcasts.md): one mail to a filtered
audience, resolved page by page, fanned out in batches to rate-limited workers that send
through the one send pipeline, exactly once per (broadcast, subscriber).

Imports ``core``, ``store``, ``sending`` and ``sequences`` (the Step Functions adapter for
``--at``); never ``web`` or ``engagement``.
"""
