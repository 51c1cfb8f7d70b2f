"""``tether export PLATFORM:USER`` or ``tether export --conversation C``: what the bot
keeps of a person (and their linked identities), or of one conversation, as
``export.jsonl`` and ``files/`` in a new folder (docs/export.md).

The operator's half of :mod:`tether.memory.people.export` (the person's own is ``/export``,
gateway/builtin/export.py). It reads only: like ``tether search`` it opens the store
beside a running gateway or without one. The folder is ``--out``, or one named after the
subject and the time in the current directory; an existing folder that holds anything
is refused, so an export never mixes with another's files.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

from tether.config import Settings
from tether.gateway.inspection.store import EXIT_CONFIG, _on_store
from tether.memory.people.archive import LINES, bundle, safe_name
from tether.memory.people.export import Subject, read_export
from tether.memory.store import Store

#: A platform's name as configs spell it; a user is anything without blanks.
_PLATFORM = re.compile(r"[a-z][a-z0-9_-]*")
_USER = re.compile(r"[^\s\x00-\x1f\x7f]+")


def identity_of(text: str) -> str:
    """``PLATFORM:USER`` as a person's identity (the platform lowercased, the user as it
    is); ValueError saying what is wrong."""
    platform, colon, user = text.strip().partition(":")
    platform = platform.lower()
    if not colon or not _PLATFORM.fullmatch(platform) or not _USER.fullmatch(user):
        raise ValueError(
            f"name the person as PLATFORM:USER, e.g. telegram:12345 (got {text.strip()!r})"
        )
    return f"{platform}:{user}"


def default_folder(subject: str, now: float) -> Path:
    """``export-{subject}-{UTC time}``, the subject reduced to a harmless name."""
    return Path(f"export-{safe_name(subject)}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime(now))}")


def export(settings: Settings, args: argparse.Namespace) -> int:
    conversation = args.conversation
    if (args.identity is None) == (conversation is None):
        print(
            "tether export: give PLATFORM:USER or --conversation C (one of them)", file=sys.stderr
        )
        return EXIT_CONFIG
    identity = None
    if args.identity is not None:
        try:
            identity = identity_of(str(args.identity))
        except ValueError as exc:
            print(f"tether export: {exc}", file=sys.stderr)
            return EXIT_CONFIG
    now = time.time()
    out = Path(args.out) if args.out else default_folder(identity or str(conversation), now)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        print(f"tether export: {out} exists and is not an empty folder", file=sys.stderr)
        return EXIT_CONFIG
    return _on_store(settings, args, lambda store: _export_on(store, identity, conversation, out))


async def _export_on(
    store: Store, identity: str | None, conversation: str | None, out: Path
) -> int:
    if identity is not None:
        subject = Subject(identities=await store.identities(identity))
    else:
        subject = Subject(conversation=str(conversation))
    made = await bundle(store, await read_export(store, subject))
    made.write(out)
    counts = made.lines[0]["counts"]
    if not counts["turn"] and not counts["fact"] and not counts["reminder"]:
        print(f"nothing of {', '.join(subject.identities) or conversation} is stored")
    shown = ", ".join(_many(n, kind) for kind, n in counts.items())
    print(f"exported {', '.join(subject.identities) or conversation} to {out / LINES}: {shown}")
    print(f"  {_many(len(made.files), 'file')} under {out / 'files'}, {len(made.jsonl())} bytes")
    return 0


def _many(count: int, thing: str) -> str:
    return f"{count} {thing}" if count == 1 else f"{count} {thing}s"
