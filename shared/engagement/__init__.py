"""Engagement: SES event parsing, correlation to sends, counters, suppression and replies.

The top of the library: may import every other ``shared`` package, and none imports it
except ``ops`` and the functions.
"""
