"""The one module that builds and parses DynamoDB keys (DESIGN.md section 3).

Every key component that comes from the outside (emails, tags, sequence ids) is
validated before it gets here; these builders re-check the separator so that no
caller can forge another key by accident.
"""

from __future__ import annotations

import hashlib
import zlib
from datetime import date

SEP = "#"

SUB = "SUB"
TAG = "TAG"
EXEC = "EXEC"
SENT = "SENT"
SEND = "SEND"
STATS = "STATS"
EVT = "EVT"
PROFILE = "PROFILE"
SUPPRESSION = "SUPPRESSION"
COUNTERS = "COUNTERS"
BROADCAST = "BROADCAST"
WARMUP = "WARMUP"  # PK prefix of a sending domain's warm-up (shared.sending.warmup)
WARMUP_STATE = "STATE"
REPUTATION = "REPUTATION"  # PK of the reputation guardrail's records (SK: the configuration set's spec id)
ERASED = "ERASED"
DIR = "DIR"
IDEMPOTENCY_PK = "IDEMPOTENCY#events"


class KeyError_(ValueError):  # noqa: N801 - avoid clashing with the builtin KeyError
    """A key component contained the separator or was empty."""


def _part(value: str, what: str) -> str:
    if not value or SEP in value:
        raise KeyError_(f"invalid {what} for a key: must be non-empty and contain no '#'")
    return value


def sub_pk(email: str) -> str:
    # Emails may not contain '#' after normalisation (see models.normalise_email).
    return f"{SUB}{SEP}{_part(email, 'email')}"


def email_from_sub(key: str) -> str:
    prefix = f"{SUB}{SEP}"
    if not key.startswith(prefix):
        raise KeyError_(f"not a subscriber key: {key[:20]}")
    return key[len(prefix) :]


def erased_pk(email: str) -> str:
    """``ERASED#<sha256 of the address>``: remembers that an address was erased without naming
    it, so SES events that arrive after the erase leave nothing behind (shared.engagement.consumer)."""
    return f"{ERASED}{SEP}{hashlib.sha256(email.encode()).hexdigest()}"


def tag_pk(tag: str) -> str:
    return f"{TAG}{SEP}{_part(tag, 'tag')}"


def exec_sk(sequence_id: str) -> str:
    return f"{EXEC}{SEP}{_part(sequence_id, 'sequence id')}"


def exec_pk(sequence_id: str) -> str:
    return exec_sk(sequence_id)


ENTERED_PREFIX = "ENTERED#"


def entered_sk(sequence_id: str) -> str:
    """``SUB#<email>`` / ``ENTERED#<sequence>``: the subscriber has entered this sequence."""
    return f"{ENTERED_PREFIX}{_part(sequence_id, 'sequence id')}"


def sequence_from_exec(key: str) -> str:
    prefix = f"{EXEC}{SEP}"
    if not key.startswith(prefix):
        raise KeyError_("not an execution key")
    return key[len(prefix) :]


def sent_sk(iso_ts: str, source: str, send_id: str) -> str:
    return f"{SENT}{SEP}{iso_ts}{SEP}{_part(source, 'source')}{SEP}{_part(send_id, 'send id')}"


SENT_PREFIX = f"{SENT}{SEP}"
EXEC_PREFIX = f"{EXEC}{SEP}"
# The ``ended`` mark of an EXEC item whose execution finished its steps (the change stream's REMOVE
# record tells a completed execution from a stopped one by it: webhooks, the executions count).
EXECUTION_COMPLETED = "completed"


def warmup_pk(domain: str) -> str:
    return f"{WARMUP}{SEP}{_part(domain.lower(), 'domain')}"


def warmup_day_sk(day: date) -> str:
    return f"DAY{SEP}{day.isoformat()}"


def stats_pk(source: str) -> str:
    return f"{STATS}{SEP}{_part(source, 'source')}"


def event_sk(iso_ts: str, event_type: str, suffix: str) -> str:
    return f"{EVT}{SEP}{iso_ts}{SEP}{_part(event_type, 'event type')}{SEP}{_part(suffix, 'suffix')}"


def broadcast_sk(iso_ts: str, broadcast_id: str) -> str:
    return f"{iso_ts}{SEP}{_part(broadcast_id, 'broadcast id')}"


def send_claim_sk(source: str, step: str) -> str:
    """The send-once claim of one (subscriber, source, step), under the subscriber's PK."""
    return f"{SEND}{SEP}{_part(source, 'source')}{SEP}{_part(step, 'step')}"


