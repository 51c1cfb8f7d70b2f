"""One processing gateway per store file: the lock beside an SQLite database.

Two gateways on one SQLite file would both recover the other's ``running`` events and
answer them twice. The store names the file to hold (``Store.lock_file``: SQLite's
``.lock`` beside the database; None for PostgreSQL, whose lanes take advisory locks, and
for the in-memory store); the gateway holds an exclusive ``flock`` on it for its life.
The kernel drops the lock with the process, so a ``kill -9`` leaves nothing to clean up.
"""

from __future__ import annotations

import fcntl
from typing import IO

from tether.errors import GatewayError
from tether.gateway.ops.start_errors import store_error
from tether.memory.store import Store


class StoreLock:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._handle: IO[str] | None = None

    def take(self) -> None:
        """Hold the store's lock file, or refuse to start in one line."""
        path = self.store.lock_file
        if path is None:
            return
        try:
            handle = open(path, "w")  # noqa: SIM115 - held for the run
        except OSError as exc:
            raise store_error(self.store, exc) from exc
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise GatewayError(
                f"another tether process is running on this store (it holds {path}); "
                "use PostgreSQL (memory.store: postgresql://...) to run several instances"
            ) from None
        self._handle = handle

    def release(self) -> None:
        if self._handle:
            self._handle.close()
            self._handle = None
