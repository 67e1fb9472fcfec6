"""The MCP server (``mailstep mcp``) through the official SDK's stdio client, against the
local runtime: every tool is listed, answers like the CLI, and refuses what it must."""

from __future__ import annotations

import json
import re
from typing import Any

import anyio
import yaml

from shared.sending.jobs import SendJob
from tests.e2e.conftest import ROOT, Local
from tests.e2e.helpers import (
    MAIN,
    Tools,
    add_contact,
    engage,
    enqueue,
    events_of,
    eventually,
    failed_execution,
    item,
    ok_json,
    ops,
    partition,
    paused_clock,
    run_session,
    scan_all,
    sent_by,
    subscribe,
    suppressed_by_bounce,
    unique,
    wait_for_events,
)
from tests.eventually import eventually_async

EXPECTED_TOOLS = {
    "subscriber_get",
    "subscribers_list",
    "subscriber_update",
    "subscriber_unsubscribe",
    "subscriber_resubscribe",
    "subscriber_erase",
    "topics_list",
    "subscriber_topics",
    "subscriber_topics_update",
    "signups_pending",
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
    "broadcast_resend",
    "warmup_status",
    "webhooks_add",
    "webhooks_list",
    "webhooks_remove",
    "webhooks_enable",
    "webhooks_test",
    "webhooks_deliveries",
    "webhooks_replay",
    "webhooks_rotate",
    "hygiene_report",
    "hygiene_run",
    "hygiene_backfill",
    "reputation_status",
    "reputation_resume",
}


def profile_of(local: Local, email: str) -> dict[str, Any]:
    """The stored PROFILE item, as plain values: what an MCP answer must match."""
    found = item(local, f"SUB#{email}", "PROFILE")
    assert found is not None, f"no profile for {email}"
    return {
        "email": found["email"]["S"],
        "status": found["status"]["S"],
        "first_name": found.get("first_name", {}).get("S"),
        "tags": sorted(found.get("tags", {}).get("SS", [])),
        "suppressed": found.get("suppressed", {}).get("BOOL", False),
    }


def shown(subscriber: dict[str, Any]) -> dict[str, Any]:
    return {k: subscriber[k] for k in ("email", "status", "first_name", "tags", "suppressed")}


def test_tools_are_listed_with_schemas(local: Local) -> None:
    async def body(tools: Tools) -> None:
        listed = await tools.session.list_tools()
        by_name = {t.name: t for t in listed.tools}
        assert set(by_name) == EXPECTED_TOOLS
        erase = by_name["subscriber_erase"]
        assert erase.description and "confirm" in erase.description
        assert set(erase.input_schema["properties"]) == {"email", "confirm"}
        send = by_name["broadcast_send"]
        assert "confirm" in send.input_schema["properties"] and "confirm=true" in str(send.description)

    run_session(local, body)


