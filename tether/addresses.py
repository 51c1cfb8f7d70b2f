"""What an address is: public or not, and what a ``media.allow_hosts`` entry allows.

The vocabulary of the URL guard (``adapters/url_guard.py``), kept on the ground floor and
free of I/O so that the config can parse the allow list at load (a bad entry fails with
its key path) and the guard only matches. An address is *public* unless it is loopback,
link-local, private, shared, multicast, reserved or unspecified; an IPv6 address that
carries an IPv4 one (IPv4-mapped ``::ffff:a.b.c.d``, NAT64 ``64:ff9b::/96``, 6to4) is
judged by the IPv4 address it carries, since that is where the packets go.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: The well-known NAT64 prefix: an IPv6-only network reaches IPv4 hosts through it.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")


def carried(address: IPAddress) -> IPAddress:
    """The IPv4 address an IPv4-mapped or NAT64 IPv6 address stands for, else itself."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF)
    return address


def refusal(address: IPAddress) -> str | None:
    """What kind of address ``address`` is when it is not public (``loopback``,
    ``link-local``, ``private``, ...), or None for a public one."""
    seen = carried(address)
    if isinstance(seen, ipaddress.IPv6Address) and seen.sixtofour is not None:
        inner = refusal(seen.sixtofour)
        if inner is not None:
            return inner
    kinds = (
        ("loopback", seen.is_loopback),
        ("link-local", seen.is_link_local),
        ("multicast", seen.is_multicast),
        ("unspecified", seen.is_unspecified),
        ("reserved", seen.is_reserved),
        ("private", seen.is_private),
        ("non-public", not seen.is_global),
    )
    return next((kind for kind, flag in kinds if flag), None)


def normal_host(host: str) -> str:
    """A host name as the rules compare it: lower case, without a final dot."""
    return host.lower().rstrip(".")


@dataclass(frozen=True, slots=True)
class HostRule:
    """One ``allow_hosts`` entry: a host name or a network, and maybe a port."""

    name: str | None = None
    network: IPNetwork | None = None
    port: int | None = None

    def matches(self, host: str, address: IPAddress | None, port: int | None) -> bool:
        """Whether a connection to ``address`` (named ``host`` in the URL) on ``port`` is
        allowed by this entry."""
        if self.port is not None and port != self.port:
            return False
        if self.name is not None:
            return normal_host(host) == self.name
        return address is not None and self.network is not None and address in self.network


def _port(text: str, entry: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"{entry!r}: the port must be 1 to 65535")
    return int(text)


def _network(text: str) -> IPNetwork | None:
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None


def parse_rule(entry: str) -> HostRule:
    """``cdn.lan``, ``cdn.lan:8080``, ``10.0.0.0/8``, ``127.0.0.1:9000``, ``[::1]:9000``;
    :class:`ValueError` saying what is wrong with anything else."""
    text, port = entry.strip(), None
    if "://" in text:
        raise ValueError(f"{entry!r}: write the host (cdn.lan, cdn.lan:8080), not a URL")
    if text.startswith("["):  # [v6] or [v6]:port
        inside, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(f"{entry!r}: write an IPv6 address as [::1] or [::1]:PORT")
        text, port = inside, _port(rest[1:], entry) if rest else None
    elif text.count(":") == 1:  # name:port or v4:port (a bare IPv6 address has several)
        text, _, given = text.partition(":")
        port = _port(given, entry)
    network = _network(text)
    if network is not None:
        return HostRule(network=network, port=port)
    if ":" in text or "/" in text:
        raise ValueError(f"{entry!r} is not an address, a network or a host name")
    name = normal_host(text)
    if name.replace(".", "").isdigit():
        raise ValueError(f"{entry!r} is not an IPv4 address in its a.b.c.d form")
    if not name or not all(_LABEL.fullmatch(label) for label in name.split(".")):
        raise ValueError(
            f"{entry!r} is not a host name (letters, digits and '-' between dots;"
            " write a non-ASCII name in its xn-- form)"
        )
    return HostRule(name=name, port=port)


@functools.cache
def parse_rules(entries: tuple[str, ...]) -> tuple[HostRule, ...]:
    """Every entry parsed, once per distinct list."""
    return tuple(parse_rule(entry) for entry in entries)
