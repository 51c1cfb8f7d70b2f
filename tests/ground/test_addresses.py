"""What is public, and what an ``allow_hosts`` entry allows (tether/addresses.py)."""

from __future__ import annotations

import ipaddress

from hypothesis import given
from hypothesis import strategies as st

from tether.addresses import HostRule, carried, parse_rule, refusal

NAT64 = int(ipaddress.IPv6Address("64:ff9b::"))


@given(address=st.ip_addresses(v=4))
def test_an_ipv6_form_carrying_an_ipv4_address_is_judged_by_it(
    address: ipaddress.IPv4Address,
) -> None:
    mapped = ipaddress.IPv6Address(f"::ffff:{address}")
    nat64 = ipaddress.IPv6Address(NAT64 | int(address))
    assert carried(mapped) == carried(nat64) == address
    assert refusal(mapped) == refusal(nat64) == refusal(address)


@given(address=st.ip_addresses(v=4))
def test_6to4_is_refused_when_the_address_it_carries_is(address: ipaddress.IPv4Address) -> None:
    sixtofour = ipaddress.IPv6Address((0x2002 << 112) | (int(address) << 80) | 1)
    if refusal(address) is not None:
        assert refusal(sixtofour) is not None


def test_each_kind_of_non_public_address_is_named_and_public_ones_pass() -> None:
    kinds = {
        "127.0.0.2": "loopback",
        "::1": "loopback",
        "169.254.169.254": "link-local",
        "fe80::1": "link-local",
        "10.1.2.3": "private",
        "fd00::1": "private",
        "100.64.0.1": "non-public",
        "224.0.0.1": "multicast",
        "ff02::1": "multicast",
        "0.0.0.0": "unspecified",
        "240.0.0.1": "reserved",
        "::ffff:192.168.1.1": "private",
        "64:ff9b::7f00:1": "loopback",
    }
    assert {text: refusal(ipaddress.ip_address(text)) for text in kinds} == kinds
    for text in (
        "93.184.216.34",
        "8.8.8.8",
        "2606:4700::1111",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
    ):
        assert refusal(ipaddress.ip_address(text)) is None, text


def test_allow_hosts_entries_parse_into_names_networks_and_ports() -> None:
    net = ipaddress.ip_network
    entries = ["CDN.lan.", "cdn.lan:8080", "10.0.0.0/8", "127.0.0.1:9000", "[::1]:9000", "fd00::/8"]
    assert [parse_rule(entry) for entry in entries] == [
        HostRule(name="cdn.lan"),
        HostRule(name="cdn.lan", port=8080),
        HostRule(network=net("10.0.0.0/8")),
        HostRule(network=net("127.0.0.1/32"), port=9000),
        HostRule(network=net("::1/128"), port=9000),
        HostRule(network=net("fd00::/8")),
    ]


@given(address=st.ip_addresses(), port=st.one_of(st.none(), st.integers(1, 65535)))
def test_an_address_entry_allows_that_address_and_only_on_its_port(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int | None
) -> None:
    written = f"[{address}]" if address.version == 6 and port else str(address)
    rule = parse_rule(f"{written}:{port}" if port else written)
    assert rule.matches("any.name", address, port or 443)
    if port is not None:
        assert not rule.matches("any.name", address, port % 65535 + 1)


LABELS = st.text("abcdefghijklmnopqrstuvwxyz0123456789-", max_size=8).map(lambda text: f"a{text}z")


@given(name=st.lists(LABELS, min_size=1, max_size=4).map(".".join))
def test_a_name_entry_allows_that_name_whatever_its_address(name: str) -> None:
    rule = parse_rule(name.upper() + ".")
    assert rule.matches(name, None, 80) and rule.matches(name + ".", None, 443)
    assert not rule.matches("x" + name, None, 80)
