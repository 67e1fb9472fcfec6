"""The SSRF guard: which webhook URLs and addresses are refused, deployed and locally."""

from __future__ import annotations

import ipaddress

import pytest

from shared.webhooks import ssrf


def resolver_to(*addresses: str) -> ssrf.Resolver:
    return lambda host, port: list(addresses)


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("10.0.0.1", "private"),
        ("172.16.5.4", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "private"),
        ("169.254.169.254", "metadata"),
        ("169.254.1.1", "link-local"),
        ("fd00:ec2::254", "metadata"),
        ("fc00::1", "unique-local"),
        ("fe80::1", "link-local"),
        ("0.0.0.0", "private"),
        ("224.0.0.1", "reserved"),
        ("::ffff:127.0.0.1", "loopback (embedded in IPv6)"),
        ("::ffff:169.254.169.254", "metadata (embedded in IPv6)"),
        ("::ffff:10.0.0.1", "private (embedded in IPv6)"),
        ("64:ff9b::a9fe:a9fe", "metadata (embedded in IPv6)"),
        ("64:ff9b::7f00:1", "loopback (embedded in IPv6)"),
        ("64:ff9b:1::a00:1", "private (embedded in IPv6)"),
        ("2002:a9fe:a9fe::1", "metadata (embedded in IPv6)"),
    ],
)
def test_non_public_addresses_are_classified(address: str, reason: str) -> None:
    assert ssrf.classify(ipaddress.ip_address(address)) == reason


@pytest.mark.parametrize(
    "address", ["93.184.215.14", "2606:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"]
)
def test_public_addresses_pass(address: str) -> None:
    assert ssrf.classify(ipaddress.ip_address(address)) is None


def test_deployed_accepts_https_to_a_public_address_only() -> None:
    target = ssrf.resolve("https://hooks.example.com/in?x=1", resolver=resolver_to("93.184.215.14"))
    assert (target.scheme, target.host, target.port, target.path, target.address) == (
        "https",
        "hooks.example.com",
        443,
        "/in?x=1",
        "93.184.215.14",
    )
    with pytest.raises(ssrf.UnsafeUrl, match="must be https"):
        ssrf.resolve("http://hooks.example.com/in", resolver=resolver_to("93.184.215.14"))
    with pytest.raises(ssrf.UnsafeUrl, match="loopback"):
        ssrf.resolve("https://127.0.0.1:8443/in")


@pytest.mark.parametrize(
    "url",
    [
        "ftp://x.example/",
        "https://user:pw@x.example/",
        "https://x.example/#frag",
        "https:///nohost",
        "https://x.example:99999/",
    ],
)
def test_malformed_urls_are_refused(url: str) -> None:
    with pytest.raises(ssrf.UnsafeUrl):
        ssrf.resolve(url, resolver=resolver_to("93.184.215.14"))


def test_any_bad_address_among_several_refuses() -> None:
    # A name with one public and one metadata address (DNS answers in any order) is refused.
    with pytest.raises(ssrf.UnsafeUrl, match="metadata"):
        ssrf.resolve("https://mixed.example/", resolver=resolver_to("93.184.215.14", "169.254.169.254"))


def test_local_runtime_accepts_http_on_loopback_but_not_private_or_metadata() -> None:
    target = ssrf.resolve("http://127.0.0.1:9000/hook", allow_loopback_http=True)
    assert (target.scheme, target.address) == ("http", "127.0.0.1")
    with pytest.raises(ssrf.UnsafeUrl, match="private"):
        ssrf.resolve("http://10.1.2.3/hook", allow_loopback_http=True)
    with pytest.raises(ssrf.UnsafeUrl, match="metadata"):
        ssrf.resolve("http://169.254.169.254/latest/meta-data", allow_loopback_http=True)
    with pytest.raises(ssrf.UnsafeUrl, match="metadata"):
        ssrf.resolve("http://[fd00:ec2::254]/", allow_loopback_http=True)
    with pytest.raises(ssrf.UnsafeUrl, match="loopback only"):
        ssrf.resolve(
            "http://hooks.example.com/", allow_loopback_http=True, resolver=resolver_to("93.184.215.14")
        )


def test_peer_check_refuses_a_private_connected_address() -> None:
    ssrf.check_peer("93.184.215.14")
    with pytest.raises(ssrf.UnsafeUrl):
        ssrf.check_peer("10.0.0.7")
    ssrf.check_peer("127.0.0.1", allow_loopback_http=True)
    with pytest.raises(ssrf.UnsafeUrl):
        ssrf.check_peer("169.254.169.254", allow_loopback_http=True)


SITE_LOCAL = ("fec0::1", "fec0:0:0:1::5", "feff:ffff::1", "fec0::a9fe:a9fe", "fec0::ffff:808:808")


@pytest.mark.parametrize("address", SITE_LOCAL)
def test_site_local_ipv6_is_refused_whatever_ipaddress_calls_it(address: str) -> None:
    # fec0::/10 (deprecated site-local, RFC 3879): ipaddress on Python 3.11 and 3.12 calls it
    # is_global and not is_private; the guard refuses it anyway (not in global unicast 2000::/3)
    assert ssrf.classify(ipaddress.ip_address(address)) == "site-local"
    with pytest.raises(ssrf.UnsafeUrl, match="site-local"):
        ssrf.resolve(f"https://[{address}]/hook")  # a literal in the URL
    with pytest.raises(ssrf.UnsafeUrl, match="site-local"):
        ssrf.resolve("https://hooks.example.com/", resolver=resolver_to(address))  # a DNS answer
    with pytest.raises(ssrf.UnsafeUrl, match="site-local"):  # among public answers
        ssrf.resolve("https://hooks.example.com/", resolver=resolver_to("2606:4700::1111", address))
    with pytest.raises(ssrf.UnsafeUrl, match="site-local"):  # the local runtime refuses it too
        ssrf.resolve(f"http://[{address}]/hook", allow_loopback_http=True)
    with pytest.raises(ssrf.UnsafeUrl, match="site-local"):  # the connected peer
        ssrf.check_peer(address)


@pytest.mark.parametrize("address", ["4000::1", "100::1", "ff02::1", "8000::1", "fe00::1"])
def test_ipv6_outside_global_unicast_is_refused(address: str) -> None:
    assert ssrf.classify(ipaddress.ip_address(address)) is not None
    with pytest.raises(ssrf.UnsafeUrl):
        ssrf.resolve("https://hooks.example.com/", resolver=resolver_to(address))
