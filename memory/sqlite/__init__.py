"""The embedded store: SQLite in WAL mode, one writer process with group commit.

- :mod:`.store`: :class:`SqliteStore`, what the writer process changes about the
  queries both SQL stores share (:mod:`tether.memory.sql.store`);
- :mod:`.link`: the batching queue, the pipe to the writer process, and the futures
  settled after each commit;
- :mod:`.writer`: the writer process itself (standard library only: it runs as
  ``python -I -S``, outside this package);
- :mod:`.schema`: the SQLite dialect's DDL and its migrations.
"""

from tether.memory.sqlite.store import SqliteStore

__all__ = ["SqliteStore"]
