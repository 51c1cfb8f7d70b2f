"""The scale-out store: PostgreSQL, shared by several gateway processes.

- :mod:`.store`: :class:`PostgresStore`, what PostgreSQL does its own way (accepting
  with ``unnest``, lane locks, one transaction per write) around the queries both SQL
  stores share (:mod:`tether.memory.sql.store`);
- :mod:`.schema`: the PostgreSQL dialect's DDL and its migrations.
"""

from tether.memory.postgres.store import PostgresStore

__all__ = ["PostgresStore"]
