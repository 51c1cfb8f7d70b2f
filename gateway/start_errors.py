"""What stops a start, said in the one line ``tether`` prints: the config key first.

A store that cannot be opened, a port that is taken, an encoding cache that cannot be
written: each is the operator's to fix, and a traceback of 11 to 70 lines through asyncpg or
aiohttp told them less than the key to look at. So each becomes a
:class:`~tether.errors.GatewayError` naming the key (``memory.store: ...``,
``http.port ...``), with what is wrong in words, and never a credential: a PostgreSQL
URL is described by host, port and database only, and its password is taken out of
whatever the driver said.
"""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path
from urllib.parse import unquote, urlsplit

from tether.adapters.kit import describe
from tether.errors import GatewayError
from tether.gateway import logs
from tether.memory import tokens
from tether.memory.sqlite import SqliteStore
from tether.memory.store import Store


def store_error(url: str, store: Store, exc: BaseException) -> GatewayError:
    """``memory.store: cannot open ...`` for a store (or its lock file) that would not open."""
    if isinstance(store, SqliteStore):
        reason = _unusable_directory(store.path) or describe(exc)
        return GatewayError(f"memory.store: cannot open the SQLite database {store.path}: {reason}")
    if url.startswith(("postgresql://", "postgres://")):
        parts = urlsplit(url)
        where = parts.netloc.rpartition("@")[2] + parts.path  # no user, no password, no query
        reason = "connection refused" if isinstance(exc, ConnectionRefusedError) else describe(exc)
        if isinstance(exc, socket.gaierror):
            reason = f"unknown host ({exc.strerror})"
        line = f"memory.store: cannot connect to PostgreSQL at {where}: {reason}"
        return GatewayError(_without_password(line, url))
    return GatewayError(f"memory.store: cannot open the store: {describe(exc)}")


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


def _unusable_directory(path: str) -> str | None:
    """Why the database's directory cannot hold it, or None when it looks fine."""
    if path == ":memory:":
        return None
    directory = Path(path).parent
    if not directory.exists():
        return f"directory {directory} does not exist"
    if not directory.is_dir():
        return f"{directory} is not a directory"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"directory {directory} is not writable"
    if Path(path).exists() and not os.access(path, os.R_OK | os.W_OK):
        return f"{path} is not readable and writable by this user"
    return None


def _without_password(line: str, url: str) -> str:
    """``line`` with the URL's password masked, as typed and percent-decoded (the driver
    may echo either), and then through the log redactor (which knows the others)."""
    try:
        password = urlsplit(url).password
    except ValueError:  # a malformed netloc: nothing was parsed out of it
        password = None
    for form in {password, unquote(password)} if password else ():
        line = line.replace(form, logs.MASK)
    return logs.redactor.scrub(line)
