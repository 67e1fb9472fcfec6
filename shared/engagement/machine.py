"""Machine engagement: opens and clicks that no person made, told apart where the events show it.

Apple Mail Privacy Protection (MPP) fetches every image of every mail through Apple's proxies
when the mail reaches the device, whether or not anyone reads it. Those fetches reach SES's
open-tracking pixel with the user agent ``Mozilla/5.0`` and nothing else (a person's mail
client sends a full user agent); ESPs identify MPP opens by it (SocketLabs, "Identifying Apple
MPP opens in Notification API events"). Such an open says the mail arrived, not that it was
read.

The verdict is stored with the event item (``machine``: why; absent: a person, as far as mailstep
can tell), never the IP address. A machine open feeds the ``open_machine`` counter instead of
``open``, claims no unique open, and does not make the subscriber "opened" for a sequence's
``opened`` condition (``SubscriberStore.has_event``). docs/hygiene.md lists what is and is not
detected.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from shared.core import clock
from shared.core.models import HIDDEN_LINK_PATH
from shared.engagement.ses_events import Click, Open, SesEvent

MPP_USER_AGENT = "Mozilla/5.0"
MPP = "mpp"  # the verdict: Apple Mail Privacy Protection's prefetch

# Machine clicks (docs/hygiene.md, "Machine clicks"). Security gateways (Microsoft Defender Safe
# Links, Proofpoint, Mimecast, Barracuda) follow every link of a mail when it arrives, before
# anyone reads it. ESPs and deliverability guides tell them apart by: clicks within about 5
# seconds of delivery ("humans are not that fast"), every link of a mail clicked at once, and a
# link no person can see being followed.
HIDDEN_LINK = "hidden_link"  # the verdict: the invisible link of mailstep's marketing layout
AT_DELIVERY = "at_delivery"  # the verdict: clicked within SCANNER_WINDOW_S of the delivery
ALL_LINKS = "all_links"  # the verdict: another link of the same mail clicked within BURST_WINDOW_S
SCANNER_WINDOW_S = 5.0
BURST_WINDOW_S = 1.0


def is_hidden_link(link: str) -> bool:
    try:
        return urlsplit(link).path.rstrip("/").endswith(HIDDEN_LINK_PATH)
    except ValueError:
        return False


def machine_verdict(event: SesEvent) -> str | None:
    """Why this SES event was made by a machine, from the event alone (None: nothing says so)."""
    detail = event.detail
    if isinstance(detail, Open) and (detail.user_agent or "").strip() == MPP_USER_AGENT:
        return MPP
    if isinstance(detail, Click) and is_hidden_link(detail.link):
        return HIDDEN_LINK
    return None


@dataclass(frozen=True)
class Neighbour:
    """An event of the same mail near a click: ``delivery`` or ``click`` (with its link)."""

    kind: str
    at: str
    link: str = ""


def click_timing_verdict(at: str, link: str, neighbours: Iterable[Neighbour]) -> str | None:
    """Why a click at ``at`` on ``link`` was a machine's, from the events of the same mail around
    it: its delivery within ``SCANNER_WINDOW_S`` (before or after: a gateway may click while the
    mail is still being accepted), or a click on another link within ``BURST_WINDOW_S``."""
    moment = clock.parse_iso(at)
    verdict = None
    for other in neighbours:
        gap = abs((clock.parse_iso(other.at) - moment).total_seconds())
        if other.kind == "delivery" and gap <= SCANNER_WINDOW_S:
            return AT_DELIVERY
        if other.kind == "click" and other.link != link and gap <= BURST_WINDOW_S:
            verdict = ALL_LINKS
    return verdict