SEND_CLAIM_PREFIX = f"{SEND}{SEP}"


# Engagement (shared/store/stats.py): per-template counters live beside the per-source ones, and
# "first open/click" markers live under the subscriber (so erase removes them).
TEMPLATE_COUNTERS = "TEMPLATE_COUNTERS"
UNIQUE = "UNIQ"


def template_stats_key(template: str) -> tuple[str, str]:
    """(PK, SK) of a template's counters: ``STATS#<template key>`` / ``TEMPLATE_COUNTERS``."""
    return stats_pk(template), TEMPLATE_COUNTERS


# A sequence's active executions: ``STATS#<sequence>`` / ``ACTIVE`` (sharded like every counters
# item), ADDed +1/-1 in the transactions that write and delete the EXEC pairs, so it counts
# them exactly without reading the ``EXEC#<sequence>`` partition (shared/store/subscribers.py).
ACTIVE = "ACTIVE"


def active_key(sequence_id: str) -> tuple[str, str]:
    return stats_pk(sequence_id), ACTIVE


# ----- keys spread over shards (docs/data-model.md, "Keys that would be hot") -------------------
# DynamoDB gives one partition key at most 1,000 WCU/s: an item every send adds to (a counters
# item) or an index key every event of a broadcast lands on would cap the send rate. Such keys
# are split into shards that writes pick and reads sum or merge.
COUNTER_SHARDS = 16  # a counters item is 16 items; a write ADDs to one of them (random)
INDEX_SHARDS = 16  # an events-index key is 16 keys; the subscriber's address picks one


# ----- the list-health fold's marks (shared.store.list_health) --------------------------------
FOLD = "FOLD"
FOLD_MARK = "MARK"


def fold_mark_key(pk: str, sk: str) -> tuple[str, str]:
    """(PK, SK) of the list-health fold's mark of the item (pk, sk): the last stream record of
    that item it counted. ``FOLD#<sha256 of the item's key>``: no address in it, and not under
    the subscriber's partition (an erase leaves it to expire)."""
    digest = hashlib.sha256(f"{pk}{SEP}{sk}".encode()).hexdigest()
    return f"{FOLD}{SEP}{digest}", FOLD_MARK


def counter_shard_pk(pk: str, shard: int) -> str:
    """The partition key of shard ``shard`` of the counters item under ``pk``: shard 0 is
    ``pk`` itself (``STATS#<scope>``), shard n > 0 ``STATS#<scope>#<n>``."""
    if not 0 <= shard < COUNTER_SHARDS:
        raise KeyError_(f"counter shard out of range: {shard}")
    return pk if shard == 0 else f"{pk}{SEP}{shard}"


def counter_shard_pks(pk: str) -> list[str]:
    """Every shard's partition key of the counters item under ``pk`` (what a read sums)."""
    return [counter_shard_pk(pk, n) for n in range(COUNTER_SHARDS)]


def counter_scope(pk: str) -> tuple[str, int]:
    """(scope, shard) of a counters shard's partition key: ``STATS#b1#7`` -> ("b1", 7)."""
    _, rest = pk.split(SEP, 1)
    scope, _, shard = rest.partition(SEP)
    return scope, int(shard) if shard else 0


def index_shard(email: str) -> int:
    """The events-index (and directory) shard of a subscriber: stable per address (CRC-32)."""
    return zlib.crc32(email.encode("utf-8")) % INDEX_SHARDS


def index_key(value: str, shard: int) -> str:
    """An events-index partition key: ``<source or template>#<shard>`` (``b1#07``)."""
    return f"{_part(value, 'index key')}{SEP}{shard:02d}"


def index_keys(value: str) -> list[str]:
    """Every shard's index key of ``value`` (what a read queries and merges)."""
    return [index_key(value, n) for n in range(INDEX_SHARDS)]


UNCOUNTED = "UNCOUNTED"


def uncounted_key(source: str, template: str) -> tuple[str, str]:
    """(PK, SK) of the broadcast sends of (source, template) whose ``send`` counters are still
    to be added: ``STATS#<source>`` / ``UNCOUNTED#<template>`` (``shared.store.stats``)."""
    return stats_pk(source), f"{UNCOUNTED}{SEP}{_part(template, 'template')}"


def unique_marker_sk(metric: str, scope: str, value: str) -> str:
    """``UNIQ#<metric>#<scope>#<source or template>``: the subscriber already counted once."""
    return f"{UNIQUE}{SEP}{_part(metric, 'metric')}{SEP}{_part(scope, 'scope')}{SEP}{_part(value, scope)}"


