"""``tether search WORDS``: the operator's search over every conversation's history.

The same index and ranking as the agent's ``search_memory`` and a chat's ``/search``
(:meth:`~tether.memory.roles.RecallStore.search`), in the operator's scope: every
conversation, DMs included, or one with ``--conversation``. Like ``tether tasks``, it
opens the store on its own, beside a running gateway or without one. What it prints is
text people wrote: scrubbed of secrets and escaped as ``tether approvals`` prints it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from typing import Any

from tether.config import Settings
from tether.gateway.inspection.store import EXIT_CONFIG, _on_store
from tether.gateway.inspection.waits import _cell, _clean
from tether.memory.recall import Hit, Scope
from tether.memory.store import Store

#: How many turns are listed unless ``--limit`` says otherwise; and the most.
LIMIT = 20
MOST = 200


def search(settings: Settings, args: argparse.Namespace) -> int:
    query = " ".join(args.words).strip()
    if not query:
        print("tether search: say what to look for: tether search WORDS", file=sys.stderr)
        return EXIT_CONFIG
    if not 1 <= args.limit <= MOST:
        print(f"tether search: --limit must be 1..{MOST} (got {args.limit})", file=sys.stderr)
        return EXIT_CONFIG
    return _on_store(settings, args, lambda store: _search_on(store, query, args))


async def _search_on(store: Store, query: str, args: argparse.Namespace) -> int:
    hits = await store.search(query, Scope.operator(args.conversation), args.limit)
    if args.json:
        for hit in hits:
            print(_clean(json.dumps(row(hit), ensure_ascii=False)))
        return 0
    if not hits:
        where = f" in {args.conversation}" if args.conversation else ""
        print(f"nothing found for {query!r}{where}")
        return 0
    print(f"{'WHEN (UTC)':<17} {'CONVERSATION':<28} {'ROLE':<9} TEXT")
    for hit in hits:
        print(
            f"{_when(hit.created):<17} {_cell(hit.conversation, 28):<28} {hit.role:<9}"
            f" {_cell(' '.join(hit.text.split()), 100)}"
        )
    return 0


def row(hit: Hit) -> dict[str, Any]:
    """One found turn as ``--json`` prints it (and the console shows it)."""
    return {
        "id": hit.id,
        "conversation": hit.conversation,
        "role": hit.role,
        "text": hit.text,
        "created": dt.datetime.fromtimestamp(hit.created, dt.UTC).isoformat(),
        "score": round(hit.score, 4),
    }


def _when(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%d %H:%M")
