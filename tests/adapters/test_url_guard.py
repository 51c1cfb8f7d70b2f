"""The guarded client for URLs a handler names (adapters/url_guard.py), over real HTTP.

Listeners on 127.0.0.2, 127.0.0.1 and ::1 count every connection made to them and
would answer a request with a body; a refused URL must leave them at zero, which is
what "refused before any connection" means. The same listeners, allowed through
``media.allow_hosts``, are fetched: so a zero is a refusal, not a listener that
could not be reached. The "public" server redirecting to them is the fake CDN on
127.0.0.1, itself allowed by its port only.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fakes.discord_media import FakeCdn
from tether.adapters.url_guard import URLRefused, fetch_public
from tether.config.schema import MediaConfig
from tether.errors import DownloadError, TooLarge

BODY = b"secret admin page"


@dataclass
class Listener:
    """A TCP server that counts connections and answers any request with :data:`BODY`
    (or never answers, when ``silent``)."""

    host: str
    silent: bool = False
    connections: int = 0
    port: int = 0
    _server: asyncio.Server | None = field(default=None, repr=False)

    async def start(self) -> Listener:
        self._server = await asyncio.start_server(self._serve, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await reader.readuntil(b"\r\n\r\n")
            if self.silent:
                await reader.read()  # until the client gives up
                return
            head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(BODY)}\r\nConnection: close\r\n\r\n"
            writer.write(head.encode() + BODY)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@dataclass
class Loopback:
    """Listeners on three loopback addresses, and the URLs that reach them."""

    two: Listener  # 127.0.0.2
    one: Listener  # 127.0.0.1: localhost, ::ffff:127.0.0.1
    six: Listener  # ::1

    def urls(self) -> list[str]:
        return [
            f"http://127.0.0.2:{self.two.port}/admin",
            f"http://127.0.0.1:{self.one.port}/admin",
            f"http://localhost:{self.one.port}/admin",
            f"http://LocalHost:{self.one.port}/admin",
            f"http://[::1]:{self.six.port}/admin",
            f"http://[::ffff:127.0.0.1]:{self.one.port}/admin",
            f"http://[::ffff:7f00:1]:{self.one.port}/admin",
            f"https://[::ffff:127.0.0.2]:{self.two.port}/admin",
        ]

    def connections(self) -> list[int]:
        return [self.two.connections, self.one.connections, self.six.connections]


@pytest.fixture
async def loopback() -> AsyncIterator[Loopback]:
    listeners = [await Listener(host).start() for host in ("127.0.0.2", "127.0.0.1", "::1")]
    try:
        yield Loopback(*listeners)
    finally:
        for listener in listeners:
            await listener.stop()


@pytest.fixture
async def cdn() -> AsyncIterator[FakeCdn]:
    server = await FakeCdn().start()
    try:
        yield server
    finally:
        await server.stop()


#: Addresses no listener can hold here: a connection attempt would hang or fail, never
#: be refused by the guard, so only a refusal passes.
UNREACHABLE = [
    "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
    "http://10.0.0.1/",
    "http://10.255.255.254:8080/x",
    "http://192.168.1.1/",
    "http://172.16.0.1/",
    "http://100.64.0.1/",
    "http://0.0.0.0/",
    "http://[fe80::1]/",
    "http://[fd00::1]/",
    "http://[::ffff:169.254.169.254]/",
    "http://[64:ff9b::a9fe:a9fe]/",  # NAT64 of 169.254.169.254
    "http://224.0.0.1/",
]
FAST = MediaConfig(fetch_timeout=2)


async def test_loopback_in_every_spelling_is_refused_before_any_connection(
    loopback: Loopback,
) -> None:
    for url in loopback.urls():
        with pytest.raises(URLRefused, match="loopback address: not fetched"):
            await fetch_public(url, 1000, FAST)
    assert loopback.connections() == [0, 0, 0]


async def test_private_link_local_and_reserved_addresses_are_refused() -> None:
    for url in UNREACHABLE:
        with pytest.raises(URLRefused, match="address: not fetched"):
            await fetch_public(url, 1000, FAST)


async def test_the_refusal_says_what_the_address_is_and_how_to_allow_it() -> None:
    with pytest.raises(URLRefused) as metadata:
        await fetch_public(UNREACHABLE[0], 1000, FAST)
    assert str(metadata.value) == (
        "169.254.169.254 is a link-local address: not fetched (media.allow_hosts can allow it)"
    )
    with pytest.raises(URLRefused) as mapped:
        await fetch_public("http://[::ffff:10.1.2.3]/", 1000, FAST)
    assert str(mapped.value).startswith("10.1.2.3 (as ::ffff:a01:203) is a private address")


async def test_a_public_url_redirecting_to_a_private_one_is_refused_at_the_hop(
    loopback: Loopback, cdn: FakeCdn
) -> None:
    media = MediaConfig(allow_hosts=[f"127.0.0.1:{cdn.port}"], fetch_timeout=2)
    targets = [*loopback.urls(), *UNREACHABLE]
    for target in targets:
        with pytest.raises(URLRefused, match="address: not fetched"):
            await fetch_public(cdn.redirect(target), 1000, media)
    assert loopback.connections() == [0, 0, 0]
    assert len(cdn.fetched) == len(targets)  # each redirect was asked for, nothing after it
    for status in (301, 303, 307, 308):
        with pytest.raises(URLRefused):
            await fetch_public(cdn.redirect(loopback.urls()[0], status), 1000, media)
    assert loopback.connections() == [0, 0, 0]
    # A redirect to an allowed place is followed.
    assert await fetch_public(cdn.redirect(cdn.add(b"the file", "f.txt")), 1000, media) == (
        b"the file"
    )


async def test_an_allowed_host_is_fetched_and_only_on_its_port(loopback: Loopback) -> None:
    two, one = loopback.two, loopback.one
    allowed = MediaConfig(allow_hosts=[f"127.0.0.2:{two.port}", "localhost"])
    assert await fetch_public(f"http://127.0.0.2:{two.port}/admin", 1000, allowed) == BODY
    assert await fetch_public(f"http://localhost:{one.port}/admin", 1000, allowed) == BODY
    assert (two.connections, one.connections) == (1, 1)
    # The name was allowed, not its address; the address on another port neither.
    with pytest.raises(URLRefused):
        await fetch_public(f"http://127.0.0.1:{one.port}/admin", 1000, allowed)
    other = MediaConfig(allow_hosts=[f"127.0.0.2:{two.port + 1 if two.port < 65535 else 1}"])
    with pytest.raises(URLRefused):
        await fetch_public(f"http://127.0.0.2:{two.port}/admin", 1000, other)
    network = MediaConfig(allow_hosts=["127.0.0.0/8", "::1"])
    assert await fetch_public(f"http://[::ffff:127.0.0.2]:{two.port}/", 1000, network) == BODY
    assert await fetch_public(f"http://[::1]:{loopback.six.port}/", 1000, network) == BODY
    assert loopback.connections() == [2, 1, 1]


async def test_redirects_are_capped_and_each_counts(cdn: FakeCdn) -> None:
    media = MediaConfig(allow_hosts=[f"127.0.0.1:{cdn.port}"], max_redirects=2)
    final = cdn.add(b"at the end", "end.txt")
    two = cdn.redirect(cdn.redirect(final))
    assert await fetch_public(two, 1000, media) == b"at the end"
    three = cdn.redirect(two)
    cdn.fetched.clear()
    with pytest.raises(URLRefused, match=r"more than 2 redirects \(media.max_redirects\)"):
        await fetch_public(three, 1000, media)
    assert len(cdn.fetched) == 3  # the third redirect was not followed


async def test_only_http_and_https_are_fetched(cdn: FakeCdn) -> None:
    for url in ("file:///etc/passwd", "ftp://example.com/x", "gopher://example.com/", "/x"):
        with pytest.raises(URLRefused, match="only http and https URLs are fetched"):
            await fetch_public(url, 1000, FAST)
    media = MediaConfig(allow_hosts=[f"127.0.0.1:{cdn.port}"])
    with pytest.raises(URLRefused, match="not 'file'"):
        await fetch_public(cdn.redirect("file:///proc/self/environ"), 1000, media)


async def test_size_and_time_are_capped(cdn: FakeCdn) -> None:
    media = MediaConfig(allow_hosts=[f"127.0.0.1:{cdn.port}"])
    with pytest.raises(TooLarge):
        await fetch_public(cdn.add(bytes(11), "eleven.bin"), 10, media)
    silent = await Listener("127.0.0.1", silent=True).start()
    try:
        slow = MediaConfig(allow_hosts=[f"127.0.0.1:{silent.port}"], fetch_timeout=0.1)
        with pytest.raises(DownloadError, match=r"no file within media.fetch_timeout \(0.1 s\)"):
            await fetch_public(f"http://127.0.0.1:{silent.port}/", 1000, slow)
    finally:
        await silent.stop()
    assert silent.connections == 1


# -- properties -------------------------------------------------------------------------

_NOT_PUBLIC_V4 = [
    ipaddress.IPv4Network(n)
    for n in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "224.0.0.0/4",
        "240.0.0.0/4",
    )
]
not_public_v4 = st.sampled_from(_NOT_PUBLIC_V4).flatmap(
    lambda net: st.integers(0, net.num_addresses - 1).map(lambda i: net[i])
)


def _spellings(v4: ipaddress.IPv4Address) -> list[str]:
    """Ways a URL can write ``v4``: itself, IPv4-mapped (two forms), NAT64, 6to4."""
    mapped = ipaddress.IPv6Address(f"::ffff:{v4}")
    nat64 = ipaddress.IPv6Address(int(ipaddress.IPv6Address("64:ff9b::")) | int(v4))
    sixtofour = ipaddress.IPv6Address((0x2002 << 112) | (int(v4) << 80) | 1)
    return [str(v4), f"[::ffff:{v4}]", f"[{mapped}]", f"[{nat64}]", f"[{sixtofour}]"]


@given(address=not_public_v4, port=st.integers(1, 65535), which=st.integers(0, 4))
async def test_no_spelling_of_a_non_public_ipv4_address_is_fetched(
    address: ipaddress.IPv4Address, port: int, which: int
) -> None:
    host = _spellings(address)[which]
    with pytest.raises(URLRefused):
        await fetch_public(f"http://{host}:{port}/", 100, MediaConfig(fetch_timeout=1))
