"""One processing gateway per store file: a lock on the SQLite database file itself.

Two gateways on one SQLite file would both recover the other's ``running`` events and
answer them twice. Reached by two names — a symlink, a hard link, one file bind-mounted
into two containers — each would also keep a WAL of its own (SQLite names ``-wal`` and
``-shm`` after the path it was given), and the database breaks. So the lock belongs to
the file, not to a name: the store names the file to hold (``Store.lock_file``: SQLite's
database; None for PostgreSQL, whose lanes take advisory locks, and for the in-memory
store), and the gateway holds an exclusive ``flock`` on it for its life.

A ``flock`` lock is the inode's: every name of the file meets the same lock, and there is
no lock file to delete (a ``.lock`` beside the database, named after the configured path,
was what let a second gateway in). Linux keeps ``flock`` locks apart from the ``fcntl``
byte-range locks SQLite takes on the same file, so they never meet SQLite's own; on NFS,
where the two are one, SQLite's WAL does not work anyway. The descriptor is not inherited
by the writer process, and it is closed only after the store is (closing any descriptor of
the file drops the ``fcntl`` locks this process holds on it). The kernel drops the lock
with the process, so a ``kill -9`` leaves nothing to clean up.
"""

from __future__ import annotations

import fcntl
import os

import structlog

from tether.errors import GatewayError
from tether.gateway.ops.start_errors import store_error
from tether.memory.store import Store

log = structlog.get_logger("tether.gateway")
#: Tries to lock the file a path names, when it is replaced between the open and the lock.
_TRIES = 5


class StoreLock:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._fd: int | None = None

    def take(self) -> None:
        """Hold the store's file locked, or refuse to start in one line naming it."""
        path = self.store.lock_file
        if path is None:
            return
        for _ in range(_TRIES):
            fd = self._open(path)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise GatewayError(
                    f"memory.store: another tether process is running on the SQLite database"
                    f" {path}{_other_names(path)}; use PostgreSQL"
                    " (memory.store: postgresql://...) to run several instances"
                ) from None
            if _same_file(fd, path):
                break
            os.close(fd)  # replaced between the open and the lock: lock what is there now
        else:
            raise store_error(self.store, RuntimeError(f"{path} keeps being replaced"))
        self._fd = fd
        links = os.fstat(fd).st_nlink
        if links > 1:
            log.warning(
                "store.hard_linked",
                path=path,
                links=links,
                why="SQLite keeps a WAL per name: open this database by one name only",
            )

    def _open(self, path: str) -> int:
        """The file, created empty if it is not there yet (SQLite reads an empty file as
        an empty database, which the store then migrates); never truncated."""
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise store_error(self.store, exc) from exc

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _same_file(fd: int, path: str) -> bool:
    try:
        now = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)


def _other_names(path: str) -> str:
    """What tells the operator that the other gateway may use another name of the file."""
    real = os.path.realpath(path)
    if real != os.path.abspath(path):
        return f" (which is {real})"
    with_links = os.stat(path).st_nlink
    return f" (a file with {with_links} hard links)" if with_links > 1 else ""
