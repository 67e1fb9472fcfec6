"""The reputation guardrail (docs/reputation.md): a CloudWatch alarm on the marketing
configuration set's reputation metrics pauses that set (SES v2 PutConfigurationSetSendingOptions)
and its broadcasts in progress; the pause is recorded for status, resume and webhooks.

Imports ``core``, ``store`` and ``broadcasts``; never ``web``, ``engagement`` or ``webhooks``.
"""
