"""``mailstep demo``: a short story told through the HTTP API of a local runtime.

The story is an ordered list of chapters (``CHAPTERS``); each capability appends its own
chapter function taking a :class:`Demo`. The last chapter prints what the story left
in the tables and the outbox.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from demo.consent import chapter_signup_topics
from demo.story import WAIT_S, Demo

if TYPE_CHECKING:
    pass


def chapter_subscribers(demo: Demo) -> None:
    demo.chapter("1. Subscribers arrive through POST /v1/events")
    demo.console.print(
        "  Every new subscriber starts onboarding (sequences/onboarding.yaml). Virtual\n"
        "  time is paused: each onboarding sends its welcome mail, then stays at its\n"
        "  first wait (1 day) until the sequences chapter lets the time run.",
        highlight=False,
    )
    demo.clock(paused=True)
    results = demo.events(
        {
            "type": "subscriber.subscribed",
            "email": "ada@example.com",
            "first_name": "Ada",
            "tags": {"add": ["trial", "newsletter"]},
            "attributes": {"plan": "trial", "company": "Analytical Engines"},
        },
        {
            "type": "subscriber.subscribed",
            "email": "grace@example.com",
            "first_name": "Grace",
            "tags": {"add": ["pro", "newsletter"]},
            "attributes": {"plan": "pro"},
        },
        {"type": "subscriber.subscribed", "email": "linus@Example.COM", "tags": {"add": ["newsletter"]}},
        {"type": "subscriber.subscribed", "email": "alan@example.com", "first_name": "Alan"},
    )
    demo.expect(
        all(r["sequences_started"] == ["onboarding"] for r in results),
        "not every subscriber started onboarding",
    )
    held = demo.held(len(results))
    from ops.outbox import read_outbox

    welcomes = [m for m in read_outbox(demo.runtime.outbox) if m["email_tags"].get("source") == "onboarding"]
    demo.console.print(f"  {len(welcomes)} welcome mails sent; {held} onboardings now stand at 'wait: 1d'")
    demo.expect(len(welcomes) == len(results), f"{len(welcomes)} welcome mails, expected {len(results)}")


def chapter_tag_change(demo: Demo) -> None:
    demo.chapter("2. Ada buys Pro: her tags change, her onboarding ends")
    results = demo.events(
        {
            "type": "purchase.completed",
            "email": "ada@example.com",
            "tags": {"add": ["pro"], "remove": ["trial"]},
            "attributes": {"plan": "pro"},
            "id": "order-1001",
        }
    )
    demo.expect(results[0]["tags_added"] == ["pro"], "the pro tag was not added")
    demo.expect(
        results[0]["sequences_stopped"] == ["onboarding"], "the purchase did not end Ada's onboarding"
    )


def chapter_unsubscribe(demo: Demo) -> None:
    demo.chapter("3. Linus unsubscribes")
    results = demo.events({"type": "subscriber.unsubscribed", "email": "linus@example.com"})
    demo.expect(results[0]["status"] == "unsubscribed", "the subscriber is not unsubscribed")
    demo.expect(results[0]["sequences_stopped"] == ["onboarding"], "unsubscribing did not stop onboarding")


def chapter_bad_requests(demo: Demo) -> None:
    demo.chapter("4. Bad requests are refused, and nothing is written")
    status, answer = demo.post("/v1/events", {"type": "subscriber.subscribed", "email": "not-an-email"})
    demo.refused(status, answer)
    demo.expect(status == 400, f"a bad email got {status}, not 400")
    status, answer = demo.post(
        "/v1/events", {"type": "subscriber.subscribed", "email": "x@example.com"}, key="nope"
    )
    demo.refused(status, answer)
    demo.expect(status == 401, f"a wrong key got {status}, not 401")


def chapter_state(demo: Demo) -> None:
    demo.chapter("What is in DynamoDB and the outbox now")
    from ops.outbox import read_outbox
    from ops.tables import outbox_table
    from shared.store.dynamo import deserialize

    table_name = demo.runtime.resources.tables["table_name"]
    items = [deserialize(i) for i in demo.ddb().scan(TableName=table_name)["Items"]]
    profiles = sorted((i for i in items if i["SK"] == "PROFILE"), key=lambda i: i["email"])
    # why an address receives nothing: its SUPPRESSION item (a bounce or complaint), an address fact
    reasons = {
        i["PK"].removeprefix("SUB#"): str(i.get("reason", "")) for i in items if i["SK"] == "SUPPRESSION"
    }
    subscribers = Table(title=f"Subscribers ({table_name}, SK = PROFILE; SUPPRESSION items)")
    for column in ("email", "first name", "status", "tags", "attributes"):
        subscribers.add_column(column)
    for item in profiles:
        subscribers.add_row(
            item["email"],
            item.get("first_name") or "",
            _status(item, reasons.get(item["email"])),
            ", ".join(sorted(item.get("tags", set()))),
            json.dumps({k: str(v) for k, v in item.get("attributes", {}).items()}),
        )
    demo.console.print(subscribers)
    tags = sorted((i["PK"], i["SK"]) for i in items if i["PK"].startswith("TAG#"))
    index = Table(title="TAG# index (inverted partners of the profile tags)")
    index.add_column("PK")
    index.add_column("SK")
    for pk, sk in tags:
        index.add_row(pk, sk)
    demo.console.print(index)
    demo.expect(bool(profiles), "no subscribers were stored")
    expected_pairs = {(f"TAG#{t}", f"SUB#{p['email']}") for p in profiles for t in p.get("tags", set())}
    demo.expect(set(tags) == expected_pairs, "the TAG# index and the profile tags disagree")
    executions = sorted((i["PK"], i["SK"]) for i in items if "EXEC#" in i["PK"] + i["SK"])
    demo.console.print(f"EXEC# pairs (running sequence executions): {len(executions) or 'none'}")
    demo.expect(not executions, f"executions still registered after the story: {executions}")
    messages = read_outbox(demo.runtime.outbox)
    if messages:
        demo.console.print(outbox_table(messages))
    else:
        demo.console.print(
            f"Outbox {demo.runtime.outbox}: empty (no capability has sent mail in this story yet)"
        )


def _status(profile: dict[str, Any], suppression: str | None) -> str:
    """A profile's status as its reader gets mail: a suppression (why nothing is sent, whatever
    the opt-in says) first, then an opt-out; else ``subscribed``."""
    if suppression is None and not profile.get("suppressed"):
        return str(profile["status"])
    said = f"[yellow]suppressed ({suppression or 'flagged'})[/yellow]"
    return said if profile["status"] == "subscribed" else f"{said}, {profile['status']}"


def chapter_sending(demo: Demo) -> None:
    demo.chapter("5. One send job delivered 3 times: one mail; a one-click unsubscribe")
    import time
    from email import policy
    from email.parser import BytesParser

    from ops.outbox import read_outbox
    from shared.sending.jobs import SendJob, enqueue

    job = SendJob(email="ada@example.com", template="welcome", source="demo", step="welcome")
    enqueue([job, job, job], demo.runtime.resources.queues["SendQueue"].url, demo.runtime.aws.client("sqs"))
    demo.console.print("  queued the same send job 3 times (send queue -> sender Lambda -> local SES)")
    deadline = time.monotonic() + WAIT_S
    mails: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        mails = [m for m in read_outbox(demo.runtime.outbox) if m["email_tags"].get("source") == "demo"]
        if mails:
            time.sleep(1.0)  # let the two duplicates reach the sender too
            mails = [m for m in read_outbox(demo.runtime.outbox) if m["email_tags"].get("source") == "demo"]
            break
        time.sleep(0.1)
    demo.expect(len(mails) == 1, f"expected exactly 1 welcome mail, found {len(mails)}")
    if not mails:
        return
    eml = demo.runtime.outbox / f"{mails[0]['message_id']}.eml"
    msg = BytesParser(policy=policy.default).parsebytes(eml.read_bytes())
    url = str(msg["List-Unsubscribe"]).split(",")[0].strip().strip("<>")
    demo.console.print(f"  [green]sent[/green] {msg['Subject']!r} to {msg['To']}", highlight=False)
    demo.console.print(f"  List-Unsubscribe: <{url[:52]}...>", highlight=False)
    demo.console.print(f"  List-Unsubscribe-Post: {msg['List-Unsubscribe-Post']}", highlight=False)
    plain = msg.get_body(("plain",))
    text = plain.get_content().strip().splitlines() if plain is not None else []
    demo.console.print("  text/plain: " + " / ".join(line for line in text[:4] if line))

    request = urllib.request.Request(  # noqa: S310 - the local https front
        url,
        data=b"List-Unsubscribe=One-Click",
        headers={"content-type": "application/x-www-form-urlencoded"},
        method="POST",
    )
    # https with the runtime's self-signed certificate: trusted explicitly, verified
    with urllib.request.urlopen(request, timeout=30, context=demo.runtime.ssl_context()) as response:  # noqa: S310
        demo.console.print(f"  [green]{response.status}[/green] one-click POST (RFC 8058) to the link")
    table = demo.runtime.resources.tables["table_name"]
    item = demo.ddb().get_item(
        TableName=table, Key={"PK": {"S": "SUB#ada@example.com"}, "SK": {"S": "PROFILE"}}, ConsistentRead=True
    )["Item"]
    demo.console.print(f"  Ada is now [bold]{item['status']['S']}[/bold]")
    demo.expect(item["status"]["S"] == "unsubscribed", "the one-click POST did not unsubscribe Ada")


def chapter_engagement(demo: Demo) -> None:
    demo.chapter("6. Engagement: a bounce, a complaint, opens and a click")
    import time

    from local_aws import ses_events as ev
    from ops.outbox import read_outbox
    from ops.tables import counters_table
    from shared.engagement.suppression import Suppressions
    from shared.sending.jobs import SendJob, enqueue
    from shared.store.stats import StatsStore

    source, bounce, complaint, grace = (
        "demo-digest",
        "bounce@simulator.amazonses.com",
        "complaint@simulator.amazonses.com",
        "grace@example.com",
    )
    tables = demo.runtime.resources.tables
    store = demo.store()
    stats = StatsStore(tables["table_name"], tables["events_table_name"], demo.ddb())

    def wait(check: Callable[[], bool]) -> bool:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and not check():
            time.sleep(0.1)
        return check()

    demo.console.print("  Two SES mailbox simulator addresses subscribe: onboarding welcomes them too.")
    demo.events(*({"type": "subscriber.subscribed", "email": e} for e in (bounce, complaint)))
    simulated = (bounce, complaint)
    # 6 onboarding welcome mails in the story (4 in chapter 1, these 2): the bounce is not delivered
    welcomes = (6, 5, 1, 1)  # sent, delivered, bounced, complained

    def counted() -> tuple[int, ...]:
        return tuple(stats.source("onboarding").total(m) for m in ("send", "delivery", "bounce", "complaint"))

    def suppressed_and_stopped() -> bool:
        listed = {s.email for s in Suppressions(store).list()}
        return all(e in listed and not store.list_executions(e) for e in simulated)

    done = wait(lambda: suppressed_and_stopped() and counted() == welcomes)
    demo.expect(
        suppressed_and_stopped(),
        "the bounce and the complaint did not suppress both addresses and stop their onboarding",
    )
    for suppressed in Suppressions(store).list():
        demo.console.print(f"  [yellow]suppressed[/yellow] {suppressed.email} ({suppressed.reason})")
    demo.console.print("  ... and their onboarding stopped (suppression stops every sequence).")
    sent, delivered, bounced, complained = counted()
    demo.console.print(
        f"  onboarding so far: {sent} sent, {delivered} delivered, "
        f"{bounced} bounced, {complained} complained",
        highlight=False,
    )
    demo.expect(
        done, f"onboarding counters {counted()}, expected {welcomes} (sent, delivered, bounced, complained)"
    )

    demo.console.print(f"  A digest ({source}) is queued for Grace and the two simulator addresses.")
    enqueue(
        [
            SendJob(email=e, template="welcome", source=source, step="digest-1")
            for e in (bounce, complaint, grace)
        ],
        demo.runtime.resources.queues["SendQueue"].url,
        demo.runtime.aws.client("sqs"),
    )

    def skipped(email: str) -> bool:
        return any(
            e["type"] == "send_skipped" and e.get("source") == source and e.get("reason") == "suppressed"
            for e in store.list_events(email)
        )

    done = wait(lambda: stats.source(source).total("delivery") >= 1 and all(skipped(e) for e in simulated))
    demo.expect(done, "the digest was not delivered to Grace and skipped for the suppressed addresses")
    demo.console.print("  skipped for both suppressed addresses (reason recorded: suppressed)")
    mail = next(
        (
            m
            for m in read_outbox(demo.runtime.outbox)
            if m["email_tags"].get("source") == source and m["destination"] == [grace]
        ),
        None,
    )
    demo.expect(mail is not None, "no digest to Grace in the outbox")
    if mail is not None:
        from datetime import UTC, datetime, timedelta

        now = datetime.now(UTC)
        at = [ev.iso(now + timedelta(minutes=m)) for m in (1, 2, 3)]  # two real opens, not one redelivered
        for record in (
            ev.open_event(mail["mail"], at[0]),
            ev.open_event(mail["mail"], at[1]),
            ev.click_event(mail["mail"], "https://example.com/pricing", at[2]),
        ):
            demo.runtime.ses.emit(record)
        wait(lambda: stats.source(source).total("click") >= 1 and stats.source(source).total("open") >= 2)
    counters = stats.source(source)
    demo.console.print(counters_table(f"mailstep stats --broadcast {source}", counters.rows()))
    demo.expect(
        (counters.total("send"), counters.total("delivery")) == (1, 1),
        "expected the digest sent and delivered once (to Grace only)",
    )
    demo.expect((counters.total("open"), counters.unique("open")) == (2, 1), "expected 2 opens, 1 unique")
    demo.expect(counters.total("click") == 1, "expected 1 click")
    demo.expect(
        (counters.total("bounce"), counters.total("complaint")) == (0, 0),
        "the suppressed addresses must get no digest, so no bounce or complaint",
    )
    demo.expect(
        counters.event_metrics() == stats.recompute(source=source), "counters differ from the events table"
    )


def chapter_broadcast(demo: Demo) -> None:
    demo.chapter("Broadcast: the newsletter tag, rate-limited, exactly once")
    import time

    from ops.outbox import read_outbox
    from shared.broadcasts.model import parse_request

    service = demo.broadcasts()
    request = parse_request(id="demo-news", template="newsletter/monthly", audience={"tags": ["newsletter"]})
    size, sample = service.preview(request)
    demo.console.print(f"  dry run: {size} subscriber(s) tagged newsletter and still subscribed: {sample}")
    answer = service.send(request)
    record = answer.record
    demo.console.print(f"  sent {record.id}: {record.status} at <= {record.send_rate:g} mails/s")
    deadline = time.monotonic() + WAIT_S
    while (record := service.get("demo-news")).status != "done" and time.monotonic() < deadline:
        time.sleep(0.1)
    demo.console.print(
        f"  {record.status}: audience {record.audience_size}, sent {record.sent}, failed {record.failed}",
        highlight=False,
    )
    demo.expect(record.status == "done" and record.sent == size, f"broadcast ended {record.public()}")
    again = service.send(request)
    time.sleep(0.5)
    mails = [m for m in read_outbox(demo.runtime.outbox) if m["email_tags"].get("source") == "demo-news"]
    recipients = sorted(d for m in mails for d in m["destination"])
    demo.console.print(f"  the same --id again: created={again.created}; in the outbox: {recipients}")
    stored = service.get("demo-news")
    demo.expect(
        not again.created and stored.sent == size, f"re-send: created={again.created}, sent {stored.sent}"
    )
    demo.expect(set(sample) <= set(recipients), f"{sample} not all in the outbox")


def chapter_sequences(demo: Demo) -> None:
    demo.chapter("Sequences: onboarding in virtual time")
    import time

    from ops.outbox import read_outbox
    from shared.sending.sender import decode_tag_value

    store = demo.store()
    waiting = store.sequence_members("onboarding")
    demo.console.print(f"  still in onboarding, at the 1-day wait: {', '.join(waiting) or 'nobody'}")
    demo.expect(
        sorted(waiting) == ["alan@example.com", "grace@example.com"],
        f"expected Grace and Alan to be waiting in onboarding, found {waiting}",
    )
    sfn = demo.runtime.aws.client("stepfunctions")
    machine = next(
        m["stateMachineArn"]
        for m in sfn.list_state_machines()["stateMachines"]
        if m["name"].endswith("-seq-onboarding")
    )

    def running() -> bool:
        """A member left, or an execution not yet ended: the last step removes the member's pair,
        and its execution ends just after (Step Functions moves on to the end state)."""
        if store.sequence_members("onboarding"):
            return True
        return bool(sfn.list_executions(stateMachineArn=machine, statusFilter="RUNNING")["executions"])

    before, started = demo.runtime.clock.advanced_s, time.monotonic()
    demo.clock(paused=False)
    deadline = time.monotonic() + WAIT_S
    while (still := running()) and time.monotonic() < deadline:
        time.sleep(0.1)
    demo.expect(not still, f"onboarding executions still running after {WAIT_S:.0f} s")
    days = (demo.runtime.clock.advanced_s - before) / 86400
    demo.console.print(
        f"  virtual time runs again: {days:g} days of waits passed in {time.monotonic() - started:.1f} s",
        highlight=False,
    )

    ended: dict[str, str] = {}  # subscriber -> execution status
    for run in sfn.list_executions(stateMachineArn=machine)["executions"]:
        email = json.loads(sfn.describe_execution(executionArn=run["executionArn"])["input"])["email"]
        ended[email] = {"SUCCEEDED": "completed", "ABORTED": "stopped"}.get(run["status"], run["status"])
    received: dict[str, list[tuple[str, str]]] = {}
    for meta in read_outbox(demo.runtime.outbox):
        if decode_tag_value(meta["email_tags"].get("source", "")) == "onboarding":
            template = decode_tag_value(meta["email_tags"]["template"])
            received.setdefault(meta["destination"][0], []).append((template, meta["subject"]))
    branches = {"onboarding/pro-tips": "pro branch", "onboarding/upgrade": "upgrade branch"}
    common = ["onboarding/welcome", "onboarding/tips"]
    # subscriber -> (how the story ended their onboarding, the mails it sent them)
    expected: dict[str, tuple[str, list[str]]] = {
        "grace@example.com": ("completed", [*common, "onboarding/pro-tips", "onboarding/check-in"]),
        "alan@example.com": ("completed", [*common, "onboarding/upgrade", "onboarding/check-in"]),
        "ada@example.com": ("stopped", ["onboarding/welcome"]),
        "linus@example.com": ("stopped", ["onboarding/welcome"]),
        "bounce@simulator.amazonses.com": ("stopped", ["onboarding/welcome"]),
        "complaint@simulator.amazonses.com": ("stopped", ["onboarding/welcome"]),
    }
    why = {
        "ada@example.com": "by purchase.completed (exit_on)",
        "linus@example.com": "by the unsubscribe",
        "bounce@simulator.amazonses.com": "by the suppression (bounce)",
        "complaint@simulator.amazonses.com": "by the suppression (complaint)",
    }
    for email, (end, templates) in expected.items():
        mails = received.get(email, [])
        status = ended.get(email, "no execution")
        demo.console.print(f"  [bold]{email}[/bold]: {status} {why.get(email, '')}".rstrip(), highlight=False)
        demo.expect(status == end, f"{email}: onboarding {status}, expected {end}")
        for number, (template, subject) in enumerate(mails, start=1):
            note = f"  ({branches[template]})" if template in branches else ""
            demo.console.print(f"    {number}. {subject:<34.34} {template}{note}", highlight=False)
        demo.expect(
            [t for t, _ in mails] == templates, f"{email} got {[t for t, _ in mails]}, not {templates}"
        )
    demo.expect(set(received) == set(expected), f"onboarding mail went to {sorted(received)}")


Chapter = Callable[[Demo], None]
CHAPTERS: list[Chapter] = [
    chapter_subscribers,
    chapter_tag_change,
    chapter_unsubscribe,
    chapter_bad_requests,
    chapter_sending,
    chapter_engagement,
    chapter_broadcast,
    chapter_sequences,
    chapter_signup_topics,
]
FINALE: Chapter = chapter_state


def tell(runtime: Any, console: Console) -> Demo:
    """Every chapter in order, then the finale, against ``runtime`` (a running
    ``local_aws.LocalRuntime``); the returned story lists what did not go as expected."""
    story = Demo(runtime=runtime, console=console)
    for chapter in [*CHAPTERS, FINALE]:
        chapter(story)
    return story