def test_subscriber_tools_match_the_store(local: Local) -> None:
    group = unique("mcp-group")
    people = [f"{group}-{i}@example.com" for i in range(5)]
    for i, email in enumerate(people):
        add_contact(local, email, tags=[group], first_name=f"M{i}", attributes={"n": i})
    first_email, updated_email, unsub_email, events_email, erased_email = people

    async def body(tools: Tools) -> None:
        # get: normalises the address (trimmed, domain lower-cased) and answers what the store holds
        got = await tools.call(
            "subscriber_get", email=f" {first_email.replace('example.com', 'EXAMPLE.COM')} "
        )
        assert shown(got) == profile_of(local, first_email)
        assert shown(got) == {
            "email": first_email,
            "status": "subscribed",
            "first_name": "M0",
            "tags": [group],
            "suppressed": False,
        }
        assert got["attributes"] == {"n": 0} and got["executions"] == [] and got["suppression"] is None

        # list: two pages of 3 + 2, together exactly the five seeded, each as stored
        first = await tools.call("subscribers_list", tag=group, limit=3)
        assert len(first["subscribers"]) == 3 and first["cursor"]
        rest = await tools.call("subscribers_list", tag=group, limit=3, cursor=first["cursor"])
        assert len(rest["subscribers"]) == 2 and rest["cursor"] is None
        listed = {s["email"]: shown(s) for s in first["subscribers"] + rest["subscribers"]}
        assert listed == {email: profile_of(local, email) for email in people}

        # update: the answer and the store both hold the new tag and attributes
        updated = await tools.call(
            "subscriber_update", email=updated_email, add_tags=["mcp-vip"], attributes={"plan": "pro", "n": 2}
        )
        assert (updated["email"], updated["changed"], updated["tags_added"], updated["tags_removed"]) == (
            updated_email,
            True,
            ["mcp-vip"],
            [],
        )
        assert updated["subscriber"]["attributes"] == {"plan": "pro", "n": 2}
        assert shown(updated["subscriber"]) == profile_of(local, updated_email)
        assert profile_of(local, updated_email)["tags"] == sorted([group, "mcp-vip"])
        assert item(local, "TAG#mcp-vip", f"SUB#{updated_email}") is not None
        assert "must match" in await tools.error(
            "subscriber_update", email=updated_email, add_tags=["Bad Tag"]
        )
        assert profile_of(local, updated_email)["tags"] == sorted([group, "mcp-vip"])  # refused: unchanged
        assert "no such subscriber" in await tools.error("subscriber_get", email="nobody-mcp@example.com")

        # unsubscribe / resubscribe: the status changes in the store, the list filters by it
        out = await tools.call("subscriber_unsubscribe", email=unsub_email)
        assert out["subscriber"]["status"] == "unsubscribed" == profile_of(local, unsub_email)["status"]
        unsubscribed = await tools.call("subscribers_list", tag=group, status="unsubscribed")
        assert [s["email"] for s in unsubscribed["subscribers"]] == [unsub_email]
        back = await tools.call("subscriber_resubscribe", email=unsub_email)
        assert back["subscriber"]["status"] == "subscribed" == profile_of(local, unsub_email)["status"]

        # events: the same timeline the CLI shows (one contact.created event, with its tags)
        events = await tools.call("events_by_subscriber", email=events_email)
        assert [e["type"] for e in events] == ["contact.created"]
        assert events == events_of(local, events_email)

        # erase: refused without confirm (nothing deleted), then every item goes
        assert "confirm=true" in await tools.error("subscriber_erase", email=erased_email)
        assert profile_of(local, erased_email)["email"] == erased_email
        erased = await tools.call("subscriber_erase", email=erased_email, confirm=True)
        assert (erased["email"], erased["deleted_items"], erased["sequences_stopped"]) == (
            erased_email,
            3,  # the profile, its one TAG# partner and its directory item
            [],
        )
        assert erased["deleted_events"] >= 1  # its contact.created event (and idempotency record)
        assert "no such subscriber" in await tools.error("subscriber_get", email=erased_email)

    run_session(local, body)
    leftovers = [
        i for t in (MAIN, "mailstep-events") for i in scan_all(local, t) if erased_email in json.dumps(i)
    ]
    assert leftovers == []


def test_sequence_and_template_tools_match_the_catalog_and_the_store(local: Local) -> None:
    email = f"{unique('mcp-seq')}@example.com"
    catalog = {
        path.stem: yaml.safe_load(path.read_text()) for path in sorted((ROOT / "sequences").glob("*.yaml"))
    }
    templates = ROOT / "templates"
    template_keys = sorted(
        p.relative_to(templates).with_suffix("").as_posix()
        for p in templates.rglob("*")
        if p.is_file()
        and p.suffix in (".md", ".html")
        and not p.relative_to(templates).parts[0].startswith("_")
    )
    with paused_clock(local):  # onboarding stays active (at its first Wait) while it is counted
        assert subscribe(local, email)["sequences_started"] == ["onboarding"]
        eventually(
            lambda: sent_by(local, "onboarding") and item(local, f"SUB#{email}", "EXEC#onboarding"),
            what="the welcome sent and the onboarding's EXEC# pair written",
        )
        pair = item(local, f"SUB#{email}", "EXEC#onboarding")
        assert pair is not None

        async def body(tools: Tools) -> None:
            sequences = await tools.call("sequences_list")
            assert [s for s in sequences if "invalid" in s] == []
            by_id = {s["id"]: s for s in sequences}
            assert set(by_id) == set(catalog)
            for sequence_id, spec in catalog.items():
                row = by_id[sequence_id]
                assert row["trigger"] == spec["trigger"], sequence_id
                assert row["exit_on"] == spec.get("exit_on", []), sequence_id
                assert row["transactional"] == spec.get("transactional", False), sequence_id
                members = {i["SK"]["S"].removeprefix("SUB#") for i in partition(local, f"EXEC#{sequence_id}")}
                assert row["active_executions"] == len(members), sequence_id
            active = await tools.call("sequence_subscribers", sequence_id="onboarding")
            members = {i["SK"]["S"].removeprefix("SUB#") for i in partition(local, "EXEC#onboarding")}
            assert {a["email"] for a in active} == members and email in members
            mine = next(a for a in active if a["email"] == email)
            assert mine["execution_arn"] == pair["execution_arn"]["S"]
            assert mine["started_at"] == pair["started_at"]["S"]
            assert "sequence id" in await tools.error("sequence_subscribers", sequence_id="Bad#Id")

            listed = await tools.call("templates_list")
            assert [t["key"] for t in listed] == template_keys
            welcome = next(t for t in listed if t["key"] == "onboarding/welcome")
            assert welcome == {
                "key": "onboarding/welcome",
                "subject": "Welcome aboard, {{ first_name or 'friend' }}",
                "layout": "default",
            }
            validated = await tools.call("templates_validate")
            assert validated == {"ok": True, "templates": len(template_keys), "problems": []}
            preview = await tools.call("template_preview", key="onboarding/welcome", first_name="Grace")
            assert preview["subject"] == "Welcome aboard, Grace"
            assert preview["preheader"] == "Three things to do in your first ten minutes."
            assert "Welcome aboard, Grace!" in preview["text"] and "Grace" in preview["html"]
            assert "TemplateNotFound" in await tools.error("template_preview", key="no/such-template")

        run_session(local, body)


