"""Consent: topics (``topics.yaml``), public sign-up with double opt-in, confirmation, and the
reader's topic choices.

Imports ``core``, ``store``, ``sending`` and ``sequences``; never ``web``, ``broadcasts`` or
``engagement`` (``web`` and ``engagement`` may import it).
"""

from pathlib import Path

TOPICS_FILE = Path(__file__).resolve().parent.parent.parent / "topics.yaml"
