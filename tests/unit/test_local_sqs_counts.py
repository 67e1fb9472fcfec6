"""The local runtime's SQS message counts (``local_aws.hooks.sqs_visible`` and the approximate
counts) are moto's own, read with one clock read per count instead of one per message.

Given a queue holding visible, delayed and in-flight messages, when both the runtime's counts
and moto's original properties count them, then they agree, and each kind is counted.
"""

from __future__ import annotations

from typing import Any

import boto3
from moto import mock_aws
from moto.sqs.models import Queue, sqs_backends

from local_aws import hooks

ORIGINAL = hooks._MOTO_SQS_PROPERTIES


def _moto(name: str, queue: Any) -> Any:
    return ORIGINAL[Queue, name].fget(queue)


def test_counts_match_moto_for_visible_delayed_and_in_flight_messages() -> None:
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="counts")["QueueUrl"]
        for i in range(12):
            sqs.send_message(QueueUrl=url, MessageBody=f"m{i}", DelaySeconds=600 if i % 4 == 0 else 0)
        received = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=4, VisibilityTimeout=600)
        assert len(received["Messages"]) == 4
        queue = sqs_backends["123456789012"]["us-east-1"].queues["counts"]

        visible = hooks.sqs_visible(queue)
        assert [m.id for m in visible] == [m.id for m in _moto("messages", queue)]
        assert len(visible) == 12 - 3 - 4  # three delayed, four in flight
        assert hooks.sqs_delayed(queue) == _moto("approximate_number_of_messages_delayed", queue) == 3
        assert hooks.sqs_not_visible(queue) == _moto("approximate_number_of_messages_not_visible", queue) == 4


def test_self_check_reads_moto_s_originals_after_the_patch() -> None:
    hooks._sqs_counts()  # as install() does: the check still compares moto's own properties
    assert isinstance(Queue.__dict__["messages"], property)
    hooks.self_check()
