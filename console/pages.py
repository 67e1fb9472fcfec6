"""The console's pages and actions: parse the request, call ``ops``, render or redirect."""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from botocore.exceptions import ClientError
from jinja2 import TemplateError
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from console.site import Console, back, call, chart_data
from shared.core.errors import FieldProblem, InvalidInput, MailstepError, NotFound

if TYPE_CHECKING:
    from starlette.datastructures import FormData


RUN_ID = re.compile(r"[0-9a-f]{16}")  # a forecast's id in its URL (console.jobs)
# The forecast's at-risk bucket Queries in flight at once (the CLI's report: 16). The read shares
# the console's interpreter with the pages it serves (and, under `mailstep dev`, with the
# emulator answering it): at 16 a "Forecasting" refresh took up to 424 ms at 10,000 subscribers,
# at 4 up to 85 ms, with the read as long (python -m bench console: docs/console.md).
FORECAST_READERS = 4


def _lines(value: str) -> list[str]:
    """Comma- or newline-separated words of a form field."""
    return [w.strip() for part in value.splitlines() for w in part.split(",") if w.strip()]


def _subscriber_url(email: str) -> str:
    return "/subscribers/" + quote(email, safe="@")


def routes(c: Console) -> list[Route]:  # noqa: C901 - one closure per route, each small
    # ----- overview ------------------------------------------------------------------------------
    async def overview(request: Request) -> Response:
        from ops.overview import overview as build

        days = int(request.query_params.get("days", "30") or 30)
        catalog = c.catalog()
        records, paused = await asyncio.gather(call(c.broadcasts.list, 50), marketing_paused())
        data = await call(build, c.stats, catalog, [r.id for r in records], days=days)
        return c.page(
            request,
            "overview.html",
            o=data,
            chart=chart_data(data.public()),
            marketing_paused=paused,
            title="Overview",
        )

    async def marketing_paused() -> bool | str:
        """Whether marketing sending is paused, or why it is not known (the error code SES
        answered: credentials that may not read SES still see the rest of the overview)."""
        try:
            return bool(await call(c.reputation.marketing_paused))
        except ClientError as exc:
            return str(exc.response.get("Error", {}).get("Code") or "an error")

    async def count_subscribers(request: Request) -> Response:
        from ops.overview import count_by_status

        counts = await call(lambda: count_by_status(c.admin.iter()))
        return c.page(request, "counted.html", counts=counts, title="Subscribers by status")

    # ----- subscribers ---------------------------------------------------------------------------
    async def subscribers(request: Request) -> Response:
        from ops.search import Search, search

        q = request.query_params
        query = Search.of(q.get("q", ""), q.get("tag", ""), q.get("status", ""), q.get("topic", ""), c.topics)
        found = await call(search, c.admin, query, c.topics, limit=PAGE, cursor=q.get("cursor") or None)
        more = None
        if found.cursor:
            more = "?" + "&".join(
                f"{k}={quote(v, safe='')}" for k, v in {**dict(q), "cursor": found.cursor}.items() if v
            )
        return c.page(
            request,
            "subscribers.html",
            found=found,
            query=query,
            more=more,
            topics=c.topics,
            title="Subscribers",
        )

    async def subscriber(request: Request) -> Response:
        from ops.admin import email_arg
        from ops.subscriber_view import summary, timeline

        email = request.path_params["email"]
        address = email_arg(email)
        # Three independent reads, sent at once: the page waits for the slowest, not their sum.
        detail, topics, events = await asyncio.gather(
            call(c.admin.get, email),
            call(c.topic_admin.subscriber, email),
            call(c.admin.store.list_events, address),
        )
        steps = await call(_current_steps, c, detail.executions)
        return c.page(
            request,
            "subscriber.html",
            d=detail,
            steps=steps,
            p=detail.profile,
            topics=topics,
            timeline=timeline(events),
            summary=summary(events),
            attributes=chart_data(detail.profile.attributes),
            title=detail.profile.email,
        )

    async def subscriber_action(request: Request) -> Response:
        email = request.path_params["email"]
        action = request.path_params["action"]
        form = await request.form()
        handler = SUBSCRIBER_ACTIONS.get(action)
        if handler is None:
            raise NotFound(f"no action {action!r}")
        try:
            message, url = await call(handler, c, email, form)
        except MailstepError as exc:
            return back(_subscriber_url(email), error=str(exc))
        return back(url or _subscriber_url(email), msg=message)

    # ----- broadcasts ----------------------------------------------------------------------------
    async def broadcasts(request: Request) -> Response:
        from ops.overview import broadcast_reports

        records = await call(c.broadcasts.list, PAGE)
        reports, subjects = await asyncio.gather(
            call(broadcast_reports, c.stats, records), call(_subjects, c, {r.template for r in records})
        )
        return c.page(request, "broadcasts.html", reports=reports, subjects=subjects, title="Broadcasts")

    async def broadcast_new(request: Request) -> Response:
        from ops.broadcast_requests import new_broadcast_id, suggested_tags

        groups, recent = await asyncio.gather(call(_sendable, c), call(c.broadcasts.list, RECENT_SOURCES))
        first = next((row["key"] for _, rows in groups for row in rows), "")
        return c.page(
            request,
            "broadcast_new.html",
            groups=groups,
            first_template=first,
            topics=c.topics,
            known_tags=suggested_tags(recent, c.catalog()),
            recent=[b.id for b in recent],
            ab_id=new_broadcast_id(),
            ab_rows=AB_ROWS,
            sequences=sorted(s.id for s in c.catalog()),
            title="New broadcast",
        )

    async def audience(request: Request) -> Response:
        form = await request.form()
        built = _request(form)
        cursor = str(form.get("cursor") or "") or None
        if built.ab is not None:  # an A/B test: each variant's test group and the rest, as --dry-run
            return JSONResponse(await call(_split, c, built))
        part = await call(c.broadcasts.count, built, cursor)
        answer: dict[str, Any] = {
            "size": part.size,
            "sample": part.sample,
            "cursor": part.cursor,
            "audience": built.audience.describe(),
        }
        if part.cursor is None:  # the last part: the whole audience's warm-up plan (None: all today)
            counted = str(form.get("counted") or "0")
            total = part.size + (int(counted) if counted.isdigit() else 0)
            answer["warmup"] = await call(_warmup_line, c.target, total)
        return JSONResponse(answer)

    async def broadcast_send(request: Request) -> Response:
        form = await request.form()
        try:
            built = _request(form)
            if form.get("confirm") != "yes":
                raise InvalidInput("tick the box that confirms the audience before sending")
            answer = await call(c.broadcasts.send, built)
        except MailstepError as exc:
            return back("/broadcasts/new", error=str(exc))
        word = "sent" if answer.created else "exists already: nothing new was sent for"
        return back(f"/broadcasts/{quote(answer.record.id)}", msg=f"broadcast {word} {answer.record.id}")

    async def broadcast(request: Request) -> Response:
        from ops.engaged import engaged, non_openers

        broadcast_id = request.path_params["id"]
        details, people, unopened = await asyncio.gather(
            call(c.broadcasts.details, broadcast_id),
            call(engaged, c.stats, broadcast_id),
            call(lambda: list(non_openers(c.broadcasts.resolver, broadcast_id, SHOWN + 1))),
        )
        subjects = await call(_subjects, c, [details["template"]])
        return c.page(
            request,
            "broadcast.html",
            b=details,
            subject=subjects.get(details["template"]),
            engaged=people.public(),
            unopened=unopened[:SHOWN],
            unopened_more=len(unopened) > SHOWN,
            shown=SHOWN,
            progress=chart_data(_progress(details)),
            title=broadcast_id,
        )

    async def broadcast_json(request: Request) -> Response:
        record = await call(c.broadcasts.get, request.path_params["id"])
        return JSONResponse(_progress(record.public()))

    async def broadcast_csv(request: Request) -> Response:
        from ops.engaged import engaged

        broadcast_id = request.path_params["id"]
        people = await call(engaged, c.stats, broadcast_id)
        disposition = f'attachment; filename="{broadcast_id}-engaged.csv"'
        return PlainTextResponse(
            people.csv(), media_type="text/csv", headers={"content-disposition": disposition}
        )

    async def broadcast_non_openers_csv(request: Request) -> Response:
        from ops.engaged import emails_csv, non_openers

        broadcast_id = request.path_params["id"]
        await call(c.broadcasts.get, broadcast_id)  # an unknown broadcast: not found, not an empty file
        found = await call(lambda: emails_csv(non_openers(c.broadcasts.resolver, broadcast_id)))
        disposition = f'attachment; filename="{broadcast_id}-did-not-open.csv"'
        return PlainTextResponse(found, media_type="text/csv", headers={"content-disposition": disposition})

    async def broadcast_control(request: Request) -> Response:
        broadcast_id = request.path_params["id"]
        url = f"/broadcasts/{quote(broadcast_id)}"
        try:
            if request.path_params["action"] == "cancel":
                record, changed = await call(c.broadcasts.cancel, broadcast_id)
                message = "cancelled" if changed else f"is {record.status}: nothing to cancel"
            else:
                record = await call(c.broadcasts.resume, broadcast_id)
                message = f"resumed (round {record.round})"
        except MailstepError as exc:
            return back(url, error=str(exc))
        return back(url, msg=f"broadcast {broadcast_id} {message}")

    # ----- templates -----------------------------------------------------------------------------
    async def templates(request: Request) -> Response:
        from ops.templates import rows

        return c.page(request, "templates.html", templates=rows(c.renderer), title="Templates")

    async def template(request: Request) -> Response:
        key = request.query_params.get("key", "")
        rendered = await call(_render, c, key)
        return c.page(request, "template.html", key=key, r=rendered, title=key)

    async def template_render(request: Request) -> Response:
        rendered = await call(_render, c, request.path_params["key"])
        return HTMLResponse(rendered.html)

    async def test_send(request: Request) -> Response:
        form = await request.form()
        key = str(form.get("key", ""))
        url = "/templates/view?key=" + quote(key, safe="")
        try:
            message = await call(_test_send, c, key, str(form.get("to", "")), None)
        except (MailstepError, ValueError) as exc:
            return back(url, error=str(exc))
        return back(url, msg=message)

    async def broadcast_test_send(request: Request) -> Response:
        """The new-broadcast form's inline test: its template and subject to one address."""
        form = await request.form()
        subject = str(form.get("subject", "") or "").strip() or None
        key, to = str(form.get("template", "")), str(form.get("test_to", ""))
        try:
            message = await call(_test_send, c, key, to, subject)
        except (MailstepError, ValueError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return JSONResponse({"message": message})

    # ----- sequences -----------------------------------------------------------------------------
    async def sequences(request: Request) -> Response:
        from ops.overview import source_counters

        catalog = c.catalog()
        ids = [s.id for s in catalog]
        executions, counters = await asyncio.gather(
            call(c.stats.executions_of, ids), call(source_counters, c.stats, ids)
        )
        rows = {i: {row["metric"]: row for row in found.rows()} for i, found in counters.items()}
        return c.page(
            request,
            "sequences.html",
            sequences=list(catalog),
            executions=executions,
            rows=rows,
            title="Sequences",
        )

    async def sequence(request: Request) -> Response:
        sequence_id = request.path_params["id"]
        found = c.catalog().get(sequence_id)
        if found is None:
            raise NotFound(f"no sequence {sequence_id!r} in the sequences folder")
        view = await call(_sequence_view, c, found)
        return c.page(request, "sequence.html", s=found, **view, title=sequence_id)

    # ----- webhooks ------------------------------------------------------------------------------
    async def webhooks(request: Request) -> Response:
        endpoints = await call(lambda: c.webhooks.endpoints())
        return c.page(request, "webhooks.html", endpoints=endpoints, title="Webhooks")

    async def webhook(request: Request) -> Response:
        endpoint_id = request.path_params["id"]
        failed = request.query_params.get("failed") == "1"
        endpoint = await call(lambda: c.webhooks.get(endpoint_id))
        deliveries = await call(lambda: c.webhooks.deliveries(endpoint_id, failed=failed, limit=WEBHOOK_PAGE))
        return c.page(
            request,
            "webhook.html",
            e=endpoint,
            deliveries=deliveries,
            failed=failed,
            page_size=WEBHOOK_PAGE,
            title=endpoint.id,
        )

    # ----- reputation and list hygiene -----------------------------------------------------------
    async def reputation(request: Request) -> Response:
        from ops.overview import THRESHOLDS

        sets, held = await asyncio.gather(call(c.reputation.status), call(c.reputation.paused_broadcasts))
        return c.page(
            request,
            "reputation.html",
            sets=sets,
            held=held,
            ses=THRESHOLDS,
            marketing_set=c.target.settings.configuration_set,
            title="Reputation",
        )

    async def reputation_resume(request: Request) -> Response:
        from ops.reputation import resumed_line

        form = await request.form()
        force = form.get("force") == "yes"
        try:
            if force:
                name = c.target.settings.configuration_set
                if str(form.get("confirm", "")).strip() != name:
                    raise InvalidInput(
                        f"type the marketing configuration set's name ({name}) to resume anyway"
                    )
            answer = await call(c.reputation.resume, force=force)
        except MailstepError as exc:
            return back("/reputation", error=str(exc))
        return back("/reputation", msg=resumed_line(answer))

    async def hygiene(request: Request) -> Response:
        from ops import hygiene as list_hygiene

        at = request.query_params.get("at", "").strip()
        if not at and request.query_params.get("live") != "1":  # as it opens: no day bucket read
            found = await call(list_hygiene.report, c.target, live=False)
            return c.page(request, "hygiene.html", r=found, dry=None, at=at, title="Hygiene")
        # a day asked for, or "Forecast now": the full report, read in the background (console.jobs)
        if at:
            list_hygiene.now(c.target, at)  # a day, or the problem page (no I/O for a day)
        run = request.query_params.get("run", "")
        wanted = {"at": at} if at else {"live": "1"}
        if not RUN_ID.fullmatch(run):  # a new forecast: its own URL, so a reload shows this one
            return RedirectResponse(f"/hygiene?{urlencode({**wanted, 'run': secrets.token_hex(8)})}", 303)
        job = c.jobs.start(
            ("hygiene", at, run),
            lambda: list_hygiene.report(c.target, at=at or None, readers=FORECAST_READERS),
        )
        if not job.done.is_set():  # no waiting here: against AWS it takes a second or more anyway
            return c.page(request, "hygiene.html", r=None, dry=None, at=at, forecasting=job, title="Hygiene")
        if job.error is not None:
            raise job.error
        return c.page(request, "hygiene.html", r=job.result, dry=None, at=at, read=job, title="Hygiene")

    async def hygiene_dry_run(request: Request) -> Response:
        from ops import hygiene as list_hygiene

        form = await request.form()
        at = str(form.get("at", "")).strip()
        try:
            result = await call(list_hygiene.run, c.target, dry_run=True, at=at or None)  # read-only, always
        except MailstepError as exc:
            return back("/hygiene", error=str(exc))
        return c.page(request, "hygiene.html", r=None, dry=result, at=at, title="Hygiene: dry run")

    # ----- topics, suppression, sign-ups, outbox -------------------------------------------------
    async def topics(request: Request) -> Response:
        return c.page(request, "topics.html", topics=c.topics, counts=None, title="Topics")

    async def topics_count(request: Request) -> Response:
        counts = await call(c.topic_admin.counts)
        return c.page(request, "topics.html", topics=c.topics, counts=counts, title="Topics")

    async def suppression(request: Request) -> Response:
        from shared.engagement.suppression import Suppressions

        q = request.query_params.get("q", "").strip()
        found = None
        if q:
            found = await call(Suppressions(c.admin.store).get, _email(q))
        return c.page(request, "suppression.html", q=q, found=found, listed=None, title="Suppression")

    async def suppression_list(request: Request) -> Response:
        from shared.engagement.suppression import Suppressions

        listed = await call(Suppressions(c.admin.store).list)
        return c.page(request, "suppression.html", q="", found=None, listed=listed, title="Suppression")

    async def suppression_remove(request: Request) -> Response:
        from ops.suppression import lift
        from shared.engagement.suppression import Suppressions

        form = await request.form()
        email = str(form.get("email", ""))
        try:
            address = _email(email)
            removed = await call(
                lift,
                Suppressions(c.admin.store, c.admin.engine),
                address,
                str(form.get("reason", "")),
                data_ttl_days=c.target.settings.data_ttl_days,
            )
        except MailstepError as exc:
            return back("/suppression?q=" + quote(email, safe=""), error=str(exc))
        message = f"{address} is no longer suppressed" if removed else f"{address} was not suppressed"
        return back("/suppression", msg=message)

    async def signups(request: Request) -> Response:
        q = request.query_params.get("q", "").strip()
        found = None
        if q:
            now = datetime.now(UTC).timestamp()
            found = await call(lambda: c.topic_admin.pending_signups.get(_email(q), now=now))
        return c.page(request, "signups.html", q=q, found=found, listed=None, title="Pending sign-ups")

    async def signups_list(request: Request) -> Response:
        page = await call(c.topic_admin.pending, limit=200)
        return c.page(request, "signups.html", q="", found=None, listed=page, title="Pending sign-ups")

    async def outbox(request: Request) -> Response:
        from ops.outbox import read_outbox

        if c.outbox is None:
            raise NotFound("the outbox exists on the local runtime only")
        messages = await call(read_outbox, c.outbox)
        return c.page(request, "outbox.html", messages=list(reversed(messages))[:OUTBOX_PAGE], title="Outbox")

    async def outbox_message(request: Request) -> Response:
        meta, message = await call(_outbox_message, c, request.path_params["id"])
        text = message.get_body(("plain",))
        return c.page(
            request,
            "outbox_message.html",
            meta=meta,
            headers=list(message.items()),
            text=text.get_content() if text is not None else "",
            title=str(message["Subject"] or meta["message_id"]),
        )

    async def outbox_render(request: Request) -> Response:
        _, message = await call(_outbox_message, c, request.path_params["id"])
        html = message.get_body(("html",))
        return HTMLResponse(html.get_content() if html is not None else "")

    async def favicon(request: Request) -> Response:
        return Response(status_code=204)

    return [
        Route("/favicon.ico", favicon),
        Route("/", overview),
        Route("/overview/subscribers", count_subscribers, methods=["POST"]),  # reads every profile: on demand
        Route("/subscribers", subscribers),
        Route("/subscribers/{email}", subscriber),
        Route("/subscribers/{email}/{action}", subscriber_action, methods=["POST"]),
        Route("/broadcasts", broadcasts),
        Route("/broadcasts", broadcast_send, methods=["POST"]),
        Route("/broadcasts/new", broadcast_new),
        Route("/api/audience", audience, methods=["POST"]),
        Route("/api/test-send", broadcast_test_send, methods=["POST"]),  # the form's inline test
        Route("/api/broadcasts/{id}", broadcast_json),  # polled by console.js while a broadcast sends
        Route("/broadcasts/{id}", broadcast),
        Route("/broadcasts/{id}/engaged.csv", broadcast_csv),  # who opened or clicked, as a download
        Route("/broadcasts/{id}/did-not-open.csv", broadcast_non_openers_csv),  # sent, not opened
        Route("/broadcasts/{id}/{action:str}", broadcast_control, methods=["POST"]),
        Route("/templates", templates),
        Route("/templates/view", template),
        Route("/templates/render/{key:path}", template_render),  # the sandboxed preview iframe
        Route("/templates/test-send", test_send, methods=["POST"]),
        Route("/sequences", sequences),
        Route("/sequences/{id}", sequence),
        Route("/webhooks", webhooks),
        Route("/webhooks/{id}", webhook),
        Route("/reputation", reputation),
        Route("/reputation/resume", reputation_resume, methods=["POST"]),
        Route("/hygiene", hygiene),
        Route("/hygiene/dry-run", hygiene_dry_run, methods=["POST"]),  # POST, yet read-only
        Route("/topics", topics),
        Route("/topics/count", topics_count, methods=["POST"]),  # counts readers per topic: on demand only
        Route("/suppression", suppression),
        Route("/suppression/all", suppression_list, methods=["POST"]),
        Route("/suppression/remove", suppression_remove, methods=["POST"]),
        Route("/signups", signups),
        Route("/signups/all", signups_list, methods=["POST"]),  # the first 200 pending
        Route("/outbox", outbox),
        Route("/outbox/{id}", outbox_message),
        Route("/outbox/render/{id}", outbox_render),  # the HTML part, for the sandboxed iframe
    ]


PAGE = 50
SHOWN = 200  # people listed on a broadcast's page per list (the CSV has them all)
OUTBOX_PAGE = 50
SHOWN = 200  # people listed on a broadcast's page per list (the CSV has them all)


def _split(c: Console, built: Any) -> dict[str, Any]:
    """An A/B test's live count: the whole audience read once (``Broadcasts.split``, what
    ``mailstep broadcast send --dry-run`` shows), each variant's test group and the rest."""
    groups = c.broadcasts.split(built)
    total = sum(groups.values())
    return {
        "size": total,
        "sample": [],
        "cursor": None,
        "audience": built.audience.model_copy(update={"split": None}).describe(),
        "groups": groups,
        "ab": built.ab.describe(),
        "warmup": _warmup_line(c.target, total),
    }


def _warmup_line(target: Any, size: int) -> str | None:
    from ops.warmup import WarmupService

    found = WarmupService.of(target).plan(size)
    return found.line if found is not None and found.spread else None


WEBHOOK_PAGE = 50  # deliveries shown, newest first (one Query)


def _email(raw: str) -> str:
    from ops.admin import email_arg

    return email_arg(raw)


def _request(form: FormData) -> Any:
    """The form's broadcast request; with its A/B test on (``ab``), the test's request, built
    as ``mailstep broadcast send --variant ... --test-share ...`` builds it (``ab_request``)."""
    from ops.broadcast_requests import ab_request, broadcast_request

    def text(name: str) -> str:
        return str(form.get(name, "") or "").strip()

    testing = form.get("ab") == "yes"
    base = broadcast_request(
        template=text("template"),
        subject=text("subject") or None,
        tags=_lines(text("tags")),
        any_tags=_lines(text("any_tags")),
        exclude_tags=_lines(text("exclude_tags")),
        where=[w.strip() for w in text("where").splitlines() if w.strip()],
        topic=text("topic") or None,
        at=_at(form),
        opened=_lines(text("opened")),
        clicked=_lines(text("clicked")),
        not_opened=_lines(text("not_opened")),
        engaged_within_days=_whole(text("engaged_within_days"), "engaged_within_days", DAYS),
        not_engaged_within_days=_whole(text("not_engaged_within_days"), "not_engaged_within_days", DAYS),
        machine_opens=form.get("machine_opens") == "yes",
        # fixed when the page loads: the live count's test groups are the send's
        broadcast_id=(text("ab_id") or None) if testing else None,
    )
    if not testing:
        return base
    try:
        return ab_request(
            base,
            variants=_variants(form, base.template),
            test_share=_whole(text("test_share"), "test_share", "a whole per cent"),
            metric=text("metric") or None,
            decide_after=text("decide_after") or None,
            min_sample=_whole(text("min_sample"), "min_sample", "a whole number"),
        )
    except InvalidInput as exc:  # named by the form's field (test_share), not the CLI's option
        if not exc.problems:
            raise
        raise InvalidInput(f"{exc.problems[0].field}: {exc.problems[0].message}", exc.problems) from None


AB_ROWS = 5  # the form's variant rows: A and B always count, C to E when filled in


def _variants(form: FormData, template: str) -> list[str]:
    """The variant rows as ``--variant`` takes them: ``template=KEY[,subject=TEXT]``, an empty
    template the form's; a row from C on with neither is no variant."""
    found = []
    for row in range(AB_ROWS):
        chosen = str(form.get(f"variant_template_{row}", "") or "").strip()
        subject = str(form.get(f"variant_subject_{row}", "") or "").strip()
        if row < 2 or chosen or subject:
            found.append(f"template={chosen or template}" + (f",subject={subject}" if subject else ""))
    return found


RECENT_SOURCES = 20  # broadcasts the new-broadcast form suggests for its engagement conditions


DAYS = "a whole number of days"


def _whole(value: str, name: str, what: str) -> int | None:
    """A whole number from the form (empty: None); its range is the request's to check."""
    if not value:
        return None
    if not re.fullmatch(r"[+-]?\d{1,6}", value):
        message = f"{value!r} is not {what}"
        raise InvalidInput(f"{name}: {message}", [FieldProblem(name, message)])
    return int(value)


def _progress(record: dict[str, Any]) -> dict[str, Any]:
    from console.formatting import tone, words

    keys = ("id", "status", "resolved", "audience", "processed", "sent", "failed", "skipped")
    found = {k: record.get(k) for k in keys}
    found["status_text"], found["status_tone"] = words(found["status"]), tone(found["status"])
    found["skipped_text"] = {words(k): v for k, v in (found["skipped"] or {}).items()}
    return found


def _render(c: Console, key: str) -> Any:
    from shared.sending.pipeline import MailIdentity

    identity = MailIdentity.from_settings(c.target.settings)
    context = identity.preview_context(
        email="preview@example.com", first_name="Ada", data={}, transactional=False
    )
    return c.renderer.render(key, context)


NOT_SENDABLE = ("system", "transactional")  # template folders a broadcast never sends


def _sendable(c: Console) -> list[tuple[str, list[dict[str, Any]]]]:
    """The templates a broadcast may send, each with its subject rendered, in two groups: the
    ones no sequence sends first (the form's default is the first of them), then the ones a
    marketing sequence sends. Left out: the system and transactional folders (the sign-up
    confirmation, receipts) and whatever a transactional sequence sends."""
    from ops.sequence_view import graph
    from ops.templates import rows

    used: dict[str, bool] = {}  # template -> sent by a transactional sequence
    for sequence in c.catalog():
        for node in graph(sequence):
            for key in node.templates:
                used[key] = used.get(key, False) or sequence.transactional
    sendable = [
        row
        for row in rows(c.renderer)
        if row["key"].split("/")[0] not in NOT_SENDABLE and not used.get(row["key"], False)
    ]
    subjects = _subjects(c, (row["key"] for row in sendable))
    shown = [{**row, "subject": subjects.get(row["key"], row["subject"])} for row in sendable]
    return [
        ("Broadcast templates", [row for row in shown if row["key"] not in used]),
        ("Templates a sequence sends too", [row for row in shown if row["key"] in used]),
    ]


def _at(form: FormData) -> str | None:
    """The form's send time: the date-time field (no zone) in the browser's zone (``tz_offset``:
    minutes east of UTC, set by console.js for that date; UTC without the script), as ISO 8601."""
    from datetime import timedelta, timezone

    value = str(form.get("at", "") or "").strip()
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return value  # the request's validation names the field and the format
    if moment.tzinfo is not None:
        return value
    offset = str(form.get("tz_offset", "") or "0").strip()
    if not re.fullmatch(r"[+-]?\d{1,4}", offset) or abs(int(offset)) > 14 * 60:
        message = "tz_offset must be minutes east of UTC, between -840 and 840"
        raise InvalidInput(message, [FieldProblem("tz_offset", message)])
    return moment.replace(tzinfo=timezone(timedelta(minutes=int(offset)))).isoformat()


def _current_steps(c: Console, executions: list[Any]) -> dict[str, dict[str, Any]]:
    from ops.sequence_view import current_steps
    from shared.sequences.sfn import StepFunctions

    if not executions:
        return {}
    return current_steps(StepFunctions(c.target.client("stepfunctions")), c.catalog(), executions)


def _test_send(c: Console, key: str, to: str, subject: str | None) -> str:
    """One test mail of ``key`` to ``to`` (``ops.templates.send_test``: the real send pipeline,
    as ``mailstep templates``' test send); what to tell the operator. Not sent: an InvalidInput
    with the reason."""
    from ops.templates import send_test

    if not to.strip():
        raise InvalidInput("to: the address to send the test to", [FieldProblem("to", "missing")])
    outcome = send_test(c.target, key, _email(to), subject=subject)
    if outcome.status != "sent":
        raise InvalidInput(f"not sent: {outcome.reason or outcome.status}")
    return f"test mail sent to {_email(to)}"


def _subjects(c: Console, keys: Iterable[str]) -> dict[str, str]:
    """Each template's subject as a reader sees it (rendered for the sample subscriber, not its
    Jinja source); a template that no longer renders is left out."""
    found = {}
    for key in sorted(keys):
        with contextlib.suppress(MailstepError, ValueError, OSError, TemplateError):
            found[key] = str(_render(c, key).subject)
    return found


def _sequence_view(c: Console, sequence: Any) -> dict[str, Any]:
    from ops.admin import failed_executions
    from ops.sequence_view import MAX_MEMBERS, ended, graph, locate_all, members, waiting_at, whereabouts
    from shared.sequences.sfn import StepFunctions

    emails = c.admin.store.sequence_members(sequence.id, limit=MAX_MEMBERS)
    shown = members(c.admin.store, sequence.id, emails=emails)
    total = max(c.stats.active_of([sequence.id])[sequence.id], len(emails))
    sfn = StepFunctions(c.target.client("stepfunctions"))
    positions = locate_all(sfn, (m.execution_arn for m in shown))
    nodes = graph(sequence)  # without counts: each member's step and the one after it
    windowed = sequence.send_window is not None
    where = {arn: whereabouts(nodes, found, windowed=windowed) for arn, found in positions.items()}
    try:
        failed = failed_executions(
            sequence.id, sfn=sfn, arn_prefix=c.target.settings.state_machine_arn_prefix, aws=c.target.aws
        )
    except NotFound:  # not deployed yet
        failed = []
    return {
        "nodes": graph(sequence, c.stats, waiting_at(positions.values())),
        "members": shown,
        "where": where,
        "total": total,
        "ended": ended(sfn, failed),  # goal exits apart from stops and failures
    }


def _outbox_message(c: Console, message_id: str) -> tuple[dict[str, Any], Any]:
    import json
    from email import policy
    from email.parser import BytesParser

    if c.outbox is None or not message_id.replace("-", "").replace("_", "").isalnum():
        raise NotFound("no such message")
    meta_path, eml_path = c.outbox / f"{message_id}.json", c.outbox / f"{message_id}.eml"
    if not meta_path.exists() or not eml_path.exists():
        raise NotFound("no such message")
    meta = json.loads(meta_path.read_text())
    return meta, BytesParser(policy=policy.default).parsebytes(eml_path.read_bytes())


# ----- subscriber actions: (console, email, form) -> (message, url to show or None) ------------
def _tags(c: Console, email: str, form: FormData) -> tuple[str, str | None]:
    from ops.admin import make_update

    change = make_update(_lines(str(form.get("add", ""))), _lines(str(form.get("remove", ""))))
    result = c.admin.update(email, change)
    return ("tags changed" if result.changed else "no change"), None


def _attribute(c: Console, email: str, form: FormData) -> tuple[str, str | None]:
    from ops.admin import parse_update

    name = str(form.get("name", "")).strip()
    change = parse_update(attributes=[f"{name}={form.get('value', '')}"])
    result = c.admin.update(email, change)
    return ("attribute changed" if result.changed else "no change"), None


def _topics(c: Console, email: str, form: FormData) -> tuple[str, str | None]:
    chosen = set(form.getlist("topic"))
    now = {t.topic.id for t in c.topic_admin.subscriber(email).topics if t.receives}
    on = [t.id for t in c.topics if t.id in chosen - now]  # only what the operator changed:
    off = [t.id for t in c.topics if t.id in now - chosen]  # defaults stay defaults
    shown = c.topic_admin.change(email, on, off)
    return ("topics changed" if shown.changed else "no change"), None


def _unsubscribe(c: Console, email: str, form: FormData) -> tuple[str, str | None]:
    result = c.admin.unsubscribe(email)
    stopped = f"; stopped {', '.join(result.sequences_stopped)}" if result.sequences_stopped else ""
    return ("unsubscribed" if result.changed else "was unsubscribed already") + stopped, None


def _resubscribe(c: Console, email: str, form: FormData) -> tuple[str, str | None]:
    result = c.admin.resubscribe(email)
    return ("resubscribed" if result.changed else "was subscribed already"), None


def _erase(c: Console, email: str, form: FormData) -> tuple[str, str | None]:
    typed = str(form.get("confirm", "")).strip()
    address = _email(email)
    if typed != address:
        raise InvalidInput(f"type the address ({address}) to confirm the erase")
    result = c.admin.delete(address)
    return f"{address} erased: {result.main_items} items, {result.event_items} events", "/subscribers"


SUBSCRIBER_ACTIONS = {
    "tags": _tags,
    "attributes": _attribute,
    "topics": _topics,
    "unsubscribe": _unsubscribe,
    "resubscribe": _resubscribe,
    "erase": _erase,
}

__all__ = ["RedirectResponse", "routes"]