# Broadcasts (shared/broadcasts): the record lives at PK ``BROADCAST`` / SK ``<iso ts>#<id>``
# (listing by time); everything looked up by id lives in the broadcast's own partition.
BROADCAST_POINTER = "POINTER"  # PK BROADCAST#<id>: the record's SK (and the --id guard)
BROADCAST_RESEND = "RESEND"  # PK BROADCAST#<id>: its resend to non-openers (one per broadcast)


def broadcast_pk(broadcast_id: str) -> str:
    return f"{BROADCAST}{SEP}{_part(broadcast_id, 'broadcast id')}"


def broadcast_page_sk(round_: int, page: int) -> str:
    """One resolved audience page (its recipients), written once per (round, page)."""
    return f"PAGE{SEP}{round_:04d}{SEP}{page:06d}"


def broadcast_batch_sk(round_: int, page: int, index: int) -> str:
    """Marker: this batch's outcomes were counted (a redelivered batch counts nothing)."""
    return f"BATCH{SEP}{round_:04d}{SEP}{page:06d}{SEP}{index:04d}"


# Send-rate windows (shared/sending/rate.py): one item per (limiter scope, time window).
RATE = "RATE"


def rate_pk(scope: str) -> str:
    return f"{RATE}{SEP}{_part(scope, 'rate scope')}"


def rate_clock_key(scope: str) -> tuple[str, str]:
    """(PK, SK) of the shared send-rate limiter's clock: ``RATE#<scope>`` / ``clock``
    (shared.sending.rate). One key: each write hands out a lease of many tokens, so it takes
    about ``rate / lease`` writes a second (100 at most by the lease's sizing)."""
    return rate_pk(scope), "clock"


def rate_reserve_key(scope: str, second: int, shard: int) -> tuple[str, str]:
    """(PK, SK) of one shard of the mail other than broadcasts sent in one second (epoch
    seconds): ``RATE#<scope>#r<second>#<shard>`` / ``r<second>`` (shared.sending.rate)."""
    return f"{rate_pk(scope)}{SEP}r{int(second)}{SEP}{int(shard)}", f"r{int(second)}"


# Consent (shared/consent): a sign-up waiting for its confirmation lives beside the profile and
# is never one (no audience, scan or sequence reads it as a subscriber).
PENDING = "PENDING"


def pending_key(email: str) -> tuple[str, str]:
    """(PK, SK) of an address's pending sign-up: ``SUB#<email>`` / ``PENDING``."""
    return sub_pk(email), PENDING


# Sign-up limits (shared/store/pending.py): one cooldown item per mailbox (its mailbox key:
# case folded, ``+tag`` dropped, the provider's documented aliases folded; hashed: no address in
# it), one counter per recipient domain and hour, one per client address and hour.
SIGNUP = "SIGNUP"
COOLDOWN = "COOLDOWN"


def signup_mailbox_pk(mailbox: str) -> str:
    """``SIGNUP#<sha256 of the mailbox key>``: the cooldown of every spelling of one mailbox."""
    return f"{SIGNUP}{SEP}{hashlib.sha256(_part(mailbox, 'mailbox').encode()).hexdigest()}"


def signup_domain_key(domain: str, hour: str) -> tuple[str, str]:
    """``SIGNUP#DOMAIN#<domain>`` / ``HOUR#<YYYYMMDDHH>``: confirmation mails to one recipient
    domain in one hour (UTC)."""
    return f"{SIGNUP}{SEP}DOMAIN{SEP}{_part(domain, 'domain')}", f"HOUR{SEP}{_part(hour, 'hour')}"


SIGNUP_DOMAIN_PREFIX = f"{SIGNUP}{SEP}DOMAIN{SEP}"


def signup_source_key(source: str, hour: str) -> tuple[str, str]:
    """``SIGNUP#SOURCE#<keyed hash of the client's IP>`` / ``HOUR#<YYYYMMDDHH>``: sign-ups from
    one network address in one hour (UTC); no address in it."""
    return f"{SIGNUP}{SEP}SOURCE{SEP}{_part(source, 'source')}", f"HOUR{SEP}{_part(hour, 'hour')}"


