"""Recall: finding past turns by what they said, within who may see them.

- :mod:`.query`: a query's terms, the asker's :class:`Scope`, a :class:`Hit`, the ranking.
- :mod:`.sqlite`, :mod:`.postgres`, :mod:`.inmemory`: ``search`` on each store.

The index is the store's own (SQLite FTS5 with the trigram tokenizer; PostgreSQL's
full-text index), kept by the database in the transaction that writes each turn, so it
agrees with the history after any crash. Scope is a rule of the store's query, not of
the caller (DESIGN §13): a person's DM is found only by that person and the operator.
"""

from tether.memory.recall.inmemory import MemoryRecall
from tether.memory.recall.postgres import PostgresRecall
from tether.memory.recall.query import Hit, Scope, Terms, terms
from tether.memory.recall.sqlite import SqliteRecall

__all__ = ["Hit", "MemoryRecall", "PostgresRecall", "Scope", "SqliteRecall", "Terms", "terms"]
