"""People: which identities are one person, and erasing a person from every table.

- :mod:`.links`: ``/link`` codes and the ``people`` rows that make several identities
  (platforms, accounts) one person, so their person-facts and DMs follow them.
- :mod:`.erasure`: ``tether forget`` and ``/forgetme``, which remove a person and every
  identity linked with them in one transaction, leaving inbox tombstones and an audit row.
- :mod:`.export` and :mod:`.archive`: ``tether export`` and ``/export``, the same rows
  read out (found as the erasure finds them) and written as JSONL with the files.
  Imported from there, not here: export reads the concrete stores, which import this.

They share a room because erasure and export start from the links: forgetting (or
exporting) a person covers every identity they linked.
"""

from tether.memory.people.erasure import Erased, ErasureStore, SqlErasure, compact_sqlite
from tether.memory.people.links import (
    CODE_TTL_S,
    Claim,
    Link,
    MemoryPeople,
    PeopleStore,
    SqlPeople,
)

__all__ = [
    "CODE_TTL_S",
    "Claim",
    "Erased",
    "ErasureStore",
    "Link",
    "MemoryPeople",
    "PeopleStore",
    "SqlErasure",
    "SqlPeople",
    "compact_sqlite",
]
