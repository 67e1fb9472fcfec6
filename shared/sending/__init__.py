"""Sending: the one renderer, MIME assembly, the SES sender, the send pipeline, send jobs,
the distributed send-rate limiter and signed link tokens.

Imports ``shared.core`` and ``shared.store``; never sequences, broadcasts, web or engagement.
"""