def test_stats_events_suppression_failed_and_doctor_tools_match_what_happened(local: Local) -> None:
    # Given one mail of a source of its own, delivered, opened twice and clicked once ...
    reader = f"{unique('mcp-reader')}@example.com"
    source = unique("mcp-stats")
    add_contact(local, reader)
    enqueue(local, SendJob(email=reader, template="onboarding/tips", source=source, step="tips"))
    wait_for_events(local, reader, "delivery")
    engage(local, reader, "open", "open", "click")
    # ... a permanent bounce that suppressed an address ...
    bounced = f"bounce+{unique('mcp')}@simulator.amazonses.com"
    add_contact(local, bounced)
    enqueue(local, SendJob(email=bounced, template="onboarding/tips", source=source, step="tips"))
    suppressed_by_bounce(local, bounced)
    # ... and a failed execution of a sequence state machine
    failing = unique("mcp-fail")
    failed_execution(local, failing, "run-1")

    async def body(tools: Tools) -> None:
        # stats: the counts of what happened to that source (the sends and the Delivery are
        # counted by the stats fold from the tables' streams, a few seconds after they happen)
        async def all_counted() -> dict[str, Any] | None:
            answer = await tools.call("stats", sequence=source)
            totals = {r["metric"]: r["total"] for r in answer["rows"]}
            return answer if (totals.get("sent"), totals.get("delivered")) == (2, 1) else None

        scoped = await eventually_async(all_counted, timeout_s=60, what="the sends and the Delivery counted")
        rows = {r["metric"]: r for r in scoped["rows"]}
        assert (scoped["scope"], scoped["since"]) == (source, None)
        assert (rows["sent"]["total"], rows["delivered"]["total"]) == (2, 1)
        assert (rows["opened"]["total"], rows["opened"]["unique"]) == (2, 1)
        assert (rows["clicked"]["total"], rows["clicked"]["unique"]) == (1, 1)
        assert rows["bounced"]["total"] == 1
        everything = await tools.call("stats")
        assert everything[source] == scoped["rows"]
        assert scoped["rows"] == ok_json(ops(local, "stats", "--sequence", source, "--json"))["rows"]

        # events: by source and by template, the events of those two mails
        by_source = await tools.call("events_by_sequence", source=source)
        mine = events_of(local, reader) + events_of(local, bounced)
        # (the timeline also shows the send log's "send" entries, and the Deliveries, which the
        # events indexes leave out: docs/data-model.md; the indexes have the rest)
        timeline = [e["type"] for e in mine if e.get("source") == source]
        expected_types = sorted(t for t in timeline if t not in ("send", "delivery"))
        assert sorted(e["type"] for e in by_source) == expected_types
        assert set(expected_types) == {"open", "click", "bounce"} and "delivery" in timeline
        assert {e["PK"].removeprefix("SUB#") for e in by_source} == {reader, bounced}
        limited = await tools.call("events_by_sequence", source=source, limit=2)
        assert len(limited) == 2 and all(e["source"] == source for e in limited)
        by_template = await tools.call("events_by_template", template="onboarding/tips", limit=1000)
        assert all(e["template"] == "onboarding/tips" for e in by_template)
        assert sorted(e["type"] for e in by_template if e.get("source") == source) == expected_types

        # suppression: the bounced address with its reason, lifted once
        suppressed = {s["email"]: s for s in await tools.call("suppression_list")}
        assert suppressed[bounced]["reason"] == "bounce" and suppressed[bounced]["source"] == source
        assert reader not in suppressed
        assert await tools.call("suppression_remove", email=bounced) == {"email": bounced, "removed": True}
        assert bounced not in {s["email"] for s in await tools.call("suppression_list")}
        assert item(local, f"SUB#{bounced}", "SUPPRESSION") is None
        assert profile_suppressed(local, bounced) is False
        again = await tools.call("suppression_remove", email=bounced)
        assert again == {"email": bounced, "removed": False}

        # failed executions: exactly the one that failed, by its sequence id
        failed = await tools.call("failed_sequence_executions", sequence_id=failing)
        assert [(f["sequence"], f["status"], f["name"]) for f in failed] == [(failing, "FAILED", "run-1")]

        # doctor: the same checks and verdicts as `mailstep doctor`
        doctor = await tools.call("doctor")
        cli = json.loads(ops(local, "doctor", "--json").stdout)
        assert [(c["name"], c["status"]) for c in doctor["checks"]] == [
            (c["name"], c["status"]) for c in cli["checks"]
        ]
        statuses = {c["name"]: c["status"] for c in doctor["checks"]}
        assert statuses["ses-identity"] == statuses["alarms"] == "skip"  # not emulated locally
        assert statuses["configuration-set"] == statuses["ses-quota"] == "pass"

    run_session(local, body)


