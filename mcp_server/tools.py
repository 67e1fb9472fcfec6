"""The mailstep MCP server (``mailstep mcp``, stdio), built on the official MCP Python SDK.

Each tool parses its arguments and calls THE SAME shared logic as the matching CLI command,
then returns plain JSON:

- subscriber_get/list/update/unsubscribe/resubscribe/erase: ``ops.admin.SubscriberAdmin``
  (``mailstep subscribers``);
- topics_list, subscriber_topics, subscriber_topics_update, signups_pending:
  ``ops.topics.TopicAdmin`` (``mailstep topics list``, ``mailstep subscribers topics``,
  ``mailstep signups pending``);
- sequences_list, sequence_subscribers: ``shared.sequences.validate.load_catalog`` and
  ``ops.sequence_view.members`` (``mailstep sequences list|subscribers``);
- failed_sequence_executions: ``ops.admin.failed_executions`` (``mailstep executions failed``);
- events_by_subscriber: ``SubscriberStore.list_events`` (``mailstep events``);
  events_by_template, events_by_sequence: ``StatsStore.events`` (the events table GSIs
  TemplateIndex and SequenceIndex, as ``mailstep stats --since`` reads them; no Deliveries);
- stats: ``shared.store.stats.report``, ``StatsStore.sources`` and ``StatsStore.signups``
  (``mailstep stats [--signups]``);
- templates_list/validate/preview: ``ops.templates.rows`` and ``shared.sending.rendering.Renderer``
  (``mailstep templates``);
- suppression_list/remove: ``shared.engagement.suppression.Suppressions`` (``mailstep suppression``);
- broadcasts_list, broadcast_get, broadcast_dry_run, broadcast_send, broadcast_resend:
  ``ops.broadcasts.Broadcasts`` list/details/check+preview/send/resend with
  ``shared.broadcasts.model.parse_request`` (``mailstep broadcast list|get|send [--dry-run]|resend``);
- warmup_status (and broadcast_dry_run's ``warmup`` plan): ``ops.warmup.WarmupService``
  (``mailstep warmup status|plan``);
- doctor: ``ops.doctor.run`` (``mailstep doctor``);
- webhooks_add/list/remove/enable/test/deliveries/replay/rotate: ``ops.webhooks.Webhooks``
  (``mailstep webhooks ...``);
- hygiene_report, hygiene_run, hygiene_backfill: ``ops.hygiene``
  (``mailstep hygiene report|run|backfill [--dry-run]``).

Destructive tools ask for an explicit ``confirm=true`` (erase, broadcast send and resend,
webhooks_remove).
Domain errors become tool errors with the message (``isError``), never a crash of the server.
Logs go to stderr: stdout carries the protocol.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from ops.admin import SubscriberAdmin, email_arg, failed_executions, make_update
from ops.targets import Target
from ops.topics import TopicAdmin
from shared.core.errors import MailstepError
from shared.core.topics import TOPICS_FILE
from shared.engagement.suppression import Suppressions
from shared.sending.rendering import TEMPLATES_DIR, Renderer
from shared.sequences import SEQUENCES_DIR
from shared.store.stats import StatsStore
from shared.store.subscribers import SubscriberStore

INSTRUCTIONS = """mailstep: self-hosted email (subscribers, sequences, engagement) on AWS.
Tools read and change the live data of one deployment ({label}). Emails are normalised
(domain lower-cased). subscriber_erase deletes everything about a person (GDPR) and needs
confirm=true. broadcast_send mails real people: show broadcast_dry_run's audience to the
user first; it needs confirm=true. Lists page with a cursor: pass the returned cursor to get
the next page."""

F = TypeVar("F", bound=Callable[..., Any])


def _tool_errors(fn: F) -> F:
    """Domain and validation errors reach the assistant as a tool error with the message."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (MailstepError, ValueError) as exc:
            raise ToolError(f"{type(exc).__name__}: {exc}") from None

    return wrapper  # type: ignore[return-value]


def _plain(value: Any) -> Any:
    """Events-table items -> JSON (Decimal, sets)."""
    from shared.store.dynamo import from_dynamo

    return json.loads(json.dumps(from_dynamo(value), default=str))


Register = Callable[[F], F]  # adds a function as a tool of the server being built


