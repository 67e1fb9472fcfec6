"""What sign-up and confirmation need: their settings and their adapters, built once at the
boundary (:meth:`ConsentContext.from_settings`) and passed in, so tests hand in moto-backed
or fake parts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit

from shared.core.aws import client as aws_client
from shared.core.models import InboundEvent
from shared.core.settings import Settings
from shared.core.topics import TOPICS_FILE, TopicCatalog, require_topics
from shared.sending.jobs import SendJob, send_bodies, to_message
from shared.sending.pipeline import SendContext
from shared.sequences import SEQUENCES_DIR
from shared.store.pending import (
    DOMAIN_CAP_PER_HOUR,
    DOMAIN_HELD_PER_HOUR,
    SOURCE_CAP_PER_HOUR,
    PendingSignups,
)
from shared.store.subscribers import Profile, SubscriberStore

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient


class EventSink(Protocol):
    """Where ``subscriber.confirmed`` goes: the sequence engine (``SequenceEngine.on_event``)."""

    def on_event(self, event: InboundEvent, profile: Profile | None) -> tuple[list[str], list[str]]: ...


def parse_origins(value: str) -> tuple[str, ...]:
    """``"https://acme.test, https://www.acme.test"`` -> normalised origins; a malformed
    entry is a configuration error, said at start-up."""
    out = []
    for part in value.split(","):
        part = part.strip()
        if not part:
            continue
        origin = normalise_origin(part)
        if origin is None or origin != part.rstrip("/").lower():
            raise ValueError(f"not an origin (scheme://host[:port]): {part!r}")
        out.append(origin)
    return tuple(dict.fromkeys(out))


def normalise_origin(url: str) -> str | None:
    """``scheme://host[:port]`` of an http(s) URL, lower-cased; None when it has none or
    carries credentials."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme.lower() not in ("https", "http") or not parts.hostname or "@" in parts.netloc:
        return None
    host = parts.hostname.lower()
    return f"{parts.scheme.lower()}://{host}" + (f":{port}" if port is not None else "")


@dataclass(frozen=True)
class ConsentConfig:
    public_base_url: str = "https://mailstep.localhost"
    double_opt_in: bool = True
    single_opt_in_forms: frozenset[str] = frozenset()
    origins: tuple[str, ...] = ()
    pending_days: int = 7
    cooldown_seconds: int = 3600  # per mailbox (shared.store.pending.mailbox_key)
    domain_cap_per_hour: int = DOMAIN_CAP_PER_HOUR  # confirmation mails per recipient domain, at once
    domain_held_per_hour: int = DOMAIN_HELD_PER_HOUR  # held (delayed) above the cap, per domain
    source_cap_per_hour: int = SOURCE_CAP_PER_HOUR  # sign-ups per client address (sourceIp)
    max_body_bytes: int = 8 * 1024
    data_ttl_days: int = 180

    @classmethod
    def from_settings(cls, settings: Settings) -> ConsentConfig:
        return cls(
            public_base_url=settings.public_base_url,
            double_opt_in=settings.signup_double_opt_in,
            single_opt_in_forms=frozenset(
                f.strip() for f in settings.signup_single_opt_in_forms.split(",") if f.strip()
            ),
            origins=parse_origins(settings.signup_allowed_origins),
            pending_days=settings.signup_pending_days,
            cooldown_seconds=settings.signup_cooldown_seconds,
            domain_cap_per_hour=settings.signup_domain_cap_per_hour,
            domain_held_per_hour=settings.signup_domain_held_per_hour,
            source_cap_per_hour=settings.signup_source_cap_per_hour,
            max_body_bytes=settings.signup_max_body_bytes,
            data_ttl_days=settings.data_ttl_days,
        )

    def single_opt_in(self, form: str) -> bool:
        """Whether a sign-up from ``form`` subscribes directly (consent collected elsewhere)."""
        return not self.double_opt_in or form in self.single_opt_in_forms

    def confirm_url(self, token: str) -> str:
        return f"{self.public_base_url.rstrip('/')}/c/{token}"


@dataclass(frozen=True)
class ConsentContext:
    store: SubscriberStore
    pending: PendingSignups
    send: SendContext  # the one send pipeline; its token secret also signs confirmation links
    topics: TopicCatalog
    config: ConsentConfig = field(default_factory=ConsentConfig)
    sequences: EventSink | None = None  # None: subscriber.confirmed starts nothing
    # Puts a confirmation mail's job on the send queue (the sender function mails it), given
    # the job, the moment it was queued and its delay in seconds (a held sign-up's): never
    # sent inside the sign-up request. None: no queue configured, a sign-up that would mail fails.
    queue: Callable[[SendJob, datetime, int], object] | None = None

    def queue_send(self, job: SendJob, moment: datetime, *, delay_s: int = 0) -> None:
        if self.queue is None:
            raise RuntimeError("no send queue is configured for confirmation mails")
        self.queue(job, moment, delay_s)

    @property
    def secret(self) -> Callable[[], str]:
        return self.send.token_secret

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        store: SubscriberStore | None = None,  # None: one on the settings' tables
        *,
        topics_file: Path = TOPICS_FILE,
        sequences_dir: Path = SEQUENCES_DIR,
    ) -> ConsentContext:
        from shared.sequences.engine import engine_from_settings

        store = store or SubscriberStore(settings.table_name, settings.events_table_name)
        queue_url = settings.send_queue_url

        return cls(
            store=store,
            pending=PendingSignups(settings.table_name),
            send=SendContext.from_settings(settings, store),
            topics=require_topics(topics_file),
            config=ConsentConfig.from_settings(settings),
            sequences=engine_from_settings(settings, store, sequences_dir),
            queue=send_queue(queue_url) if queue_url else None,
        )


def send_queue(queue_url: str, sqs: SQSClient | None = None) -> Callable[[SendJob, datetime, int], None]:
    """:attr:`ConsentContext.queue` on the send queue at ``queue_url`` (``sqs``: a client of
    the target's; by default the environment's, made when the first job is queued)."""

    def queue(job: SendJob, moment: datetime, delay_s: int) -> None:
        client = sqs or aws_client("sqs")
        send_bodies(client, queue_url, [to_message(job)], what="a confirmation job", delay_s=delay_s)

    return queue