def profile_suppressed(local: Local, email: str) -> bool | None:
    found = item(local, f"SUB#{email}", "PROFILE")
    return None if found is None else bool(found.get("suppressed", {}).get("BOOL", False))


def test_broadcast_tools_dry_run_then_send_only_with_confirm(local: Local) -> None:
    tag = unique("mcp-bc")
    people = sorted(f"{tag}-{i}@example.com" for i in range(3))
    for email in people:
        add_contact(local, email, tags=[tag])
    add_contact(local, f"{tag}-other@example.com", tags=[f"{tag}-x"])  # not in the audience

    async def body(tools: Tools) -> None:
        dry = await tools.call("broadcast_dry_run", template="newsletter/monthly", tags=[tag])
        assert dry["audience_size"] == 3 and sorted(dry["sample"]) == people
        assert "does not exist" in await tools.error("broadcast_dry_run", template="no/such", tags=[tag])
        # a topic: newsletter is default off (nobody opted in); one reader leaves product-updates
        by_topic = {"template": "newsletter/monthly", "tags": [tag]}
        assert (await tools.call("broadcast_dry_run", **by_topic, topic="newsletter"))["audience_size"] == 0
        await tools.call("subscriber_topics_update", email=people[0], off=["product-updates"])
        updates = await tools.call("broadcast_dry_run", **by_topic, topic="product-updates")
        assert (updates["audience_size"], sorted(updates["sample"])) == (2, people[1:]), updates
        assert "not declared" in await tools.error("broadcast_dry_run", **by_topic, topic="casino")
        await tools.call("subscriber_topics_update", email=people[0], on=["product-updates"])

        refused = await tools.error(
            "broadcast_send", template="newsletter/monthly", tags=[tag], broadcast_id=tag
        )
        assert "confirm=true" in refused
        assert "no broadcast" in await tools.error("broadcast_get", broadcast_id=tag)
        assert sent_by(local, tag) == []  # the refused send sent nothing

        sent = await tools.call(
            "broadcast_send", template="newsletter/monthly", tags=[tag], broadcast_id=tag, confirm=True
        )
        assert sent["created"] is True
        assert (sent["broadcast"]["id"], sent["broadcast"]["template"]) == (tag, "newsletter/monthly")
        assert sent["broadcast"]["filters"]["tags"] == [tag]

        async def finished() -> dict[str, Any]:
            return dict(await tools.call("broadcast_get", broadcast_id=tag))

        got = await finished()
        deadline = anyio.current_time() + 120
        while got["status"] != "done":
            assert anyio.current_time() < deadline, f"the broadcast did not finish: {got}"
            await anyio.sleep(0.5)
            got = await finished()
        assert (got["id"], got["template"], got["audience"], got["sent"], got["failed"]) == (
            tag,
            "newsletter/monthly",
            3,
            3,
            0,
        )
        assert sorted(d for m in sent_by(local, tag) for d in m["destination"]) == people

        again = await tools.call(
            "broadcast_send", template="newsletter/monthly", tags=[tag], broadcast_id=tag, confirm=True
        )
        assert (again["created"], again["same"], again["broadcast"]["sent"]) == (False, True, 3)
        listed = {b["id"]: b for b in await tools.call("broadcasts_list")}
        assert (listed[tag]["status"], listed[tag]["audience"], listed[tag]["sent"]) == ("done", 3, 3)

    run_session(local, body)
    assert sorted(d for m in sent_by(local, tag) for d in m["destination"]) == people  # nobody twice


