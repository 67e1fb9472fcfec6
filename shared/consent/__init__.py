"""Consent: public sign-up with double opt-in, confirmation, and the
reader's topic choices (the catalog itself is ``shared.core.topics``).

Imports ``core``, ``store``, ``sending`` and ``sequences``; never ``web``, ``broadcasts`` or
``engagement`` (``web`` and ``engagement`` may import it).
"""
