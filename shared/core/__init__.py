"""Core: settings, resource specs, domain errors, validated input models, envelopes,
public (JSON) views, observability, the boto3 client factory, secrets and the clock.

Imports nothing else of mailstep; every other package may import it.
"""