# ----- the subscriber directory (``DIR#<shard>`` / ``<address lowercased>#<address>``) --------
# One item per subscriber, written with its profile (shared.store.subscribers): the listing of
# every subscriber in address order and the search by address prefix are Queries of these
# partitions, merged, instead of Scans of the whole table.
# 8 partitions: a page in address order is 8 Queries; each takes 1/8 of the sign-ups, up to
# 1,000 writes/s a key, so 4,000 new subscribers/s in transactions (a tag's TAG# key takes 500).
DIRECTORY_SHARDS = 8


def directory_pk(shard: int, status: str | None = None) -> str:
    """``DIR#<shard>``: every subscriber; ``DIR#<status>#<shard>``: only those of a status other
    than ``subscribed`` (a second, sparse directory: a few subscribers have it)."""
    if status is None:
        return f"{DIR}{SEP}{shard:02d}"
    return f"{DIR}{SEP}{_part(status, 'status')}{SEP}{shard:02d}"


def directory_pks(status: str | None = None) -> list[str]:
    """Every partition of the directory (of one status: the sparse one), what a listing
    queries and merges."""
    return [directory_pk(n, status) for n in range(DIRECTORY_SHARDS)]


def directory_sk(email: str) -> str:
    """Sorted by the address lowercased (a prefix search is case-blind), then the address."""
    return f"{_part(email, 'email').lower()}{SEP}{email}"


def directory_key(email: str, status: str | None = None) -> tuple[str, str]:
    """(PK, SK) of the subscriber's directory item (with ``status``: its item in that status's
    sparse directory); the shard is its events-index shard's, modulo the directory's shards."""
    return directory_pk(index_shard(email) % DIRECTORY_SHARDS, status), directory_sk(email)


def email_from_directory(sk: str) -> str:
    return sk.rsplit(SEP, 1)[1]


# ----- webhooks (shared/webhooks) ------------------------------------------------------------
WEBHOOK = "WEBHOOK"  # PK of the endpoints; SK EP#<endpoint id>
WEBHOOK_ENDPOINT_PREFIX = "EP#"
WEBHOOK_DELIVERY = "WHD"  # PK WHD#<endpoint id>; SK <event time>#<message id>
WEBHOOK_PARKED = "WHP"  # PK WHP#<endpoint id>; SK the parked delivery's SK (an open circuit)


def webhook_endpoint_sk(endpoint_id: str) -> str:
    return f"{WEBHOOK_ENDPOINT_PREFIX}{_part(endpoint_id, 'endpoint id')}"


def webhook_delivery_pk(endpoint_id: str) -> str:
    return f"{WEBHOOK_DELIVERY}{SEP}{_part(endpoint_id, 'endpoint id')}"


def webhook_parked_pk(endpoint_id: str) -> str:
    return f"{WEBHOOK_PARKED}{SEP}{_part(endpoint_id, 'endpoint id')}"


def webhook_delivery_sk(iso_ts: str, message_id: str) -> str:
    return f"{_part(iso_ts, 'time')}{SEP}{_part(message_id, 'message id')}"


# ----- list hygiene (shared.engagement.sunset, docs/hygiene.md) ---------------------------------
ENGAGEMENT = "ENGAGEMENT"  # SK of SUB#<email>: the subscriber's last human engagement and cold mark
HYGIENE_PK = "HYGIENE"  # PK of the daily run's checkpoint (SK STATE)
HYGIENE_STATE = "STATE"
HYGIENE_BACKFILL = "BACKFILL"  # SK of HYGIENE: where an unfinished `mailstep hygiene backfill` stopped
HYGIENE_WARM = "E"  # HygieneIndex bucket of a warm subscriber: the day of their last engagement
HYGIENE_COLD = "C"  # HygieneIndex bucket of a cold subscriber: the day they turned cold


def hygiene_key(kind: str, day: str, shard: int) -> str:
    """A HygieneIndex partition key: ``E#2026-03-01#07`` (warm: last engaged that day) or
    ``C#2026-03-01#07`` (cold since that day). The shard (the subscriber's ``index_shard``)
    spreads one day's writes over ``INDEX_SHARDS`` keys."""
    if kind not in (HYGIENE_WARM, HYGIENE_COLD) or not 0 <= shard < INDEX_SHARDS:
        raise KeyError_(f"invalid hygiene bucket: {kind!r} {shard}")
    return f"{kind}{SEP}{_part(day, 'day')}{SEP}{shard:02d}"


def hygiene_keys(kind: str, day: str) -> list[str]:
    """Every shard's HygieneIndex key of one day's bucket (what the daily run queries)."""
    return [hygiene_key(kind, day, n) for n in range(INDEX_SHARDS)]
