"""The MCP server (``mailstep mcp``) through the official SDK's stdio client, against the
local runtime: every tool is listed, answers like the CLI, and refuses what it must."""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client

from tests.e2e.conftest import ROOT, Local, subprocess_env
from tests.e2e.test_sequences import paused_clock

EXPECTED_TOOLS = {
    "subscriber_get",
    "subscribers_list",
    "subscriber_update",
    "subscriber_unsubscribe",
    "subscriber_resubscribe",
    "subscriber_erase",
    "sequences_list",
    "sequence_subscribers",
    "failed_sequence_executions",
    "events_by_subscriber",
    "events_by_template",
    "events_by_sequence",
    "stats",
    "templates_list",
    "templates_validate",
    "template_preview",
    "suppression_list",
    "suppression_remove",
    "doctor",
    "broadcasts_list",
    "broadcast_get",
    "broadcast_dry_run",
    "broadcast_send",
}


class Tools:
    def __init__(self, session: ClientSession) -> None:
        self.session = session

    async def call(self, name: str, **arguments: Any) -> Any:
        result = await self.session.call_tool(name, arguments)
        assert not result.is_error, f"{name}: {result.content}"
        structured = result.structured_content
        assert structured is not None, name
        # A list result arrives as {"result": [...]}, a dict as itself; the text blocks agree.
        value = structured["result"] if set(structured) == {"result"} else structured
        texts = [json.loads(c.text) for c in result.content]  # type: ignore[union-attr]
        assert texts == (value if isinstance(value, list) else [value])
        return value

    async def error(self, name: str, **arguments: Any) -> str:
        result = await self.session.call_tool(name, arguments)
        assert result.is_error, f"{name} should have failed: {result.content}"
        return str(result.content[0].text)  # type: ignore[union-attr]


def run_session(local: Local, body: Callable[[Tools], Awaitable[None]]) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "cli.main", "mcp", "--state-dir", str(local.state_dir)],
        env=subprocess_env(),
        cwd=str(ROOT),
    )

    async def main() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await body(Tools(session))

    anyio.run(main)


def subscribe(local: Local, email: str, **extra: Any) -> None:
    code, answer = local.http(
        "POST", "/v1/events", {"type": "subscriber.subscribed", "email": email, **extra}, key=local.api_key
    )
    assert code == 200, answer


def test_tools_are_listed_with_schemas(local: Local) -> None:
    async def body(tools: Tools) -> None:
        listed = await tools.session.list_tools()
        by_name = {t.name: t for t in listed.tools}
        assert set(by_name) == EXPECTED_TOOLS
        erase = by_name["subscriber_erase"]
        assert erase.description and "confirm" in erase.description
        assert set(erase.input_schema["properties"]) == {"email", "confirm"}

    run_session(local, body)


def test_subscriber_tools_match_the_store(local: Local) -> None:
    for i in range(5):
        subscribe(local, f"mcp{i}@example.com", tags=["mcp-group"], first_name=f"M{i}")

    async def body(tools: Tools) -> None:
        got = await tools.call("subscriber_get", email=" mcp0@EXAMPLE.com ")
        assert got["email"] == "mcp0@example.com" and "mcp-group" in got["tags"]

        first = await tools.call("subscribers_list", tag="mcp-group", limit=3)
        assert len(first["subscribers"]) == 3 and first["cursor"]
        rest = await tools.call("subscribers_list", tag="mcp-group", limit=3, cursor=first["cursor"])
        emails = {s["email"] for s in first["subscribers"] + rest["subscribers"]}
        assert emails == {f"mcp{i}@example.com" for i in range(5)} and rest["cursor"] is None

        updated = await tools.call(
            "subscriber_update",
            email="mcp1@example.com",
            add_tags=["mcp-vip"],
            attributes={"plan": "pro", "n": 2},
        )
        assert updated["tags_added"] == ["mcp-vip"] and updated["subscriber"]["attributes"] == {
            "plan": "pro",
            "n": 2,
        }
        assert "must match" in (
            await tools.error("subscriber_update", email="mcp1@example.com", add_tags=["Bad Tag"])
        )
        assert "no such subscriber" in await tools.error("subscriber_get", email="nobody-mcp@example.com")

        out = await tools.call("subscriber_unsubscribe", email="mcp2@example.com")
        assert out["subscriber"]["status"] == "unsubscribed"
        unsubscribed = await tools.call("subscribers_list", tag="mcp-group", status="unsubscribed")
        assert [s["email"] for s in unsubscribed["subscribers"]] == ["mcp2@example.com"]
        back = await tools.call("subscriber_resubscribe", email="mcp2@example.com")
        assert back["subscriber"]["status"] == "subscribed"

        events = await tools.call("events_by_subscriber", email="mcp3@example.com")
        assert any(e["type"] == "subscriber.subscribed" for e in events)

        refused = await tools.error("subscriber_erase", email="mcp4@example.com")
        assert "confirm=true" in refused
        assert (await tools.call("subscriber_get", email="mcp4@example.com"))["email"] == "mcp4@example.com"
        erased = await tools.call("subscriber_erase", email="mcp4@example.com", confirm=True)
        assert erased["deleted_items"] >= 2
        assert "no such subscriber" in await tools.error("subscriber_get", email="mcp4@example.com")

    run_session(local, body)
    main = local.state["tables"]["table_name"]
    items = local.client("dynamodb").scan(TableName=main)["Items"]
    assert not [i for i in items if "mcp4@example.com" in json.dumps(i)]


