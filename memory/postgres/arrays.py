"""A write of several statement texts as one statement: one round trip, no BEGIN/COMMIT.

A checkpoint is three statement texts (the inbox row done, its outbox rows, its history
rows) and a group-commit batch adds the 'running' marks and the outbox's 'sending' and
'sent' marks: each text an ``executemany`` inside BEGIN ... COMMIT, six or seven round
trips. A gateway with little in flight (each of three instances gets a third of the
load) commits many small batches, and those round trips were most of what it spent
more per event than one busy instance (bench/NOTES.md § PostgreSQL).

Here each of those texts has a form over arrays (``unnest``), one data-modifying CTE
each, so a whole write is one statement, atomic by itself, whose text depends only on
which texts are present (at most 2⁵ texts, so asyncpg's statement cache keeps them).

The CTEs of one statement all see the same snapshot, not each other's changes, so this
is only equivalent to running the texts in turn when no row is touched twice:
:func:`as_one` refuses (returns None, and the caller runs the statements in a
transaction as before) unless every inbox update names a different key, every outbox
update too, and no outbox update names a row inserted by the same write. Rows that
receive a sequence number (outbox ``seq``, messages ``id``) get it in the order given
(``ORDER BY`` the ordinality), as ``executemany`` gave it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tether.memory.sql import statements as sql
from tether.memory.sql.statements import Statement

INSERT_OUTBOX = (
    "INSERT INTO outbox (key, event_key, platform, target, payload, status, created, updated)"
    " VALUES (?, ?, ?, ?, ?, 'pending', ?, ?) ON CONFLICT DO NOTHING"
)

#: Statement text -> (its form over arrays, with ``{}`` for the first parameter's number,
#: the arrays' types in parameter order, the table a key is updated in, or None for an
#: insert). Each parameter ``$n`` of the form is one column of the rows, in order.
_FORMS: dict[str, tuple[str, tuple[str, ...], str | None]] = {
    sql.RUNNING: (
        "UPDATE inbox SET status = 'running', attempts = u.a, updated = u.t"
        " FROM unnest(${0}::integer[], ${1}::float8[], ${2}::text[]) AS u(a, t, k)"
        " WHERE inbox.key = u.k",
        ("integer", "float8", "text"),
        "inbox",
    ),
    sql.FINISHED: (
        "UPDATE inbox SET status = 'done', attempts = coalesce(u.a, inbox.attempts),"
        " error = NULL, retry_at = NULL, updated = u.t"
        " FROM unnest(${0}::integer[], ${1}::float8[], ${2}::text[]) AS u(a, t, k)"
        " WHERE inbox.key = u.k",
        ("integer", "float8", "text"),
        "inbox",
    ),
    INSERT_OUTBOX: (
        "INSERT INTO outbox (key, event_key, platform, target, payload, status, created,"
        " updated) SELECT k, e, p, g, j, 'pending', c, t FROM unnest(${0}::text[],"
        " ${1}::text[], ${2}::text[], ${3}::text[], ${4}::text[], ${5}::float8[],"
        " ${6}::float8[]) WITH ORDINALITY AS u(k, e, p, g, j, c, t, n) ORDER BY n"
        " ON CONFLICT DO NOTHING",
        ("text", "text", "text", "text", "text", "float8", "float8"),
        None,
    ),
    sql.MESSAGE_SAVED: (
        "INSERT INTO messages (conversation, role, text, tokens, event_key, position,"
        " created, owner) SELECT c, r, x, o, e, p, t, w FROM unnest(${0}::text[],"
        " ${1}::text[], ${2}::text[], ${3}::integer[], ${4}::text[], ${5}::integer[],"
        " ${6}::float8[], ${7}::text[]) WITH ORDINALITY AS u(c, r, x, o, e, p, t, w, n)"
        " ORDER BY n ON CONFLICT DO NOTHING",
        ("text", "text", "text", "integer", "text", "integer", "float8", "text"),
        None,
    ),
    sql.OUTBOX_MARKED: (
        "UPDATE outbox SET status = u.s, attempts = coalesce(u.a, outbox.attempts),"
        " next_at = u.n, platform_id = coalesce(u.p, outbox.platform_id), error = u.e,"
        " updated = u.t FROM unnest(${0}::text[], ${1}::integer[], ${2}::float8[],"
        " ${3}::text[], ${4}::text[], ${5}::float8[], ${6}::text[])"
        " AS u(s, a, n, p, e, t, k) WHERE outbox.key = u.k",
        ("text", "integer", "float8", "text", "text", "float8", "text"),
        "outbox",
    ),
}


def as_one(statements: Sequence[Statement]) -> tuple[str, list[Any]] | None:
    """``statements`` (in the order they would run) as one statement and its parameters
    (``$n`` already numbered), or None when they cannot go as one (see the module)."""
    rows: dict[str, list[Sequence[Any]]] = {}
    for text, params in statements:
        if text not in _FORMS:
            return None
        rows.setdefault(text, []).append(params)
    if len(rows) < 2:
        return None  # one text is one executemany: already one round trip
    updated: dict[str, set[str]] = {"inbox": set(), "outbox": set()}
    for text, params_list in rows.items():
        table = _FORMS[text][2]
        if table is not None:
            keys = updated[table]
            for params in params_list:
                if params[-1] in keys:
                    return None  # a row updated twice: the CTEs would race
                keys.add(params[-1])
    inserted = {params[0] for params in rows.get(INSERT_OUTBOX, ())}
    if inserted & updated["outbox"]:
        return None
    parts: list[str] = []
    values: list[Any] = []
    for index, (text, params_list) in enumerate(rows.items()):
        form, types, _table = _FORMS[text]
        first = len(values) + 1
        parts.append(f"w{index} AS ({form.format(*range(first, first + len(types)))})")
        values += [list(column) for column in zip(*params_list, strict=True)]
    return "WITH " + ", ".join(parts) + " SELECT 1", values
