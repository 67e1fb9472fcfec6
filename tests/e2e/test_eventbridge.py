"""EventBridge on the local runtime: the template's rule sends sequence executions that ended
without their last step (FAILED, TIMED_OUT, ABORTED) to the cleanup function, which removes
the subscriber's EXEC pair, as in AWS."""

from __future__ import annotations

from shared.core import specs
from tests.e2e.conftest import Local
from tests.e2e.helpers import eventually, item, mails, paused_clock, post, unique_email


def test_an_execution_stopped_outside_mailstep_leaves_no_exec_pair(local: Local) -> None:
    email = unique_email("stopped")
    sfn = local.client("stepfunctions")
    with paused_clock(local):
        # Given onboarding running for a subscriber (held at its first Wait)
        (started,) = post(local, {"type": "subscriber.subscribed", "email": email, "id": f"s-{email}"})
        assert started["sequences_started"] == ["onboarding"]
        eventually(lambda: mails(local, {email})[email], what="the welcome mail")
        running = item(local, f"SUB#{email}", "EXEC#onboarding")
        assert running is not None
        execution_arn = running["execution_arn"]["S"]
        assert execution_arn.split(":execution:")[1].startswith(specs.STATE_MACHINE_PREFIX)
        delivered = local.status()["eventbridge"]["delivered"]
        # When someone stops the execution in the Step Functions console (not through mailstep)
        sfn.stop_execution(executionArn=execution_arn, error="operator", cause="stopped by hand")
        # Then EventBridge delivers the ABORTED status change and cleanup removes both items
        eventually(lambda: item(local, f"SUB#{email}", "EXEC#onboarding") is None, what="the EXEC pair to go")
        assert item(local, "EXEC#onboarding", f"SUB#{email}") is None
    # counted once the poll's deliveries returned, which is after cleanup removed the pair
    eventually(
        lambda: local.status()["eventbridge"]["delivered"] > delivered,
        what="the delivery in EventBridge's count",
    )
