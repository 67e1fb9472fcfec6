"""Webhooks: signed Standard Webhooks deliveries of mailstep's events to the user's app.

Owns the event catalog and payloads, signing, the SSRF guard, endpoints and deliveries (store),
the stream dispatch and the delivery attempts. Imports ``core`` and ``store`` only.
"""
