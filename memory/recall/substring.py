"""A term as a substring test of a turn's text in SQLite, matching what the trigram index
matches: case-folded. For SQLite recall's reads without the index (memory/recall/sqlite.py).

``LIKE`` folds ASCII case only, where the trigram index folds every script's; a term with
other cased letters ("über", "привет") is a ``GLOB`` of its letters' cases instead, behind
a ``LIKE`` of its longest plain stretch (a ``GLOB`` of classes costs about twice a
``LIKE`` a row, so most rows are turned away by the cheaper test first).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tether.memory.recall.query import like_pattern

#: A test of ``m.text`` and its values.
Clause = tuple[str, list[Any]]


def matches(found: Sequence[str]) -> list[Clause]:
    """Each of ``found`` as a test of ``m.text`` that is 1 when the text holds it, else 0."""
    out: list[Clause] = []
    for term in found:
        if all(c.isascii() or len(_cases(c)) == 1 for c in term):
            out.append(("m.text LIKE ? ESCAPE '\\'", [like_pattern(term)]))
            continue
        glob = "*" + "".join(_glob_char(c) for c in term) + "*"
        plain = max(_plain_runs(term), key=len, default="")
        if len(plain) >= 2:
            # CASE, not AND: an AND that is a value (a term held) evaluates both sides
            clause = "CASE WHEN m.text LIKE ? ESCAPE '\\' THEN m.text GLOB ? ELSE 0 END"
            out.append((clause, [like_pattern(plain), glob]))
        else:
            out.append(("m.text GLOB ?", [glob]))
    return out


def values(clauses: Sequence[Clause]) -> list[Any]:
    """The clauses' values, in their order."""
    return [value for _, bound in clauses for value in bound]


def _cases(char: str) -> list[str]:
    return sorted({v for v in (char, char.lower(), char.upper(), char.title()) if len(v) == 1})


def _glob_char(char: str) -> str:
    cases = _cases(char)
    if len(cases) > 1:
        return "[" + "".join(cases) + "]"
    return f"[{char}]" if char in "*?[" else char


def _plain_runs(term: str) -> list[str]:
    """The stretches of ``term`` that ``LIKE`` folds as the index does (ASCII, or no case)."""
    runs, run = [], ""
    for char in term:
        if char.isascii() or len(_cases(char)) == 1:
            run += char
        else:
            runs.append(run)
            run = ""
    return [*runs, run]
