"""Sign-up and confirmation on moto: the pending item, one confirmation mail per cooldown,
the honeypot, confirm (consent, topics, ``subscriber.confirmed`` starting a sequence),
idempotence, inspect, expiry and already-subscribed addresses."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from email import policy
from email.parser import BytesParser
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from moto.core import DEFAULT_ACCOUNT_ID

from local_aws.provision import LocalResources
from shared.consent.confirm import confirm, inspect
from shared.consent.context import ConsentConfig, ConsentContext
from shared.consent.record import CONFIRMED_EVENT, Requester
from shared.consent.signup import SignupRequest, SignupRules, signup
from shared.core.aws import client
from shared.core.errors import Conflict
from shared.core.settings import Settings
from shared.core.topics import TOPICS_FILE, require_topics
from shared.sending.jobs import SendJob
from shared.sending.pipeline import SendContext, SendOutcome, send
from shared.sending.rendering import TEMPLATES_DIR
from shared.sending.sender import SendResult, SesSender
from shared.sending.tokens import ExpiredToken, InvalidToken, verify
from shared.sequences.engine import SequenceEngine
from shared.sequences.sfn import StepFunctions
from shared.sequences.validate import require_catalog
from shared.store.dynamo import key, values
from shared.store.pending import PendingSignups
from shared.store.subscribers import Profile, SubscriberStore, keys
from tests.integration.conftest import SECRET, scan_all

PREFIX = f"arn:aws:states:us-east-1:{DEFAULT_ACCOUNT_ID}:stateMachine:consent-test-"
ADDRESS = "ada@example.com"
IP = "203.0.113.7"
AGENT = "Mozilla/5.0 (X11; Linux x86_64) Test/1.0"
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
WELCOME = "trigger: subscriber.confirmed\nsteps:\n  - send: welcome\n    subject: Welcome\n"


@pytest.fixture
def engine(store: SubscriberStore, tmp_path: Path) -> Iterator[SequenceEngine]:
    """A test sequences dir with one sequence triggered by ``subscriber.confirmed``, its state
    machine in moto (executions are recorded, not run)."""
    folder = tmp_path / "sequences"
    folder.mkdir()
    (folder / "confirmed-welcome.yaml").write_text(WELCOME)
    catalog = require_catalog(folder, TEMPLATES_DIR)
    assert [s.id for s in catalog.by_trigger(CONFIRMED_EVENT)] == ["confirmed-welcome"]
    iam = client("iam")
    try:
        role = iam.get_role(RoleName="consent-test")["Role"]["Arn"]
    except ClientError:
        role = iam.create_role(RoleName="consent-test", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    sfn = StepFunctions()
    machine = sfn.put_state_machine(
        "consent-test-confirmed-welcome", '{"StartAt":"P","States":{"P":{"Type":"Pass","End":true}}}', role
    )
    yield SequenceEngine(catalog=catalog, arn_prefix=PREFIX, store=store, sfn=sfn)
    client("stepfunctions").delete_state_machine(stateMachineArn=machine)


class SendQueue:
    """The send queue as the sender function consumes it: each job goes through the send
    pipeline when it is queued (at the moment it was queued); a retryable outcome stays on the
    queue until :meth:`redeliver`."""

    def __init__(self, send_ctx: SendContext) -> None:
        self.send_ctx = send_ctx
        self.held: list[SendJob] = []
        self.outcomes: list[SendOutcome] = []

    def __call__(self, job: SendJob, moment: datetime, delay_s: int = 0) -> None:
        self.deliver(job, moment + timedelta(seconds=delay_s))

    def deliver(self, job: SendJob, moment: datetime, ctx: SendContext | None = None) -> SendOutcome:
        outcome = send(job, ctx or self.send_ctx, now=moment)
        self.outcomes.append(outcome)
        if outcome.retryable:
            self.held.append(job)
        return outcome

    def redeliver(self, moment: datetime) -> list[SendOutcome]:
        held, self.held = self.held, []
        return [self.deliver(job, moment) for job in held]


@pytest.fixture
def ctx(
    store: SubscriberStore, resources: LocalResources, send_ctx: SendContext, engine: SequenceEngine
) -> ConsentContext:
    return ConsentContext(
        store=store,
        pending=PendingSignups(resources.tables["table_name"]),
        send=send_ctx,
        topics=require_topics(TOPICS_FILE),
        config=ConsentConfig(
            public_base_url="https://api.acme.test", origins=("https://acme.test",), cooldown_seconds=3600
        ),
        sequences=engine,
        queue=SendQueue(send_ctx),
    )


def _request(**fields: Any) -> SignupRequest:
    rules = SignupRules(topics=require_topics(TOPICS_FILE), origins=("https://acme.test",))
    return SignupRequest.model_validate({"email": ADDRESS, **fields}, context=rules)


def _items(table: str, email: str = ADDRESS) -> list[dict[str, Any]]:
    return sorted((i for i in scan_all(table) if i["PK"] == keys.sub_pk(email)), key=lambda i: i["SK"])


def _confirm_token(message: Any) -> str:
    parsed = BytesParser(policy=policy.default).parsebytes(message.raw_data.encode())
    html = parsed.get_body(("html",)).get_content()
    urls = re.findall(r'href="https://api\.acme\.test/c/([A-Za-z0-9_-]+)"', html)
    assert len(set(urls)) == 1, urls
    return urls[0]


def _executions(engine: SequenceEngine) -> list[dict[str, Any]]:
    return engine.sfn.list_executions(PREFIX + "confirmed-welcome")


def test_a_new_address_gets_a_pending_item_and_exactly_one_confirmation_mail(ctx, resources, outbox):
    table = resources.tables["table_name"]
    outcome = signup(_request(first_name="Ada", topics=["newsletter"], form="footer"), ctx, now=T0)

    assert outcome.action == "pending"
    assert outcome.public()["status"] == "accepted" and outcome.public()["confirmation"] is True
    items = _items(table)
    assert [i["SK"] for i in items if not i["SK"].startswith(keys.SENT_PREFIX)] == [keys.PENDING]
    pending = (
        items[0] if items[0]["SK"] == keys.PENDING else next(i for i in items if i["SK"] == keys.PENDING)
    )
    expires = int((T0 + timedelta(days=7)).timestamp())
    assert pending["expires_at"] == expires and pending["ttl"] == expires
    assert (pending["first_name"], pending["topics"], pending["form"]) == ("Ada", ["newsletter"], "footer")
    # the send log of the confirmation mail goes with the sign-up; no send claim stays behind
    sent = [i for i in items if i["SK"].startswith(keys.SENT_PREFIX)]
    assert len(sent) == 1 and sent[0]["ttl"] == expires and sent[0]["template"] == "system/confirm"
    assert not any(i["SK"].startswith(keys.SEND_CLAIM_PREFIX) for i in items)
    # no profile: no audience, listing or sequence sees a pending sign-up
    assert ctx.store.get_profile(ADDRESS) is None
    assert list(ctx.store.iter_profiles()) == []

    assert len(outbox) == 1
    message = outbox[0]
    assert message.destinations and all(ADDRESS in d for d in message.destinations)
    parsed = BytesParser(policy=policy.default).parsebytes(message.raw_data.encode())
    assert parsed["Subject"] == "Please confirm your subscription"
    assert parsed["List-Unsubscribe"] is None  # transactional
    assert "Newsletter" in parsed.get_body(("plain",)).get_content()
    claims = verify(_confirm_token(message), SECRET, purpose="confirm", now=T0.timestamp())
    assert claims.email == ADDRESS and claims.expires_at == expires
    with pytest.raises(InvalidToken):  # a confirm link is no unsubscribe link
        verify(_confirm_token(message), SECRET, purpose="unsubscribe", now=T0.timestamp())


def test_five_more_sign_ups_within_the_cooldown_send_nothing_more(ctx, resources, outbox):
    table = resources.tables["table_name"]
    assert signup(_request(), ctx, now=T0).action == "pending"
    before = _items(table)
    answers = [
        signup(_request(first_name=f"Bot{i}"), ctx, now=T0 + timedelta(minutes=i * 10)) for i in range(1, 6)
    ]

    assert [a.action for a in answers] == ["cooldown"] * 5
    assert {tuple(sorted(a.public().items())) for a in answers} == {tuple(sorted(signup_public(ctx).items()))}
    assert len(outbox) == 1
    assert _items(table) == before
    # after the window, one more mail may go out (a reader who lost the first one)
    assert signup(_request(), ctx, now=T0 + timedelta(hours=1, seconds=1)).action == "pending"
    assert len(outbox) == 2


def signup_public(ctx: ConsentContext) -> dict[str, Any]:
    from shared.consent.signup import SignupOutcome

    return SignupOutcome(action="pending", method="double").public()


def test_the_honeypot_answers_like_a_success_and_writes_nothing(ctx, resources, outbox):
    main, events = resources.tables["table_name"], resources.tables["events_table_name"]
    before = (scan_all(main), scan_all(events))
    outcome = signup(_request(website="https://spam.test"), ctx, now=T0)
    assert outcome.action == "honeypot"
    assert outcome.public() == signup_public(ctx)
    assert (scan_all(main), scan_all(events)) == before
    assert outbox == []


def test_an_already_subscribed_address_gets_no_mail_and_no_change(ctx, resources, outbox):
    table = resources.tables["table_name"]
    ctx.store.upsert(ADDRESS, first_name="Ada", add_tags=["customer"])
    before = scan_all(table)
    outcome = signup(_request(first_name="Someone Else", topics=[]), ctx, now=T0)
    assert outcome.action == "already_subscribed"
    assert outcome.public() == signup_public(ctx)  # the same answer as for a new address
    assert scan_all(table) == before
    assert outbox == []


def test_confirm_subscribes_with_consent_and_topics_starts_the_sequence_and_is_idempotent(
    ctx, resources, outbox, engine
):
    table, events_table = resources.tables["table_name"], resources.tables["events_table_name"]
    signup(_request(first_name="Ada", topics=["newsletter"], form="footer"), ctx, now=T0)
    token = _confirm_token(outbox[0])
    at = T0 + timedelta(hours=2)

    result = confirm(token, ctx, requester=Requester(IP, AGENT + "\r\nX-Injected: 1"), now=at)

    assert result.status == "confirmed" and result.sequences_started == ("confirmed-welcome",)
    profile = ctx.store.get_profile(ADDRESS)
    assert profile is not None and profile.status == "subscribed" and profile.first_name == "Ada"
    consent = profile.consent or {}
    assert consent["method"] == "double" and consent["form"] == "footer"
    assert (
        consent["at"] == "2026-03-02T11:00:00.000Z" and consent["signed_up_at"] == "2026-03-02T09:00:00.000Z"
    )
    assert consent["user_agent"] == AGENT + "X-Injected: 1"  # control characters gone
    assert re.fullmatch(r"[0-9a-f]{32}", consent["ip_hash"]) and IP not in str(profile.to_item())
    assert (profile.topics_in, profile.topics_out) == (
        frozenset({"newsletter"}),
        frozenset({"product-updates"}),
    )
    assert [i["SK"] for i in _items(table) if not i["SK"].startswith((keys.SENT_PREFIX, "ENTERED#"))] == [
        keys.exec_sk("confirmed-welcome"),
        keys.PROFILE,
    ]
    confirmed = [i for i in scan_all(events_table) if i.get("type") == CONFIRMED_EVENT]
    assert len(confirmed) == 1 and confirmed[0]["data"] == {
        "form": "footer",
        "method": "double",
        "topics": ["newsletter"],
    }
    assert len(_executions(engine)) == 1

    # When the link is used again (a double click, a scanner's POST), Then nothing changes
    state = scan_all(table), scan_all(events_table)
    again = confirm(token, ctx, requester=Requester(IP, AGENT), now=at + timedelta(minutes=1))
    assert again.status == "already_confirmed"
    assert (scan_all(table), scan_all(events_table)) == state
    assert len(_executions(engine)) == 1
    assert len(outbox) == 1  # and the now subscribed address gets no further confirmation mail
    assert signup(_request(), ctx, now=at + timedelta(hours=3)).action == "already_subscribed"
    assert len(outbox) == 1


def test_inspect_changes_nothing(ctx, resources, outbox, engine):
    main, events = resources.tables["table_name"], resources.tables["events_table_name"]
    signup(_request(first_name="Ada", topics=["product-updates"]), ctx, now=T0)
    token = _confirm_token(outbox[0])
    before = (scan_all(main), scan_all(events))
    shown = [inspect(token, ctx, now=T0 + timedelta(minutes=m)) for m in (1, 2, 3)]
    assert {(s.status, s.first_name, s.topics) for s in shown} == {("pending", "Ada", ("product-updates",))}
    assert (scan_all(main), scan_all(events)) == before
    assert ctx.store.get_profile(ADDRESS) is None and _executions(engine) == []
    confirm(token, ctx, requester=Requester(IP), now=T0 + timedelta(minutes=5))
    assert inspect(token, ctx, now=T0 + timedelta(minutes=6)).status == "already_confirmed"


def test_an_expired_pending_sign_up_is_treated_as_absent(ctx, resources, outbox):
    table = resources.tables["table_name"]
    signup(_request(), ctx, now=T0)
    token = _confirm_token(outbox[0])
    pk, sk = keys.pending_key(ADDRESS)
    # Given the sign-up expired (TTL deletion has not happened: the item is still there)
    past = int((T0 - timedelta(minutes=1)).timestamp())
    client("dynamodb").update_item(
        TableName=table,
        Key=key(pk, sk),
        UpdateExpression="SET expires_at = :t",
        ExpressionAttributeValues=values(t=past),
    )
    assert ctx.pending.get(ADDRESS, now=T0.timestamp()) is None
    assert list(ctx.pending.live(now=int(T0.timestamp()))) == []
    # Then its (still unexpired) link confirms nothing and shows nothing
    with pytest.raises(ExpiredToken):
        inspect(token, ctx, now=T0)
    with pytest.raises(ExpiredToken):
        confirm(token, ctx, requester=Requester(IP), now=T0)
    assert ctx.store.get_profile(ADDRESS) is None
    # and a new sign-up after the mailbox's cooldown mails again
    assert signup(_request(), ctx, now=T0 + timedelta(hours=1, minutes=5)).action == "pending"
    assert len(outbox) == 2
    assert [p.email for p in ctx.pending.live(now=int((T0 + timedelta(hours=1)).timestamp()))] == [ADDRESS]


def test_a_token_past_its_expiry_or_forged_is_refused(ctx, outbox):
    signup(_request(), ctx, now=T0)
    token = _confirm_token(outbox[0])
    with pytest.raises(ExpiredToken):
        confirm(token, ctx, requester=Requester(IP), now=T0 + timedelta(days=7, seconds=1))
    with pytest.raises(InvalidToken):
        confirm(token[:-2] + ("AA" if token[-2:] != "AA" else "BB"), ctx, requester=Requester(IP), now=T0)
    assert ctx.store.get_profile(ADDRESS) is None


def test_an_unsubscribed_reader_may_sign_up_again_through_the_confirmation(ctx, outbox):
    ctx.store.upsert(ADDRESS, first_name="Ada")
    ctx.store.unsubscribe(ADDRESS)
    assert signup(_request(), ctx, now=T0).action == "pending"
    assert len(outbox) == 1  # transactional: sent although unsubscribed
    confirm(_confirm_token(outbox[0]), ctx, requester=Requester(IP), now=T0 + timedelta(minutes=1))
    profile = ctx.store.get_profile(ADDRESS)
    assert profile is not None and profile.status == "subscribed" and profile.first_name == "Ada"


def test_a_suppressed_address_gets_no_mail(ctx, resources, outbox):
    ctx.store.set_suppressed(ADDRESS, True)
    before = scan_all(resources.tables["table_name"])
    assert signup(_request(), ctx, now=T0).action == "suppressed"
    assert outbox == [] and scan_all(resources.tables["table_name"]) == before


def test_a_single_opt_in_form_subscribes_at_once_with_method_single(ctx, outbox, engine):
    single = replace(ctx, config=replace(ctx.config, single_opt_in_forms=frozenset({"crm"})))
    outcome = signup(
        _request(form="crm", topics=["product-updates"]), single, requester=Requester(IP), now=T0
    )
    assert outcome.action == "subscribed" and outcome.public()["confirmation"] is False
    profile = ctx.store.get_profile(ADDRESS)
    assert profile is not None and profile.status == "subscribed"
    assert (
        profile.consent is not None
        and profile.consent["method"] == "single"
        and profile.consent["form"] == "crm"
    )
    assert ctx.pending.get(ADDRESS, now=T0.timestamp()) is None
    assert outbox == [] and len(_executions(engine)) == 1


class _Throttled(SesSender):
    def send_raw(self, raw: bytes, **kwargs: Any) -> SendResult:
        return SendResult(status="throttled", error_code="Throttling")


def test_a_mail_that_could_not_go_out_stays_queued_and_goes_out_once_on_redelivery(ctx, outbox):
    queue = ctx.queue
    assert isinstance(queue, SendQueue)
    busy = replace(queue.send_ctx, ses=_Throttled("mailstep"))
    # Given SES throttles while the confirmation mail's job is delivered
    queue.send_ctx = busy
    assert signup(_request(), ctx, now=T0).action == "pending"
    assert outbox == [] and len(queue.held) == 1
    # When the queue delivers it again (SES accepting), then it goes out, once
    queue.send_ctx = replace(busy, ses=ctx.send.ses)
    assert [o.status for o in queue.redeliver(T0 + timedelta(minutes=1))] == ["sent"]
    assert [o.reason for o in queue.redeliver(T0 + timedelta(minutes=2))] == []
    assert len(outbox) == 1


def test_a_failed_extra_condition_aborts_the_whole_profile_write(store, resources):
    """``mutate(extra=...)``: the pending item's delete conditions the profile write."""
    pending = PendingSignups(resources.tables["table_name"])
    with pytest.raises(Conflict):
        store.mutate(
            ADDRESS,
            lambda current, now: Profile(email=ADDRESS, tags=frozenset({"t"})),
            extra=[pending.delete_action(ADDRESS, "no-such-signup")],
        )
    assert scan_all(resources.tables["table_name"]) == []


def test_the_context_builds_from_settings(resources):
    settings = Settings.from_env(resources.env()).model_copy(
        update={"signup_allowed_origins": "https://acme.test", "signup_pending_days": 3}
    )
    built = ConsentContext.from_settings(settings)
    assert built.config.origins == ("https://acme.test",) and built.config.pending_days == 3
    assert [t.id for t in built.topics] == ["product-updates", "newsletter"]
