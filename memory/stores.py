"""Which store a ``memory.store`` URL names.

Kept apart from :mod:`tether.memory.store` because it imports all three
implementations, and each of them imports the protocol: in one module that was a cycle.
Implementations are imported only for the scheme asked for, so a SQLite user never
loads the PostgreSQL driver.
"""

from __future__ import annotations

from pathlib import Path

from tether.memory.store import Store


def open_store(url: str, *, synchronous: str = "normal") -> Store:
    """The store the ``memory.store`` setting names, by its scheme; not opened yet."""
    if url.startswith("sqlite://"):
        from tether.memory.sqlite import SqliteStore

        return SqliteStore(sqlite_path(url), synchronous=synchronous)
    if url.startswith(("postgresql://", "postgres://")):
        from tether.memory.postgres import PostgresStore

        return PostgresStore(url)
    if url.startswith("memory://"):
        from tether.memory.inmemory import MemoryStore

        return MemoryStore()
    raise ValueError(f"memory.store: unsupported store {url.split(':', 1)[0]!r}")


def missing(url: str) -> str | None:
    """Where the store ``url`` names would be, shown as a person types it, if it is not
    there: opening a SQLite URL creates its file, so a look into a store (``tether
    status`` in the wrong directory) asks first. None for a store that exists, and for
    every store that is not a file."""
    if not url.startswith("sqlite://"):
        return None
    path = sqlite_path(url)
    if path == ":memory:" or Path(path).exists():
        return None
    return path if Path(path).is_absolute() else f"./{path}"


def sqlite_path(url: str) -> str:
    """``sqlite:///rel.db`` → ``rel.db``; ``sqlite:////abs.db`` → ``/abs.db``;
    ``sqlite:///:memory:`` → ``:memory:`` (a scratch file, removed at close).

    A URL without a path is a ValueError: ``sqlite://`` used to mean a scratch store, so a
    config that lost its path (an empty variable, a typo) silently kept nothing.
    """
    path = url.removeprefix("sqlite://")
    if path.startswith("/"):
        path = path[1:]
    if not path:
        raise ValueError(
            f"{url!r} needs a file path: sqlite:///tether.db (relative to the working"
            " directory) or sqlite:////var/lib/tether/tether.db (absolute); memory:// keeps"
            " nothing"
        )
    return path
