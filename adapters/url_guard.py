"""The one client for URLs a handler names: public addresses only, unless allowed.

``ctx.reply(files=["https://…"])`` fetches what the handler was given, and a handler is
often given it by a person or a model. Whatever either can be talked into naming (cloud
metadata at 169.254.169.254, an admin page on the LAN, the gateway's own ports on
loopback) must be refused, not fetched. So, for every URL:

- ``http`` and ``https`` only;
- every address the host resolves to is checked *before* a connection is made, and the
  connection goes to the addresses that were checked: the check sits in aiohttp's
  resolver, whose answer is what the connector dials, so there is no second lookup a
  rebinding DNS server could answer differently. An address written in the URL (which
  aiohttp dials without its resolver) is checked before the request;
- IPv6 forms that carry an IPv4 address (``::ffff:127.0.0.1``, NAT64 ``64:ff9b::/96``,
  6to4) are judged by the IPv4 address they carry;
- redirects are followed here, not by aiohttp: at most ``media.max_redirects``, each hop
  checked like the first; the whole fetch within ``media.fetch_timeout``, the body
  within the caller's cap; no proxy from the environment, no cookies.

``media.allow_hosts`` names the exceptions; what is public and what an entry allows is
``tether/addresses.py``. The platforms' own file APIs
do not come through here (``adapters/media.py``'s ``fetch``): their URLs come from the
platform's own answers, at the base URL the operator configured, which for a self-hosted
Bot API server or a proxy is often on loopback.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Sequence

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from tether.adapters.media import read_capped
from tether.addresses import HostRule, carried, refusal
from tether.config.schema import MediaConfig
from tether.errors import DownloadError

__all__ = ["URLRefused", "check_address", "fetch_public"]

_REDIRECTS = frozenset({301, 302, 303, 307, 308})


class URLRefused(DownloadError):
    """A URL this client will not fetch: not ``http(s)``, an address that is not public
    and not allowed, or too many redirects. Another try would be refused too."""


def check_address(host: str, address_text: str, port: int, rules: Sequence[HostRule]) -> None:
    """Refuse a connection to ``address_text`` (for ``host`` in the URL, on ``port``)
    unless the address is public or ``media.allow_hosts`` allows it."""
    try:
        address = ipaddress.ip_address(address_text)
    except ValueError:
        raise URLRefused(f"{host!r} is not an address Tether can check") from None
    kind = refusal(address)
    seen = carried(address)
    if kind is None or any(rule.matches(host, a, port) for rule in rules for a in (seen, address)):
        return
    shown = str(seen) if seen == address else f"{seen} (as {address})"
    said = f"{shown} is" if host == address_text else f"{host} resolves to {shown},"
    raise URLRefused(f"{said} a {kind} address: not fetched (media.allow_hosts can allow it)")


def _check_target(url: URL, rules: Sequence[HostRule]) -> None:
    """The scheme, and an address written in the URL: aiohttp dials those directly."""
    if url.scheme not in ("http", "https"):
        shown = repr(url.scheme) if url.scheme else "a relative URL"
        raise URLRefused(f"only http and https URLs are fetched, not {shown}")
    host = url.raw_host
    if not host:
        raise URLRefused("the URL has no host")
    if ":" in host or host.replace(".", "").isdigit():  # aiohttp's own test for a literal
        check_address(host, host, url.port or 0, rules)


class _CheckedResolver(AbstractResolver):
    """aiohttp's resolver, refusing a host any of whose addresses is not allowed: what it
    returns is what the connector dials, so the checked addresses are the ones used."""

    def __init__(self, rules: Sequence[HostRule]) -> None:
        self._inner = aiohttp.DefaultResolver()
        self._rules = rules

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        found = await self._inner.resolve(host, port, family)
        for entry in found:
            check_address(host, entry["host"], port, self._rules)
        return found

    async def close(self) -> None:
        await self._inner.close()


async def fetch_public(url: str, cap: int, media: MediaConfig) -> bytes:
    """GET ``url`` (at most ``cap`` bytes) if it and every redirect lead to public
    addresses or ones ``media.allow_hosts`` allows. :class:`URLRefused` before any
    connection otherwise; :class:`~tether.errors.TooLarge` past the cap;
    :class:`~tether.errors.DownloadError` when it cannot be fetched now."""
    try:
        target = URL(url)
    except (TypeError, ValueError):
        raise URLRefused("not a URL") from None
    try:
        async with asyncio.timeout(media.fetch_timeout):
            return await _follow(target, cap, media)
    except TimeoutError:
        raise DownloadError(
            f"no file within media.fetch_timeout ({media.fetch_timeout:g} s)"
        ) from None


async def _follow(url: URL, cap: int, media: MediaConfig) -> bytes:
    rules = media.host_rules()
    connector = aiohttp.TCPConnector(resolver=_CheckedResolver(rules), use_dns_cache=False)
    async with aiohttp.ClientSession(
        connector=connector, trust_env=False, cookie_jar=aiohttp.DummyCookieJar()
    ) as session:
        for _hop in range(media.max_redirects + 1):
            _check_target(url, rules)
            try:
                async with session.get(url, allow_redirects=False) as response:
                    location = response.headers.get("Location")
                    if response.status not in _REDIRECTS or location is None:
                        return await read_capped(response, cap)
                    url = _redirect(response.url, location)
            except aiohttp.ClientError as exc:
                raise DownloadError(f"could not fetch the file: {type(exc).__name__}") from exc
    raise URLRefused(f"more than {media.max_redirects} redirects (media.max_redirects)")


def _redirect(base: URL, location: str) -> URL:
    try:
        return base.join(URL(location))
    except (TypeError, ValueError):
        raise DownloadError("a redirect to a Location that is not a URL") from None
