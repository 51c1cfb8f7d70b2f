"""``tether approvals``: the audit of approval-gated tool calls, read from the store.

Each approval is a row of the ``waits`` table (``memory/waits.py``), kept after it ends:
who asked, the tool and its exact arguments, their hash, and who decided, how and when
(:func:`~tether.gateway.tools.approvals.audit_row` says which fields). Like ``tether
dead``, it opens the store on its own (beside a running gateway or without one) and
changes nothing: a decision is a press on the card, by someone the config lets decide.

What it prints is stored text that came from a model and from people: every configured
secret is masked (the arguments may carry a token the model was shown), and control and
bidi characters are written as escapes, so an argument cannot move the terminal's cursor
or reorder the line around it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
from typing import Any

from tether.config import Settings
from tether.gateway.inspection.store import EXIT_CONFIG, _on_store
from tether.gateway.tools.approvals import audit_row
from tether.memory.store import Store
from tether.redaction import redactor

#: How many of the newest approvals ``list`` reads.
LIMIT = 200
#: C0 and C1 controls (but newline and tab, which JSON escapes itself), bidi controls and
#: other invisible format characters: written as ``\\uXXXX`` on a terminal.
_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]"
)
_TIMES = ("requested", "deadline", "decided")


def approvals(settings: Settings, args: argparse.Namespace) -> int:
    if args.action == "show" and not args.id:
        print("tether approvals show: a WAIT_ID is required", file=sys.stderr)
        return EXIT_CONFIG
    return _on_store(settings, args, lambda store: _approvals_on(store, args))


async def _approvals_on(store: Store, args: argparse.Namespace) -> int:
    if args.action == "show":
        found = await store.wait(args.id)
        if found is None or found.kind != "approval":
            print(f"no approval {safe(args.id)!r}", file=sys.stderr)
            return 1
        row = _timed(audit_row(found))
        row["question"] = found.question
        row["answer"] = found.answer
        row["answered_by"] = found.answered_by
        row["approvers"] = found.detail.get("approvers")
        print(_clean(json.dumps(row, indent=2, ensure_ascii=False)))
        return 0
    if args.pending:  # every open one, however many decided ones came after it
        listed = [w for w in reversed(await store.open_waits()) if w.kind == "approval"]
    else:
        listed = await store.waits("approval", LIMIT)
    rows = [audit_row(wait) for wait in listed]
    if args.json:
        for row in rows:
            print(_clean(json.dumps(_timed(row), ensure_ascii=False)))
        return 0
    if not rows:
        print("no pending approvals" if args.pending else "no approvals")
        return 0
    print(
        f"{'WHEN (UTC)':<20} {'TOOL':<24} {'HASH':<12} {'OUTCOME':<9}"
        f" {'ASKED BY':<28} {'DECIDED BY':<28} WAIT"
    )
    for row in rows:
        decided = row["decided_by"] or "-"
        print(
            f"{_when(row['requested']):<20} {_cell(row['tool'], 24):<24}"
            f" {_cell(row['hash'], 12):<12} {_cell(row['outcome'], 9):<9}"
            f" {_cell(row['asked_by'], 28):<28} {_cell(decided, 28):<28} {_clean(row['wait'])}"
        )
    return 0


def safe(text: str) -> str:
    """``text`` with every control, bidi and invisible format character as an escape."""
    return _UNSAFE.sub(lambda found: f"\\u{ord(found[0]):04x}", text)


def _clean(text: str) -> str:
    return safe(redactor.scrub(text))


def _cell(value: Any, width: int) -> str:
    """A table cell: scrubbed and escaped first, so a cut never splits a secret."""
    text = "-" if value in (None, "") else _clean(str(value))
    return text if len(text) <= width else text[: width - 1] + "…"


def _timed(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with its epoch times as ISO 8601 in UTC (as ``tether dead show``)."""
    return {
        key: _iso(value) if key in _TIMES and value is not None else value
        for key, value in row.items()
    }


def _when(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _iso(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).isoformat()
