"""``mailstep:expectedPeakMailsPerSecond`` pre-warms the tables (``AWS::DynamoDB::Table``
``WarmThroughput``, docs/deploy.md "Warm tables for a known peak"); unset, no table has it
(pre-warming is paid). The storage construct alone, in a stack of its own: the property comes
from the context key through the configuration, as in the app's synthesis."""

from __future__ import annotations

from typing import Any

from aws_cdk import App, Stack
from aws_cdk.assertions import Template

from shared.core import specs
from stacks.config import MailstepConfig
from stacks.constructs.storage import Storage
from stacks.warm import warm_throughput


def tables(context: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Table logical id -> its properties, synthesized with ``context`` (for the local runtime)."""
    app = App(context={**context, **specs.LOCAL_SYNTH_CONTEXT})
    stack = Stack(app, "WarmTest")
    Storage(stack, "Storage", config=MailstepConfig.from_context(app.node))
    found = Template.from_stack(stack).find_resources("AWS::DynamoDB::Table")
    return {logical_id: resource["Properties"] for logical_id, resource in found.items()}


def test_the_expected_peak_sets_the_warm_throughput_of_each_table_that_needs_more() -> None:
    found = tables({"mailstep:expectedPeakMailsPerSecond": 1000})

    expected = warm_throughput(1000)
    assert specs.MAIN_TABLE.id in expected  # 1,000 mails/s need more than a new table's 4,000 WRU
    for table in specs.TABLES:
        properties = found[table.id]
        if table.id in expected:
            write, read = expected[table.id]
            assert properties["WarmThroughput"] == {"WriteUnitsPerSecond": write, "ReadUnitsPerSecond": read}
        else:
            assert "WarmThroughput" not in properties
        assert properties["BillingMode"] == "PAY_PER_REQUEST"  # still on demand: not provisioning


def test_no_peak_or_a_peak_a_new_table_serves_sets_none() -> None:
    for context in ({}, {"mailstep:expectedPeakMailsPerSecond": 100}):
        found = tables(context)

        assert set(found) == {t.id for t in specs.TABLES}
        assert all("WarmThroughput" not in properties for properties in found.values()), context