def build_server(
    target: Target,
    *,
    sequences_dir: Path = SEQUENCES_DIR,
    templates_dir: Path = TEMPLATES_DIR,
    topics_file: Path = TOPICS_FILE,
) -> MCPServer:
    admin = SubscriberAdmin.of(target)  # every adapter below uses the target's clients
    server = MCPServer("mailstep", instructions=INSTRUCTIONS.format(label=target.label), version="0.1.0")

    def tool(fn: F) -> F:
        server.add_tool(_tool_errors(fn), name=fn.__name__, description=fn.__doc__)
        return fn

    _subscriber_tools(tool, admin)
    _topic_tools(tool, target, topics_file)
    _sequence_tools(tool, target, admin.store, sequences_dir, templates_dir)
    _event_tools(tool, admin.store, target.stats_store())
    _template_tools(tool, templates_dir)
    _broadcast_tools(tool, target)
    _health_tools(tool, target, Suppressions(admin.store, admin.engine))
    _webhook_tools(tool, target)
    _reputation_tools(tool, target)
    _hygiene_tools(tool, target)
    return server


def _subscriber_tools(tool: Register[Any], admin: SubscriberAdmin) -> None:
    @tool
    def subscriber_get(email: str) -> dict[str, Any]:
        """One subscriber: profile (status, tags, attributes), active sequences, suppression."""
        return admin.get(email).public()

    @tool
    def subscribers_list(
        tag: str | None = None, status: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> dict[str, Any]:
        """A page of subscribers, optionally with a tag and/or status (subscribed|unsubscribed).
        Returns {subscribers, cursor}; pass cursor back for the next page (null: last page)."""
        return admin.list(tag=tag, status=status, limit=limit, cursor=cursor).public()

    @tool
    def subscriber_update(
        email: str,
        add_tags: list[str] | None = None,
        remove_tags: list[str] | None = None,
        attributes: dict[str, Any] | None = None,
        first_name: str | None = None,
    ) -> dict[str, Any]:
        """Change an existing subscriber: add/remove tags, set attributes (null deletes one),
        replace the first name."""
        change = make_update(add_tags or (), remove_tags or (), attributes, first_name)
        return admin.update(email, change).public()

    @tool
    def subscriber_unsubscribe(email: str) -> dict[str, Any]:
        """Unsubscribe (remembered) and stop the subscriber's marketing sequences."""
        return admin.unsubscribe(email).public()

    @tool
    def subscriber_resubscribe(email: str) -> dict[str, Any]:
        """Opt a previously unsubscribed subscriber in again (only on their explicit request)."""
        return admin.resubscribe(email).public()

    @tool
    def subscriber_erase(email: str, confirm: bool = False) -> dict[str, Any]:
        """GDPR erase: stop every sequence and delete every item of the subscriber in both
        tables. Irreversible: requires confirm=true."""
        if confirm is not True:
            raise ToolError("erasing is irreversible: call again with confirm=true")
        return admin.delete(email).public()


def _topic_tools(tool: Register[Any], target: Target, topics_file: Path) -> None:
    def topics() -> TopicAdmin:
        return TopicAdmin.of(target, topics_file)  # topics.yaml read per call: edits show at once

    @tool
    def topics_list() -> dict[str, Any]:
        """Every topic of topics.yaml with how many subscribed, not suppressed readers receive
        it and how many opted in or out explicitly. Reads the whole table once (a Scan)."""
        return topics().counts().public()

    @tool
    def subscriber_topics(email: str) -> dict[str, Any]:
        """One subscriber's topics: each topic, received or not, by their choice or by default."""
        return topics().subscriber(email).public()

    @tool
    def subscriber_topics_update(
        email: str, on: list[str] | None = None, off: list[str] | None = None
    ) -> dict[str, Any]:
        """Turn topics on and/or off for one subscriber (the other topics stay as they are).
        An unknown topic is an error naming it and changes nothing. Returns the topics after."""
        return topics().change(email, on or [], off or []).public()

    @tool
    def signups_pending(limit: int = 100) -> dict[str, Any]:
        """Sign-ups waiting for their confirmation click (not expired), newest first:
        {total, pending: [{email, form, created_at, expires_at, last_mail_at, topics}]}."""
        return topics().pending(limit=limit).public()


def _sequence_tools(
    tool: Register[Any], target: Target, store: SubscriberStore, sequences_dir: Path, templates_dir: Path
) -> None:
    @tool
    def sequences_list() -> list[dict[str, Any]]:
        """Every sequence with its trigger, exit events, kind and active execution count."""
        from shared.sequences.validate import load_catalog

        catalog, problems = load_catalog(sequences_dir, templates_dir)
        rows = [
            {
                "id": s.id,
                "trigger": s.trigger_event,
                "exit_on": list(s.exit_on),
                "transactional": s.transactional,
                "active_executions": len(store.sequence_members(s.id)),
            }
            for s in catalog
        ]
        rows += [{"invalid": str(p)} for p in problems]
        return rows

    @tool
    def sequence_subscribers(sequence_id: str) -> list[dict[str, Any]]:
        """Subscribers with an active execution of the sequence, with start time and execution."""
        from ops.sequence_view import members

        return [m.public() for m in members(store, sequence_id)]

    @tool
    def failed_sequence_executions(sequence_id: str | None = None) -> list[dict[str, Any]]:
        """FAILED, TIMED_OUT and ABORTED executions of the sequence state machines, newest first."""
        return [
            f.public()
            for f in failed_executions(
                sequence_id, arn_prefix=target.settings.state_machine_arn_prefix, aws=target.aws
            )
        ]


def _event_tools(tool: Register[Any], store: SubscriberStore, stats_store: StatsStore) -> None:
    @tool
    def events_by_subscriber(email: str) -> list[dict[str, Any]]:
        """Every event of one subscriber (API events, sends, SES events), oldest first."""
        return list(_plain(store.list_events(email_arg(email))))

    @tool
    def events_by_template(template: str, since: str | None = None, limit: int = 200) -> list[dict[str, Any]]:
        """Events of one template key (e.g. onboarding/welcome), optionally from a date on;
        Deliveries are not indexed (the template's counters have their count)."""
        return _events(stats_store, template=template, since=since, limit=limit)

    @tool
    def events_by_sequence(source: str, since: str | None = None, limit: int = 200) -> list[dict[str, Any]]:
        """Events of one sequence or broadcast id, optionally from a date on (2026-01-31);
        Deliveries are not indexed (the source's counters have their count)."""
        return _events(stats_store, source=_sequence_arg(source), since=since, limit=limit)

    @tool
    def stats(
        sequence: str | None = None,
        broadcast: str | None = None,
        template: str | None = None,
        since: str | None = None,
        signups: bool = False,
    ) -> dict[str, Any]:
        """Engagement: totals, unique opens/clicks and rates of a sequence, broadcast or
        template (every source when none is named). signups=true: instead the sign-ups
        (double opt-in), confirmations, confirmation rate and single opt-ins."""
        from shared.store.stats import report

        chosen = [v for v in (sequence, broadcast, template) if v]
        if len(chosen) + signups > 1:
            raise ToolError("name at most one of sequence, broadcast, template, signups")
        if signups:
            if since:
                raise ToolError("since needs sequence, broadcast or template")
            return stats_store.signups().public()
        if not chosen:
            return {name: counters.rows() for name, counters in stats_store.sources().items()}
        counters = report(stats_store, source=sequence or broadcast, template=template, since=since)
        return {"scope": chosen[0], "since": since, "rows": counters.rows()}


def _template_tools(tool: Register[Any], templates_dir: Path) -> None:
    @tool
    def templates_list() -> list[dict[str, Any]]:
        """Template keys with their subject and layout."""
        from ops.templates import rows

        return [{k: row[k] for k in ("key", "subject", "layout")} for row in rows(Renderer(templates_dir))]

    @tool
    def templates_validate() -> dict[str, Any]:
        """Check every template (front matter, syntax, layouts, variables); lists the problems."""
        engine = Renderer(templates_dir)
        problems = engine.validate()
        return {"ok": not problems, "templates": len(engine.keys()), "problems": [str(p) for p in problems]}

    @tool
    def template_preview(
        key: str,
        email: str = "preview@example.com",
        first_name: str = "Ada",
        data: dict[str, Any] | None = None,
        subject: str | None = None,
        transactional: bool = False,
    ) -> dict[str, Any]:
        """Render one template for a sample subscriber: subject, preheader, text and HTML."""
        from ops.templates import identity_from_env

        context = identity_from_env().preview_context(
            email=email, first_name=first_name, data=data or {}, transactional=transactional
        )
        rendered = Renderer(templates_dir).render(key, context, subject=subject)
        return {
            "subject": rendered.subject,
            "preheader": rendered.preheader,
            "text": rendered.text,
            "html": rendered.html,
        }


def _broadcast_arguments(
    template: str,
    subject: str | None = None,
    tags: list[str] | None = None,
    any_tags: list[str] | None = None,
    exclude_tags: list[str] | None = None,
    where: list[str] | None = None,
    at: str | None = None,
    topic: str | None = None,
    opened: list[str] | None = None,
    clicked: list[str] | None = None,
    not_opened: list[str] | None = None,
    engaged_within_days: int | None = None,
    not_engaged_within_days: int | None = None,
    machine_opens: bool = False,
) -> None:
    """The parameters broadcast_dry_run and broadcast_send share (see :func:`_broadcast_tool`)."""


def _broadcast_tool(fn: F) -> F:
    """Give ``fn``, which takes ``**arguments``, the parameters of :func:`_broadcast_arguments`
    followed by its own: the MCP SDK builds a tool's input schema from this signature, so the
    two broadcast tools cannot drift apart (as ``cli.target.targeted`` does for typer)."""
    shared = inspect.signature(_broadcast_arguments, eval_str=True).parameters.values()
    own = inspect.signature(fn, eval_str=True)
    parameters = [*shared, *(p for p in own.parameters.values() if p.kind is not p.VAR_KEYWORD)]
    fn.__signature__ = own.replace(parameters=parameters)  # type: ignore[attr-defined]
    return fn


def _broadcast_request(arguments: dict[str, Any], broadcast_id: str | None = None) -> Any:
    from ops.broadcast_requests import broadcast_request

    return broadcast_request(
        template=arguments["template"],
        subject=arguments.get("subject"),
        tags=arguments.get("tags") or [],
        any_tags=arguments.get("any_tags") or [],
        exclude_tags=arguments.get("exclude_tags") or [],
        where=arguments.get("where") or [],
        topic=arguments.get("topic"),
        at=arguments.get("at"),
        broadcast_id=broadcast_id,
        opened=arguments.get("opened") or [],
        clicked=arguments.get("clicked") or [],
        not_opened=arguments.get("not_opened") or [],
        engaged_within_days=arguments.get("engaged_within_days"),
        not_engaged_within_days=arguments.get("not_engaged_within_days"),
        machine_opens=bool(arguments.get("machine_opens")),
    )


def _broadcast_tools(tool: Register[Any], target: Target) -> None:
    def broadcasts() -> Any:
        from ops.broadcasts import Broadcasts

        return Broadcasts.from_settings(target.settings, target.aws)

    @tool
    def broadcasts_list(limit: int = 50) -> list[dict[str, Any]]:
        """Broadcasts, newest first: status, template, audience size, sent, skipped, failed."""
        return [record.public() for record in broadcasts().list(limit)]

    @tool
    def broadcast_get(broadcast_id: str) -> dict[str, Any]:
        """One broadcast: its record merged with its engagement counters; an A/B test's
        settings (ab), its decision (ab_decision: winner, reason, per variant delivered,
        engaged, rate) and its rest."""
        return dict(broadcasts().details(broadcast_id))

    @tool
    @_broadcast_tool
    def broadcast_dry_run(**arguments: Any) -> dict[str, Any]:
        """Who a broadcast would reach, without sending: audience size, a sample, and under a
        warm-up ramp the plan of days it spreads over (warmup.line). Audience:
        ALL of tags, at least one of any_tags, none of exclude_tags, attribute conditions in
        where (plan=pro, plan!=free, seats>3, country in de,fr); with topic (topics_list) only
        readers who receive that topic. Engagement (people only unless machine_opens): opened /
        clicked a mail of each of these broadcast or sequence ids, not_opened (sent each of
        these broadcasts and did not open it), engaged_within_days / not_engaged_within_days
        (opened or clicked any mail in the last N days, or not)."""
        request = _broadcast_request(arguments)
        service = broadcasts()
        service.check(request)
        size, sample = service.preview(request)
        from ops.warmup import WarmupService

        plan = WarmupService.of(target).plan(size)  # the warm-up's spread over days (None: all today)
        return {
            "audience_size": size,
            "sample": sample,
            "audience": request.audience.describe(),
            "warmup": plan.public() if plan is not None else None,
        }

    @tool
    @_broadcast_tool
    def broadcast_send(
        broadcast_id: str | None = None, confirm: bool = False, **arguments: Any
    ) -> dict[str, Any]:
        """Send (or schedule with at, ISO 8601 with zone) a broadcast to real people. Run
        broadcast_dry_run first and show the audience; requires confirm=true. Re-sending with
        the same broadcast_id sends nothing new."""
        if confirm is not True:
            raise ToolError(
                "sending reaches real people: check broadcast_dry_run, then call with confirm=true"
            )
        answer = broadcasts().send(_broadcast_request(arguments, broadcast_id))
        return {"created": answer.created, "same": answer.same, "broadcast": answer.record.public()}

    @tool
    def broadcast_resend(
        broadcast_id: str,
        after: str,
        subject: str | None = None,
        template: str | None = None,
        resend_id: str | None = None,
        confirm: bool = False,
    ) -> dict[str, Any]:
        """Schedule the one follow-up of a broadcast to its recipients who did not open it as
        a person, ``after`` (90m, 48h, 2d) past its start; minus whoever unsubscribed, was
        suppressed or left the topic since. Mails real people: requires confirm=true. A second
        resend of the same broadcast is refused."""
        if confirm is not True:
            raise ToolError("a resend reaches real people: call with confirm=true")
        answer = broadcasts().resend(
            broadcast_id, after=after, subject=subject, template=template, resend_id=resend_id
        )
        return {"created": answer.created, "broadcast": answer.record.public()}

    @tool
    def warmup_status() -> dict[str, Any]:
        """The sending domain's warm-up: the ramp's day, today's allowance, sent today, left."""
        from ops.warmup import WarmupService

        return WarmupService.of(target).status()


def _health_tools(tool: Register[Any], target: Target, suppressions: Suppressions) -> None:
    @tool
    def suppression_list() -> list[dict[str, Any]]:
        """Suppressed addresses (permanent bounces, complaints, manual) with reason and time."""
        return [s.public() for s in suppressions.list()]

    @tool
    def suppression_remove(email: str) -> dict[str, Any]:
        """Lift a suppression (an operator decision: only when the address works again)."""
        address = email_arg(email)
        return {"email": address, "removed": suppressions.remove(address)}

    @tool
    def doctor() -> dict[str, Any]:
        """Health checks: SES identity/DKIM, sandbox, quota, configuration set, alarms, DLQs."""
        from ops.doctor import run

        return run(target).public()


def _webhook_tools(tool: Register[Any], target: Target) -> None:
    def webhooks() -> Any:
        from ops.webhooks import Webhooks

        return Webhooks.for_target(target)

    @tool
    def webhooks_add(url: str, events: list[str], description: str = "") -> dict[str, Any]:
        """Add a webhook endpoint (https URL; event types like subscriber.unsubscribed or families
        like email.*). Returns the endpoint and its signing secret: shown this once only."""
        added = webhooks().add(url, events, description)
        return {"endpoint": added.endpoint.public(), "secret": added.secret}

    @tool
    def webhooks_list() -> list[dict[str, Any]]:
        """Every webhook endpoint: url, events, status (enabled/disabled and why), failing since."""
        return [e.public() for e in webhooks().endpoints()]

    @tool
    def webhooks_remove(endpoint_id: str, confirm: bool = False) -> dict[str, Any]:
        """Remove an endpoint and its secret (nothing more is delivered to it): requires confirm=true."""
        if confirm is not True:
            raise ToolError("removing an endpoint stops its deliveries: call again with confirm=true")
        return webhooks().remove(endpoint_id).public()

    @tool
    def webhooks_enable(endpoint_id: str) -> dict[str, Any]:
        """Enable a disabled endpoint again (after a 410 Gone or 5 days of failures)."""
        return webhooks().enable(endpoint_id).public()

    @tool
    def webhooks_test(endpoint_id: str) -> dict[str, Any]:
        """Send a webhook.test event to one endpoint; its webhook-id (see webhooks_deliveries)."""
        return {"message_id": webhooks().test(endpoint_id)}

    @tool
    def webhooks_deliveries(endpoint_id: str, failed: bool = False, limit: int = 50) -> list[dict[str, Any]]:
        """An endpoint's deliveries, newest first, with every attempt's answer; failed=true: only
        the dead letters (every attempt of the schedule failed)."""
        return [d.public() for d in webhooks().deliveries(endpoint_id, failed=failed, limit=limit)]

    @tool
    def webhooks_replay(endpoint_id: str, since: str) -> dict[str, Any]:
        """Deliver again the failed deliveries of events since an ISO time (same webhook-id and body)."""
        return {"replayed": webhooks().replay(endpoint_id, since)}

    @tool
    def webhooks_rotate(endpoint_id: str) -> dict[str, Any]:
        """A new signing secret for an endpoint; the previous one keeps signing too for 24 hours.
        Returns the new secret: shown this once only."""
        rotated = webhooks().rotate(endpoint_id)
        return {"endpoint": rotated.endpoint.public(), "secret": rotated.secret}


def _sequence_arg(value: str) -> str:
    from shared.core.models import validate_name

    return validate_name(value, "sequence id")


def _events(stats_store: StatsStore, *, limit: int, since: str | None, **scope: str) -> list[dict[str, Any]]:
    from itertools import islice

    from shared.store.stats import parse_since

    if not 1 <= limit <= 1000:
        raise ValueError("limit must be 1..1000")
    items = stats_store.events(since=parse_since(since) if since else None, **scope)  # type: ignore[arg-type]
    return [_plain(item) for item in islice(items, limit)]


def serve(target: Target) -> None:
    """Run on stdio (``cli.target.select`` has sent the logs to stderr already)."""
    build_server(target).run("stdio")


def _reputation_tools(tool: Register[Any], target: Target) -> None:
    """The reputation guardrail (docs/reputation.md), as `mailstep reputation` offers it."""

    @tool
    def reputation_status() -> list[dict[str, Any]]:
        """Each SES configuration set's bounce and complaint rates against the guardrail's
        thresholds, and whether marketing sending is paused (and since when)."""
        from ops.reputation import Reputation

        return [s.public() for s in Reputation(target).status()]

    @tool
    def reputation_resume(force: bool = False) -> dict[str, Any]:
        """Re-enable marketing sending and resume the paused broadcasts (no duplicates). Refused
        while a rate is above its threshold unless force is true."""
        from ops.reputation import Reputation

        return Reputation(target).resume(force=force)


def _hygiene_tools(tool: Register[Any], target: Target) -> None:
    from ops import hygiene

    @tool
    def hygiene_report(at: str | None = None) -> dict[str, Any]:
        """List hygiene (docs/hygiene.md): cold subscribers, those at risk (cold within 14 days)
        and what the next daily run would change; ``at``: another day (YYYY-MM-DD)."""
        return hygiene.report(target, at=at)

    @tool
    def hygiene_run(dry_run: bool = True, confirm: bool = False, at: str | None = None) -> dict[str, Any]:
        """The daily list-hygiene run now (marks cold, unsubscribes after the grace period), as
        the scheduled function runs it. A dry run by default; changing needs confirm=true."""
        if not dry_run and not confirm:
            raise ToolError("hygiene_run changes subscribers: call again with confirm=true (or dry_run=true)")
        return hygiene.run(target, dry_run=dry_run, at=at)

    @tool
    def hygiene_backfill(
        dry_run: bool = True, confirm: bool = False, restart: bool = False
    ) -> dict[str, Any]:
        """Create the ENGAGEMENT items subscribers from before list hygiene lack, from their
        recorded opens and clicks, so the sunset sees them (idempotent; resumes where an
        unfinished run stopped unless restart=true). A dry run by default; writing needs confirm=true."""
        if not dry_run and not confirm:
            raise ToolError("hygiene_backfill writes: call again with confirm=true (or dry_run=true)")
        return hygiene.backfill(target, dry_run=dry_run, restart=restart)
