"""The SSRF guard of webhook URLs: which URLs an endpoint may have and which addresses a
delivery may connect to.

Deployed: ``https`` only, and every address the host resolves to must be public: loopback,
private (RFC 1918), carrier-grade NAT, link-local (169.254.0.0/16 with the instance metadata
address 169.254.169.254), unique-local (fc00::/7, with fd00:ec2::254), multicast, reserved
and unspecified addresses are refused, and so is every IPv6 address outside global unicast
2000::/3 (the deprecated site-local fec0::/10 of RFC 3879 among them: ``ipaddress`` calls it
``is_global`` on Python 3.11 and 3.12), and an IPv6 address that embeds one of them
(IPv4-mapped ``::ffff:a.b.c.d``, IPv4-compatible, NAT64 ``64:ff9b::/96`` and
``64:ff9b:1::/48``, 6to4, Teredo). ``allow_loopback_http`` (the local runtime only) also
accepts ``http`` and ``https`` URLs whose addresses are all loopback; private and metadata
addresses stay refused. A delivery connects to an address this module checked, never to a
name resolved again later (no DNS rebinding between check and connect).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Sequence[str]]

MAX_URL_LENGTH = 2048
METADATA_ADDRESSES = frozenset(
    {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
)
NAT64_NETWORKS = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
CGNAT = ipaddress.ip_network("100.64.0.0/10")
# IPv6 global unicast (IANA IPv6 Address Space registry); everything outside it is reserved,
# special-purpose or deprecated (fec0::/10 site-local, RFC 3879), never a public host.
GLOBAL_UNICAST_V6 = ipaddress.ip_network("2000::/3")


class UnsafeUrl(ValueError):
    """A webhook URL or the address it resolves to is not allowed (the message says why)."""


@dataclass(frozen=True)
class Target:
    """A checked URL: where to connect (``address``) and what to ask for."""

    scheme: str
    host: str
    port: int
    path: str  # path and query
    address: str


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if any(address in network for network in NAT64_NETWORKS):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if int(address) >> 32 == 0 and int(address) > 1:  # IPv4-compatible ::a.b.c.d (deprecated)
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def classify(address: Address) -> str | None:
    """Why a delivery may not connect to ``address`` (None: a public address)."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.scope_id:
            return "link-local"
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            reason = classify(embedded)
            return f"{reason} (embedded in IPv6)" if reason else None
    if address in METADATA_ADDRESSES:
        return "metadata"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if isinstance(address, ipaddress.IPv6Address) and address in ipaddress.ip_network("fc00::/7"):
        return "unique-local"
    if isinstance(address, ipaddress.IPv4Address) and address in CGNAT:
        return "private"
    if address.is_private:
        return "private"
    if isinstance(address, ipaddress.IPv6Address) and address.is_site_local:
        return "site-local"
    if isinstance(address, ipaddress.IPv6Address) and address not in GLOBAL_UNICAST_V6:
        return "reserved"
    if address.is_multicast or address.is_reserved or address.is_unspecified or not address.is_global:
        return "reserved"
    return None


def system_resolver(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise UnsafeUrl(f"url: host {host!r} does not resolve") from exc
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def check_url(url: str, *, allow_loopback_http: bool = False) -> tuple[str, str, int, str]:
    """The URL's form (no resolution): (scheme, host, port, path). Raises UnsafeUrl."""
    if not isinstance(url, str) or not url or len(url) > MAX_URL_LENGTH:
        raise UnsafeUrl(f"url: must be 1 to {MAX_URL_LENGTH} characters")
    if any(ch.isspace() or ord(ch) < 32 for ch in url):
        raise UnsafeUrl("url: must not contain spaces or control characters")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    allowed = ("https", "http") if allow_loopback_http else ("https",)
    if scheme not in allowed:
        raise UnsafeUrl("url: must be https" + (" (or http on loopback)" if allow_loopback_http else ""))
    if parts.username or parts.password:
        raise UnsafeUrl("url: must not carry credentials")
    if parts.fragment:
        raise UnsafeUrl("url: must not have a fragment")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise UnsafeUrl("url: has no host")
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError as exc:
        raise UnsafeUrl("url: invalid port") from exc
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return scheme, host, port, path


def resolve(url: str, *, allow_loopback_http: bool = False, resolver: Resolver | None = None) -> Target:
    """Check ``url`` and every address its host resolves to; the first address is the one to
    connect to. Raises UnsafeUrl naming the refused address class."""
    scheme, host, port, path = check_url(url, allow_loopback_http=allow_loopback_http)
    try:
        literal: Address | None = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        literal = None
    found = [str(literal)] if literal is not None else list((resolver or system_resolver)(host, port))
    if not found:
        raise UnsafeUrl(f"url: host {host!r} does not resolve")
    for text in found:
        reason = classify(ipaddress.ip_address(text))
        if reason is None:
            continue
        if reason == "loopback" and allow_loopback_http:
            continue
        raise UnsafeUrl(f"url: {host} resolves to a {reason} address, which webhooks may not reach")
    if scheme == "http" and not all(classify(ipaddress.ip_address(t)) == "loopback" for t in found):
        raise UnsafeUrl("url: http is accepted on loopback only; use https")
    return Target(scheme=scheme, host=host, port=port, path=path, address=found[0])


def check_peer(peer: str, *, allow_loopback_http: bool = False) -> None:
    """The address a connection actually reached: refused like :func:`resolve` refuses."""
    reason = classify(ipaddress.ip_address(peer))
    if reason is not None and not (reason == "loopback" and allow_loopback_http):
        raise UnsafeUrl(f"connected to a {reason} address, which webhooks may not reach")
