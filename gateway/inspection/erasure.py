"""``tether forget PLATFORM:USER --yes``: erase a person from every table of the store.

The operator's half of :mod:`tether.memory.people.erasure` (the person's own is ``/forgetme``,
gateway/builtin/people.py). The identity and every identity linked with it are erased;
without ``--yes`` it says what it would erase and changes nothing. On SQLite the file is
then compacted (:func:`~tether.memory.people.erasure.compact_sqlite`), so the erased text is
gone from its bytes, not only from its tables. It prints counts per table, never what
was erased, and the store keeps the same counts (``erasures``) as the audit record.
"""

from __future__ import annotations

import argparse
import sys

from tether.config import Settings
from tether.gateway.inspection.store import EXIT_CONFIG, _on_store
from tether.memory.people.erasure import compact_sqlite
from tether.memory.sql.store import SqlStore
from tether.memory.sqlite import SqliteStore
from tether.memory.store import Store


def forget(settings: Settings, args: argparse.Namespace) -> int:
    identity = str(args.identity).strip()
    platform, _, user = identity.partition(":")
    if not platform or not user:
        print(
            "tether forget: name the person as PLATFORM:USER, e.g. telegram:12345"
            f" (got {identity!r})",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    return _on_store(settings, args, lambda store: _forget_on(store, identity, args))


async def _forget_on(store: Store, identity: str, args: argparse.Namespace) -> int:
    identities = await store.identities(identity)
    named = ", ".join(identities)
    if not args.yes:
        print(
            f"this erases everything the bot keeps of {named}: their messages and the"
            " replies to them, their DMs, facts, reminders, files, steps, dead letters,"
            " search index entries and links. Run again with --yes to erase."
        )
        return EXIT_CONFIG
    if not isinstance(store, SqlStore):
        print(f"tether forget: {type(store).__name__} keeps nothing across restarts")
        return EXIT_CONFIG
    erased = await store.erase_person(identities)
    path = store.path if isinstance(store, SqliteStore) else None
    if path and path != ":memory:":
        compact_sqlite(path)
    if not erased.rows:
        print(f"nothing of {named} was stored")
        return 0
    print(f"erased {named}: {erased.total} rows")
    for table, count in sorted(erased.rows.items()):
        print(f"  {table:<16} {count}")
    print("  (inbox rows are kept as empty tombstones, so a redelivery is still refused)")
    return 0