def test_sequence_template_stats_suppression_and_doctor_tools(local: Local) -> None:
    with paused_clock(local):  # onboarding stays active (at its first Wait) while it is counted
        subscribe(local, "mcp-seq@example.com")
        _sequence_template_stats_suppression_and_doctor_tools(local)


def _sequence_template_stats_suppression_and_doctor_tools(local: Local) -> None:

    async def body(tools: Tools) -> None:
        sequences = await tools.call("sequences_list")
        ids = {s["id"]: s for s in sequences if "id" in s}
        assert "onboarding" in ids and ids["onboarding"]["trigger"] == "subscriber.subscribed"
        assert all(isinstance(s["active_executions"], int) for s in ids.values())
        active = await tools.call("sequence_subscribers", sequence_id="onboarding")
        assert len(active) == ids["onboarding"]["active_executions"]
        assert "sequence id" in await tools.error("sequence_subscribers", sequence_id="Bad#Id")

        templates = await tools.call("templates_list")
        keys = [t["key"] for t in templates]
        assert keys and "onboarding/welcome" in keys
        validated = await tools.call("templates_validate")
        assert validated["templates"] == len(keys)
        preview = await tools.call("template_preview", key="onboarding/welcome", first_name="Grace")
        assert "Grace" in preview["html"] and preview["subject"]
        assert "TemplateNotFound" in await tools.error("template_preview", key="no/such-template")

        stats = await tools.call("stats")
        assert isinstance(stats, dict)
        scoped = await tools.call("stats", sequence="onboarding")
        assert scoped["scope"] == "onboarding" and {r["metric"] for r in scoped["rows"]}
        by_sequence = await tools.call("events_by_sequence", source="onboarding", limit=5)
        assert len(by_sequence) <= 5 and all(e.get("source") == "onboarding" for e in by_sequence)
        by_template = await tools.call("events_by_template", template="onboarding/welcome", limit=5)
        assert all(e.get("template") == "onboarding/welcome" for e in by_template)

        assert isinstance(await tools.call("suppression_list"), list)
        removed = await tools.call("suppression_remove", email="never-suppressed@example.com")
        assert removed == {"email": "never-suppressed@example.com", "removed": False}

        assert isinstance(await tools.call("failed_sequence_executions"), list)
        doctor = await tools.call("doctor")
        assert {c["name"] for c in doctor["checks"]} >= {"ses-quota", "dlqs", "configuration-set"}

    run_session(local, body)


def test_broadcast_tools_dry_run_then_send_only_with_confirm(local: Local) -> None:
    for i in range(3):
        subscribe(local, f"mcp-bc{i}@example.com", tags=["mcp-bc"])

    async def body(tools: Tools) -> None:
        dry = await tools.call("broadcast_dry_run", template="newsletter/monthly", tags=["mcp-bc"])
        assert dry["audience_size"] == 3 and len(dry["sample"]) == 3
        assert "does not exist" in await tools.error("broadcast_dry_run", template="no/such", tags=["mcp-bc"])

        refused = await tools.error(
            "broadcast_send", template="newsletter/monthly", tags=["mcp-bc"], broadcast_id="mcp-bc-1"
        )
        assert "confirm=true" in refused
        assert "no broadcast" in await tools.error("broadcast_get", broadcast_id="mcp-bc-1")

        sent = await tools.call(
            "broadcast_send",
            template="newsletter/monthly",
            tags=["mcp-bc"],
            broadcast_id="mcp-bc-1",
            confirm=True,
        )
        assert sent["created"] is True and sent["broadcast"]["id"] == "mcp-bc-1"
        again = await tools.call(
            "broadcast_send",
            template="newsletter/monthly",
            tags=["mcp-bc"],
            broadcast_id="mcp-bc-1",
            confirm=True,
        )
        assert again["created"] is False and again["same"] is True

        got = await tools.call("broadcast_get", broadcast_id="mcp-bc-1")
        assert got["id"] == "mcp-bc-1" and got["template"] == "newsletter/monthly"
        listed = await tools.call("broadcasts_list")
        assert "mcp-bc-1" in [b["id"] for b in listed]

    run_session(local, body)
