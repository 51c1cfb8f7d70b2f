"""``tether who PLATFORM:USER``: which identities are one person, and what the bot keeps
about them; ``--unlink`` takes the identity out of its person.

The operator's view of :mod:`tether.memory.people`: the links a person made with
``/link`` (each identity and when it joined) and their person-facts (what they told the
bot about themselves, shown in their own turns wherever they write). Like ``tether
search``, it opens the store on its own, beside a running gateway or without one; what
it prints is text people wrote, scrubbed and escaped as ``tether search`` prints it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys

from tether.config import Settings
from tether.gateway.inspection.store import EXIT_CONFIG, _on_store
from tether.gateway.inspection.waits import _cell, _clean
from tether.memory.store import Store


def who(settings: Settings, args: argparse.Namespace) -> int:
    identity = str(args.identity).strip()
    platform, _, user = identity.partition(":")
    if not platform or not user:
        print(
            f"tether who: name the person as PLATFORM:USER, e.g. telegram:12345 (got {identity!r})",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    return _on_store(settings, args, lambda store: _who_on(store, identity, args))


async def _who_on(store: Store, identity: str, args: argparse.Namespace) -> int:
    if args.unlink:
        if await store.unlink(identity):
            print(f"unlinked {identity}: it is a person of its own again")
        else:
            print(f"{identity} is not linked to another identity")
        return 0
    links = await store.links(identity)
    identities = await store.identities(identity)
    facts = await store.facts("", None, identities)
    if args.json:
        print(
            _clean(
                json.dumps(
                    {
                        "identity": identity,
                        "person": links[0].person if links else identity,
                        "linked": [{"identity": n.identity, "since": n.linked} for n in links],
                        "facts": [{"about": f.owner, "text": f.text} for f in facts],
                    },
                    ensure_ascii=False,
                )
            )
        )
        return 0
    if not links:
        print(f"{identity}: not linked to another identity (/link in a DM links one)")
    else:
        print(f"{identity} is one person with:")
        for link in links:
            mark = "  (this one)" if link.identity == identity else ""
            print(f"  {link.identity:<32} linked {_when(link.linked)}{mark}")
    if facts:
        print(f"what they told the bot about themselves ({len(facts)}):")
        for fact in facts:
            print(f"  - {_cell(' '.join(fact.text.split()), 100)}  [{fact.owner}]")
    else:
        print("no facts about them")
    return 0


def _when(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%d %H:%M")
