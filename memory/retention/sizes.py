"""The store's size by class of data (``tether status``), and SQLite's space given back.

Rows come from ``count(*)``; bytes from the engine: SQLite's ``dbstat`` table (every
table's and index's pages) where the library has it, else the file's page counts alone;
PostgreSQL's ``pg_total_relation_size`` (the table with its indexes and TOAST).

SQLite gives a deleted row's pages back to the file only with ``auto_vacuum``: a store
created by this Tether has ``INCREMENTAL`` (set before its first table), and each
pruning pass ends with ``PRAGMA incremental_vacuum``, which moves free pages to the end
and truncates them off, a bounded number per transaction, past a quarter of the file
left free for the rows that come next (so steady pruning reuses pages rather than
shrinking the file and growing it again). A file from before keeps its
free pages for new rows (it stops growing, it does not shrink) until converted once,
with the gateway stopped: ``sqlite3 tether.db 'PRAGMA auto_vacuum=INCREMENTAL; VACUUM;'``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tether.memory.sql.statements import FINISH, Statement

#: Which tables hold each class (``payloads`` is the inbox's payload column).
TABLES: dict[str, tuple[str, ...]] = {
    "inbox": ("inbox",),
    "steps": ("steps", "usage_calls"),
    "outbox": ("outbox",),
    "blobs": ("blobs",),
    "history": ("messages", "messages_fts", "message_vectors"),
    "dead_letters": ("dead_letters",),
    "audit": ("inbox_history", "waits", "tasks", "erasures"),
}
#: Pages one incremental vacuum transaction frees at most (4 MB of 4 KB pages).
RECLAIM_PAGES = 1000
#: How a file made before auto_vacuum is converted, once, with the gateway stopped.
CONVERT = "sqlite3 FILE 'PRAGMA auto_vacuum=INCREMENTAL; VACUUM;'"
#: The share of the file's pages left free after a pass, for the next rows to reuse.
SLACK = 0.25
#: ``PRAGMA auto_vacuum`` of a file that gives pages back.
INCREMENTAL = 2


@dataclass(slots=True)
class ClassSize:
    rows: int
    #: Bytes on disk (tables and indexes), None where the engine cannot say.
    bytes: int | None = None


class _Sql(Protocol):
    shared: bool

    def _write(self, phase: int, *statements: Statement) -> Awaitable[None]: ...

    async def _rows(self, text: str, params: Sequence[Any] = ()) -> list[Sequence[Any]]: ...


class SqlSizes:
    async def class_sizes(self: Any) -> dict[str, ClassSize]:
        sizes: dict[str, ClassSize] = {}
        space = await _space(self)
        for kind, tables in TABLES.items():
            (rows,) = (await self._rows(f"SELECT count(*) FROM {tables[0]}"))[0]
            size = None if space is None else sum(space.get(table, 0) for table in tables)
            sizes[kind] = ClassSize(int(rows), size)
        (payload,) = (await self._rows("SELECT coalesce(sum(length(payload)), 0) FROM inbox"))[0]
        sizes["payloads"] = ClassSize(sizes["inbox"].rows, int(payload))
        return sizes

    async def vacuum_mode(self: Any) -> str:
        """``incremental``, ``none``/``full`` (SQLite's auto_vacuum), or ``autovacuum``."""
        if self.shared:
            return "autovacuum"
        (mode,) = (await self._rows("PRAGMA auto_vacuum"))[0]
        return {0: "none", 1: "full", INCREMENTAL: "incremental"}.get(int(mode), str(mode))

    async def reclaim(self: Any) -> int:
        """SQLite: free pages truncated off the file, a bounded number per transaction.
        PostgreSQL's own autovacuum reuses the space: nothing to do here."""
        if self.shared or await self.vacuum_mode() != "incremental":
            return 0
        freed = 0
        while True:
            total, free, _size = await file_pages(self)
            # A quarter of the file stays free for the rows that come next: pruning at
            # the rate traffic writes then reuses pages instead of truncating the file
            # and growing it again; a backlog pruned at once (a first pass) goes back.
            pages = min(free - int(total * SLACK), RECLAIM_PAGES)
            if pages <= 0:
                return freed
            # One page per run: Python's sqlite3 steps a statement once, and each step of
            # incremental_vacuum frees one page; so N runs of (1) in one transaction.
            await self._write(FINISH, *[("PRAGMA incremental_vacuum(1)", ())] * pages)
            freed += pages
            if pages < RECLAIM_PAGES:
                return freed


async def _space(store: Any) -> dict[str, int] | None:
    """Bytes per table (indexes counted with their table), or None."""
    tables = [table for group in TABLES.values() for table in group]
    if store.shared:
        found: dict[str, int] = {}
        for table in tables:
            rows = await store._rows("SELECT pg_total_relation_size(to_regclass(?))", (table,))
            found[table] = int(rows[0][0] or 0)
        return found
    try:
        rows = await store._rows(
            "SELECT coalesce(i.tbl_name, d.name), sum(d.pgsize) FROM dbstat AS d"
            " LEFT JOIN sqlite_schema AS i ON i.name = d.name GROUP BY 1"
        )
    except Exception:  # a library built without SQLITE_ENABLE_DBSTAT_VTAB
        return None
    found = {str(name): int(size) for name, size in rows}
    # FTS5's shadow tables (messages_fts_data, ...) count as the index they are.
    for name, size in list(found.items()):
        if name.startswith("messages_fts_"):
            found["messages_fts"] = found.get("messages_fts", 0) + size
    return {table: found.get(table, 0) for table in tables}


async def file_pages(store: Any) -> tuple[int, int, int]:
    """SQLite: the file's pages in all, free ones, and the page size."""
    (count,) = (await store._rows("PRAGMA page_count"))[0]
    (free,) = (await store._rows("PRAGMA freelist_count"))[0]
    (size,) = (await store._rows("PRAGMA page_size"))[0]
    return int(count), int(free), int(size)


async def size_report(store: Any) -> dict[str, Any] | None:
    """``tether status``'s storage: rows and bytes per class, and on SQLite the file's
    pages and its vacuum mode; None for a store that keeps nothing on disk."""
    if not isinstance(store, SqlSizes):
        return None
    sizes = await store.class_sizes()
    report: dict[str, Any] = {
        "classes": {kind: {"rows": s.rows, "bytes": s.bytes} for kind, s in sizes.items()},
        "vacuum": await store.vacuum_mode(),
    }
    if not getattr(store, "shared", False):
        count, free, page = await file_pages(store)
        report["file"] = {"pages": count, "free_pages": free, "page_size": page}
    return report


def size_lines(report: dict[str, Any]) -> list[str]:
    """The report as ``tether status`` prints it."""
    lines = []
    for kind, size in report["classes"].items():
        stored = "" if size["bytes"] is None else f"  {_bytes(size['bytes'])}"
        what = "bytes in payloads" if kind == "payloads" else "rows"
        rows = "" if kind == "payloads" else f"{size['rows']:,} {what}"
        lines.append(f"stored     {kind:<13} {rows}{stored}".rstrip())
    file = report.get("file")
    if file is not None:
        total, free = file["pages"] * file["page_size"], file["free_pages"] * file["page_size"]
        lines.append(
            f"file       {_bytes(total)}, {_bytes(free)} free; auto_vacuum {report['vacuum']}"
        )
        if report["vacuum"] != "incremental":
            lines.append(f"           (pruned pages are reused, not given back: {CONVERT})")
    return lines


def _bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"
