"""systemd's service protocol (``sd_notify``), stdlib only: ``Type=notify`` and the watchdog.

Under a unit with ``Type=notify``, systemd sets ``NOTIFY_SOCKET`` and counts the service as
started only when it says ``READY=1``: so ``systemctl start`` returns, and units ordered
after it start, once the store is open, recovery has run and the adapters and HTTP are up,
not when the process merely exists. ``STOPPING=1`` tells it the drain has begun, and
``STATUS=`` lines show in ``systemctl status``.

With ``WatchdogSec=``, systemd also sets ``WATCHDOG_USEC`` and restarts the service when no
``WATCHDOG=1`` arrives for that long. The pings come from a task on the gateway's event
loop, every half of that time: a loop wedged by a blocking handler or a busy spin stops
them, and systemd restarts the process. (A thread would go on pinging for a dead loop.)

Without ``NOTIFY_SOCKET`` (a terminal, a container, a test) every call does nothing. A
message that cannot be sent is logged, never raised: the service manager's channel must
not be what stops the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import MutableMapping
from types import TracebackType
from typing import Any

import structlog

log = structlog.get_logger("tether.systemd")

#: The variables systemd passes; taken out of the environment once read, as
#: ``sd_notify(unset_environment=1)`` does, so processes the gateway starts (the SQLite
#: writer, a plugin's subprocess) do not talk to systemd in its name.
VARIABLES = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


class Notifier:
    """One process's channel to systemd: ``ready``, ``status``, ``stopping`` and the
    watchdog pings while used as ``async with``."""

    def __init__(self, address: str | None, watchdog_usec: str | None = None) -> None:
        self.address = _socket_address(address) if address else None
        #: Seconds between ``WATCHDOG=1`` pings: half of ``WATCHDOG_USEC``, or None.
        self.watchdog_interval = _interval(watchdog_usec) if self.address else None
        self._socket: socket.socket | None = None
        self._pinger: asyncio.Task[None] | None = None
        self._failing = False
        self._serving = "serving"

    @classmethod
    def from_env(cls, environ: MutableMapping[str, str] | None = None) -> Notifier:
        """The notifier systemd's variables describe (none set: one that does nothing).

        ``WATCHDOG_PID``, when set, names the process the watchdog is for; any other
        process (a child that inherited the variables) gets no watchdog.
        """
        env = os.environ if environ is None else environ
        address, usec, pid = (env.pop(name, None) for name in VARIABLES)
        if pid is not None and pid != str(os.getpid()):
            usec = None
        return cls(address, usec)

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def ready(self, status: str) -> None:
        self._serving = status
        self.send("READY=1", f"STATUS={status}")

    def reloading(self, reload: asyncio.Future[Any]) -> None:
        """systemd's notify-reload protocol: ``RELOADING=1`` (with the monotonic time it
        checks) now, ``READY=1`` again once ``reload`` has ended, whatever its outcome
        (a failed reload leaves the running configuration serving)."""
        if self.address is None:
            return
        usec = time.monotonic_ns() // 1000
        self.send("RELOADING=1", f"MONOTONIC_USEC={usec}", "STATUS=reloading the configuration")
        reload.add_done_callback(lambda _done: self.ready(self._serving))

    def status(self, status: str) -> None:
        self.send(f"STATUS={status}")

    def stopping(self, status: str = "stopping: finishing in-flight work") -> None:
        self.send("STOPPING=1", f"STATUS={status}")

    def send(self, *assignments: str) -> bool:
        """One datagram of ``KEY=value`` lines; False (and one warning per failing spell)
        when it could not be sent. Never blocks: a full queue drops the message."""
        if self.address is None:
            return False
        try:
            if self._socket is None:
                self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._socket.setblocking(False)
            self._socket.sendto("\n".join(assignments).encode(), self.address)
        except OSError as exc:
            if not self._failing:
                log.warning("systemd.notify_failed", error=f"{type(exc).__name__}: {exc}")
            self._failing = True
            return False
        if self._failing:
            log.info("systemd.notify_recovered")
            self._failing = False
        return True

    async def __aenter__(self) -> Notifier:
        self.status("starting")  # until READY=1: a migration or a slow platform shows here
        if self.watchdog_interval is not None:
            self._pinger = asyncio.create_task(self._ping(), name="systemd-watchdog")
            log.info("systemd.watchdog", interval_s=self.watchdog_interval)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._pinger:
            self._pinger.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pinger
            self._pinger = None
        if self._socket:
            self._socket.close()
            self._socket = None

    async def _ping(self) -> None:
        """``WATCHDOG=1`` from the event loop itself, for as long as the loop turns."""
        assert self.watchdog_interval is not None
        while True:
            self.send("WATCHDOG=1")
            await asyncio.sleep(self.watchdog_interval)


def _socket_address(address: str) -> str | bytes:
    """A path, or ``@name`` for Linux's abstract namespace (a leading NUL byte)."""
    if address.startswith("@"):
        return b"\0" + address[1:].encode()
    return address


def _interval(usec: str | None) -> float | None:
    """Half the watchdog timeout, as systemd advises; None for a missing or bad value."""
    if not usec:
        return None
    try:
        micros = int(usec)
    except ValueError:
        log.warning("systemd.bad_watchdog_usec", value=usec)
        return None
    return micros / 2_000_000 if micros > 0 else None