def _cli_dry_run(local: Local, tag: str, filters: dict[str, list[str]]) -> tuple[int, set[str], str]:
    """``mailstep broadcast send --dry-run`` with the same filters: (size, sample, audience)."""
    options = {"any_tags": "--any-tag", "exclude_tags": "--exclude-tag", "where": "--where"}
    args = [arg for name, values in filters.items() for value in values for arg in (options[name], value)]
    answer = ops(
        local, "broadcast", "send", "--template", "newsletter/monthly", "--tag", tag, *args, "--dry-run"
    )
    assert answer.returncode == 0, answer.stdout + answer.stderr
    text = " ".join(answer.stdout.split())  # the console wraps long lines
    found = re.search(r"audience: (\d+) subscriber\(s\) \((.*)\) on ", text)
    assert found, text
    sample = text.split("sample:", 1)[1] if "sample:" in text else ""
    return int(found.group(1)), set(re.findall(r"[\w.+-]+@example\.com", sample)), found.group(2)


def test_broadcast_dry_run_audience_equals_the_cli_dry_run_for_every_filter(local: Local) -> None:
    """Each audience filter (any_tags, exclude_tags, where: =, !=, >, in) and all of them at
    once: the MCP dry run's size, recipients and description equal the CLI's dry run for the
    same filters, and both are the readers the filters select."""
    run = unique("mcp-aud")
    a, b, x = f"{run}-a", f"{run}-b", f"{run}-x"
    readers = {
        "p0": ([a], {"plan": "pro", "seats": 5, "country": "de"}),
        "p1": ([b], {"plan": "free", "seats": 1, "country": "fr"}),
        "p2": ([a, b, x], {"plan": "pro", "seats": 10, "country": "us"}),
        "p3": ([], {"plan": "team", "seats": 4}),
        "p4": ([x], {"plan": "free", "seats": 2, "country": "de"}),
    }
    email = {name: f"{name}-{run}@example.com" for name in readers}
    for name, (tags, attributes) in readers.items():
        add_contact(local, email[name], tags=[run, *tags], attributes=attributes)
    cases: list[tuple[dict[str, list[str]], set[str]]] = [
        ({}, {"p0", "p1", "p2", "p3", "p4"}),
        ({"exclude_tags": [x]}, {"p0", "p1", "p3"}),
        ({"any_tags": [a, b]}, {"p0", "p1", "p2"}),
        ({"where": ["plan=pro"]}, {"p0", "p2"}),
        ({"where": ["plan!=free", "seats>4"]}, {"p0", "p2"}),
        ({"where": ["seats>3"]}, {"p0", "p2", "p3"}),
        ({"where": ["country in de,fr"]}, {"p0", "p1", "p4"}),
        ({"any_tags": [a, b], "exclude_tags": [x], "where": ["seats>3"]}, {"p0"}),
    ]
    cli = {i: _cli_dry_run(local, run, filters) for i, (filters, _) in enumerate(cases)}

    async def body(tools: Tools) -> None:
        for i, (filters, expected) in enumerate(cases):
            dry = await tools.call("broadcast_dry_run", template="newsletter/monthly", tags=[run], **filters)
            mcp = (dry["audience_size"], set(dry["sample"]), dry["audience"])
            wanted = {email[name] for name in expected}
            assert mcp == cli[i], (filters, mcp, cli[i])
            assert mcp[:2] == (len(wanted), wanted), (filters, mcp)

    run_session(local, body)
