"""``tether run``: a gateway served until a signal, as systemd and a terminal expect.

SIGTERM or SIGINT stops it gracefully (ingress first, then the running handlers, then
the outbox: :meth:`Gateway.stop`); a second one exits at once, for a stop that hangs.
SIGHUP reloads the config (:mod:`.reload`). Under systemd (``NOTIFY_SOCKET`` set) the
service is told ``READY=1`` once the gateway serves, ``RELOADING=1`` around a reload and
``STOPPING=1`` when it stops; without it these are no-ops.
"""

from __future__ import annotations

import asyncio
import os
import signal

import structlog

from tether.gateway.app import Gateway
from tether.gateway.ops import systemd
from tether.gateway.ops.runtime import settle_heap

log = structlog.get_logger("tether.gateway")


async def serve(gateway: Gateway) -> None:
    """Run ``gateway`` until SIGTERM/SIGINT, then stop it gracefully."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(signame: str) -> None:
        if stop.is_set():
            log.warning("gateway.forced_exit", signal=signame)
            os._exit(1)
        log.info("gateway.signal", signal=signame)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig.name)
    async with systemd.Notifier.from_env() as notifier:  # no NOTIFY_SOCKET: a no-op
        loop.add_signal_handler(
            signal.SIGHUP, lambda: notifier.reloading(gateway.reloader.request())
        )
        await gateway.start()
        notifier.ready(f"serving {', '.join(sorted(gateway.adapters)) or 'no platform'}")
        gateway.reloader.announce()
        settle_heap()
        try:
            await stop.wait()
        finally:
            notifier.stopping()
            await gateway.stop()
