"""Machine engagement: opens that no person made, told apart where the SES event shows it.

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

from shared.engagement.ses_events import Open, SesEvent

MPP_USER_AGENT = "Mozilla/5.0"
MPP = "mpp"  # the verdict: Apple Mail Privacy Protection's prefetch


def machine_verdict(event: SesEvent) -> str | None:
    """Why this SES event was made by a machine (None: nothing says so)."""
    detail = event.detail
    if isinstance(detail, Open) and (detail.user_agent or "").strip() == MPP_USER_AGENT:
        return MPP
    return None
