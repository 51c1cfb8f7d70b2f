"""The one way a test runs a gateway (:func:`running`), and a scheduler on a clock the
test sets (:func:`gateway_at`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from tether.adapters.base import Adapter
from tether.adapters.loopback import LoopbackAdapter
from tether.config import Settings
from tether.gateway.app import Gateway
from tether.gateway.assembly import build_adapters
from tether.gateway.handler.routing import Router
from tether.scheduler.runner import Scheduler


@asynccontextmanager
async def running(
    settings: Settings,
    router: Router | None = None,
    adapter: Adapter | None = None,
    *,
    extra: Sequence[Adapter] = (),
    **options: Any,
) -> AsyncIterator[tuple[Gateway, Any]]:
    """The one way a test runs a gateway; it is stopped when the block ends.

    The adapters are the platforms the config enables, built as ``tether run`` builds
    them (their reconnect backoff cut to a tenth of a second, so a test never waits
    seconds for a retry), plus ``adapter`` and ``extra``; with none, a loopback
    platform. ``options`` go to :class:`Gateway` (``store=``, ``http=``, ``plugins=``).
    Yields the gateway and its main adapter: ``adapter``, else the first platform the
    config enables, else the loopback one."""
    adapters = build_adapters(settings)
    for built in adapters.values():
        if hasattr(built, "backoff_base"):
            built.backoff_base, built.backoff_max = 0.05, 0.2
    for given in (adapter, *extra):
        if given is not None:
            adapters[given.platform] = given
    if not adapters:
        adapter = adapters["loopback"] = LoopbackAdapter()
    main = adapter or next(iter(adapters.values()))
    gateway = Gateway(settings, adapters, router=router, **options)
    await gateway.start()
    try:
        yield gateway, main
    finally:
        await gateway.stop()


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


class Clock:
    def __init__(self, start: str) -> None:
        self.now = at(start)

    def set(self, text: str) -> None:
        self.now = at(text)

    def __call__(self) -> datetime:
        return self.now


@asynccontextmanager
async def gateway_at(
    settings: Settings, clock: Clock | None, adapter: LoopbackAdapter | None = None
) -> AsyncIterator[tuple[Gateway, Scheduler, LoopbackAdapter]]:
    """A gateway on the loopback adapter whose scheduler reads ``clock`` (None: real time)."""
    adapter = adapter or LoopbackAdapter()
    gateway = Gateway(settings, {"loopback": adapter})
    assert gateway.scheduler is not None
    if clock is not None:
        gateway.scheduler.clock = clock
    await gateway.start()
    try:
        yield gateway, gateway.scheduler, adapter
    finally:
        await gateway.stop()


def base_url(gateway: Gateway) -> str:
    """Where the gateway's HTTP server listens (a test config binds port 0)."""
    assert gateway.http is not None, "the config has no http server"
    return f"http://127.0.0.1:{gateway.http.port}"


@asynccontextmanager
async def gateway_for(settings: Settings) -> AsyncIterator[Gateway]:
    """The gateway ``tether run`` builds: the config's adapters, the default router."""
    gateway = Gateway(settings, build_adapters(settings))
    await gateway.start()
    try:
        yield gateway
    finally:
        await gateway.stop()
