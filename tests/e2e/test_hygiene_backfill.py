"""``mailstep hygiene backfill`` and the MCP tool ``hygiene_backfill`` on the local runtime.

Given a subscriber from before list hygiene (their ``ENGAGEMENT`` item removed from the events
table, as such subscribers have none) with a person's open recorded, the dry run counts their
item without writing it, the backfill writes it from the recorded open, and a second backfill,
through the CLI and through MCP, writes nothing (its counts say so).
"""

from __future__ import annotations

from typing import Any

from tests.e2e.conftest import Local
from tests.e2e.helpers import Tools, add_contact, events_of, eventually, ok_json, ops, run_session, unique
from tests.e2e.test_engagement import queue_send


def _engagement_key(email: str) -> dict[str, Any]:
    return {"PK": {"S": f"SUB#{email}"}, "SK": {"S": "ENGAGEMENT"}}


def _engagement(local: Local, email: str) -> dict[str, Any] | None:
    found = local.client("dynamodb").get_item(
        TableName=local.state["tables"]["events_table_name"], Key=_engagement_key(email), ConsistentRead=True
    )
    return found.get("Item")


def test_the_backfill_creates_a_legacy_subscriber_s_item_once_through_the_cli_and_mcp(local: Local) -> None:
    email = f"{unique('legacy')}@example.com"
    add_contact(local, email)
    queue_send(local, email, unique("e2e-backfill"), "welcome")
    eventually(lambda: any(e["type"] == "send" for e in events_of(local, email)), 60, "the mail sent")
    assert ops(local, "local", "open", email).returncode == 0
    opens = eventually(lambda: [e for e in events_of(local, email) if e["type"] == "open"], 60, "the open")
    # Given the subscriber as stored before list hygiene: no ENGAGEMENT item
    local.client("dynamodb").delete_item(
        TableName=local.state["tables"]["events_table_name"], Key=_engagement_key(email)
    )

    # When the dry run counts, nothing is written
    dry = ok_json(ops(local, "hygiene", "backfill", "--dry-run", "--json"))
    assert dry["dry_run"] is True and dry["created"] >= 1 and dry["writes"] == 0, dry
    assert _engagement(local, email) is None
    # When it runs, the item is there, its last engagement the person's open
    done = ok_json(ops(local, "hygiene", "backfill", "--json"))
    assert done["created"] >= 1 and done["done"] is True, done
    stored = _engagement(local, email)
    assert stored is not None and stored["engaged_at"]["S"] == opens[-1]["at"], stored
    # Then a second run, from the CLI or from MCP, reads everyone and writes nothing
    again = ok_json(ops(local, "hygiene", "backfill", "--json"))
    assert (again["created"], again["writes"], again["read"]) == (0, 0, again["had_item"]), again

    async def body(tools: Tools) -> None:
        refused = await tools.session.call_tool("hygiene_backfill", {"dry_run": False})
        assert refused.is_error  # writing asks for confirm=true
        through_mcp = await tools.call("hygiene_backfill", dry_run=False, confirm=True)
        assert (through_mcp["created"], through_mcp["writes"]) == (0, 0), through_mcp

    run_session(local, body)
