"""EventBridge on the local runtime: the template's rule sends sequence executions that ended
without their last step (FAILED, TIMED_OUT, ABORTED) to the cleanup function, which removes
the subscriber's EXEC pair, as in AWS."""

from __future__ import annotations

from shared.core import specs
from tests.e2e.conftest import Local
from tests.e2e.test_engagement import wait_for
from tests.e2e.test_sequences import MAIN, mails, paused_clock, post, unique


def test_an_execution_stopped_outside_mailstep_leaves_no_exec_pair(local: Local) -> None:
    email = unique("stopped")
    ddb, sfn = local.client("dynamodb"), local.client("stepfunctions")
    pair = {"PK": {"S": f"SUB#{email}"}, "SK": {"S": "EXEC#onboarding"}}
    with paused_clock(local):
        # Given onboarding running for a subscriber (held at its first Wait)
        (started,) = post(local, {"type": "subscriber.subscribed", "email": email, "id": f"s-{email}"})
        assert started["sequences_started"] == ["onboarding"]
        wait_for(lambda: mails(local, {email})[email], what="the welcome mail")
        execution_arn = ddb.get_item(TableName=MAIN, Key=pair)["Item"]["execution_arn"]["S"]
        assert execution_arn.split(":execution:")[1].startswith(specs.STATE_MACHINE_PREFIX)
        delivered = local.status()["eventbridge"]["delivered"]
        # When someone stops the execution in the Step Functions console (not through mailstep)
        sfn.stop_execution(executionArn=execution_arn, error="operator", cause="stopped by hand")
        # Then EventBridge delivers the ABORTED status change and cleanup removes both items
        wait_for(lambda: "Item" not in ddb.get_item(TableName=MAIN, Key=pair), what="the EXEC pair to go")
        partner = {"PK": {"S": "EXEC#onboarding"}, "SK": {"S": f"SUB#{email}"}}
        assert "Item" not in ddb.get_item(TableName=MAIN, Key=partner)
    assert local.status()["eventbridge"]["delivered"] > delivered
