"""Store: DynamoDB keys and helpers, subscriber profiles with their inverted items,
executions, erase, the send-once claims and send log, counters and events-table records.

Imports only ``shared.core``.
"""
