"""What stops a start, said in the one line ``tether`` prints: the config key first.

A store that cannot be opened, a port that is taken, an encoding cache that cannot be
written: each is the operator's to fix, and a traceback of 11 to 70 lines through asyncpg or
aiohttp told them less than the key to look at. So each becomes a
:class:`~tether.errors.GatewayError` naming the key (``memory.store: ...``,
``http.port ...``), with what is wrong in words, and never a credential: a PostgreSQL
URL is described by host, port and database only, and its password is taken out of
whatever the driver said. What a store's failure means is the store's to say
(``memory/sqlite``, ``memory/postgres``): this module never asks which store it is.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Awaitable, Callable

import structlog

from tether.adapters.kit import describe
from tether.errors import GatewayError
from tether.memory import tokens
from tether.memory.store import Store

log = structlog.get_logger("tether.gateway")


def store_error(store: Store, exc: BaseException) -> GatewayError:
    """``memory.store: cannot open ...`` for a store (or its lock file) that would not
    open; the store says why (:meth:`~tether.memory.store.Store.open_problem`)."""
    return GatewayError(f"memory.store: {store.open_problem(exc)}")


def listen_error(host: str, port: int, exc: OSError) -> GatewayError:
    """``http.port ... is in use`` and the other reasons a listening socket fails."""
    if exc.errno == errno.EADDRINUSE:
        return GatewayError(f"http.port {port} is in use on {host}")
    if exc.errno == errno.EACCES:
        return GatewayError(
            f"http.port {port}: not allowed on {host} (ports below 1024 need privileges)"
        )
    if exc.errno == errno.EADDRNOTAVAIL or isinstance(exc, socket.gaierror):
        return GatewayError(f"http.host {host!r} is not an address of this machine")
    return GatewayError(f"http.host/http.port: cannot listen on {host}:{port}: {describe(exc)}")


def encoding_error(exc: BaseException) -> GatewayError:
    """The tiktoken encoding is loaded at start; its cache directory is the likely cause."""
    return GatewayError(
        f"cannot load the tiktoken encoding {tokens.DEFAULT_ENCODING}: {describe(exc)}"
        " (set TIKTOKEN_CACHE_DIR to a writable directory)"
    )


async def quietly(step: str, undo: Callable[..., Awaitable[object]], *args: object) -> None:
    """Undo one step of a failed start; a failure is logged and the other steps still run."""
    try:
        await undo(*args)
    except Exception:
        log.exception("gateway.undo_failed", step=step)
