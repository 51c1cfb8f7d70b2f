"""The documents' index: ``memory.documents``'s files, chunked, in an FTS5 trigram table.

The files are the source of truth and live beside each instance (they are config, like
the persona), so the index is a private in-memory SQLite database each process builds
from them: nothing to migrate, nothing two instances could disagree on, the same
tokenizer and ranking as the history's index (:mod:`tether.memory.recall.sqlite`).
:meth:`DocumentIndex.refresh` reads only the files whose size or modification time
changed since the last one (a reload re-reads what changed, and drops what is gone);
it runs in a thread, so the event loop never waits on a PDF.

A hit is a :class:`~tether.memory.recall.Hit` whose conversation is ``document:NAME``
(the path as configured) and role ``document``; its id is negative, so it never
collides with a stored turn's.
"""

from __future__ import annotations

import asyncio
import glob
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path

import structlog

from tether.memory.documents.chunks import chunks
from tether.memory.documents.read import KINDS, Unreadable, read
from tether.memory.recall.query import Hit, like_pattern, rank, terms

log = structlog.get_logger("tether.memory.documents")

#: Candidates read per kind of term, for each hit wanted.
WIDEN = 5
#: Files one configuration may index (a glob that matches a whole disk is a mistake).
MOST_FILES = 10_000


@dataclass(frozen=True)
class _File:
    stamp: tuple[int, int]  # (size, mtime_ns)
    chunks: tuple[str, ...]


class DocumentIndex:
    def __init__(self, patterns: list[str]) -> None:
        self.patterns = list(patterns)
        self._files: dict[str, _File] = {}
        self._lock = threading.Lock()
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._db.execute(
            "CREATE VIRTUAL TABLE chunks USING fts5(name UNINDEXED, body, tokenize='trigram')"
        )
        self._modified: dict[str, float] = {}

    @property
    def names(self) -> list[str]:
        """The files indexed now, by their names."""
        return sorted(self._files)

    def files(self) -> list[Path]:
        """What the patterns name now: files of a kind indexed, each once, in order."""
        found: dict[str, Path] = {}
        for pattern in self.patterns:
            expanded = Path(pattern).expanduser()
            if expanded.is_dir():
                matches = [str(p) for p in sorted(expanded.rglob("*"))]
            else:
                matches = sorted(glob.glob(str(expanded), recursive=True))
            for match in matches:
                path = Path(match)
                if path.suffix.lower() in KINDS and path.is_file():
                    found.setdefault(match, path)
        return list(found.values())[:MOST_FILES]

    def refresh(self) -> dict[str, int]:
        """Index what changed; returns counts of files ``indexed``, ``kept``, ``removed``
        and ``skipped`` (unreadable, logged with the reason)."""
        counts = dict.fromkeys(("indexed", "kept", "removed", "skipped"), 0)
        with self._lock:
            seen: set[str] = set()
            for path in self.files():
                name = str(path)
                seen.add(name)
                try:
                    stat = path.stat()
                except OSError:
                    continue
                stamp = (stat.st_size, stat.st_mtime_ns)
                old = self._files.get(name)
                if old is not None and old.stamp == stamp:
                    counts["kept"] += 1
                    continue
                try:
                    pieces = tuple(chunks(read(path)))
                except Unreadable as exc:
                    log.warning("documents.unreadable", file=name, reason=str(exc))
                    counts["skipped"] += 1
                    continue
                self._put(name, _File(stamp, pieces), stat.st_mtime)
                counts["indexed"] += 1
            for name in set(self._files) - seen:
                self._drop(name)
                counts["removed"] += 1
            self._db.commit()
        log.info("documents.indexed", **counts, chunks=self.chunk_count())
        return counts

    def chunk_count(self) -> int:
        return int(self._db.execute("SELECT count(*) FROM chunks").fetchone()[0])

    def search(self, query: str, limit: int = 5) -> list[Hit]:
        """The best ``limit`` chunks for ``query``, ranked as the history's turns are."""
        wanted = terms(query)
        if not wanted or limit <= 0 or not self._files:
            return []
        rows: list[tuple[int, str, str, float]] = []
        with self._lock:
            if wanted.indexed:
                phrase = " OR ".join('"' + t.replace('"', '""') + '"' for t in wanted.indexed)
                rows += self._db.execute(
                    "SELECT rowid, name, body, -bm25(chunks) FROM chunks WHERE chunks MATCH ?"
                    " ORDER BY bm25(chunks) LIMIT ?",
                    (phrase, limit * WIDEN),
                ).fetchall()
            if wanted.short:
                likes = " OR ".join("body LIKE ? ESCAPE '\\'" for _ in wanted.short)
                rows += self._db.execute(
                    f"SELECT rowid, name, body, 0 FROM chunks WHERE {likes} LIMIT ?",
                    (*(like_pattern(t) for t in wanted.short), limit * WIDEN),
                ).fetchall()
        hits = [
            Hit(
                id=-int(rowid),
                conversation=f"document:{name}",
                role="document",
                text=body,
                created=self._modified.get(name, 0.0),
                score=float(score),
            )
            for rowid, name, body, score in rows
        ]
        return rank(hits, wanted, limit)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _put(self, name: str, file: _File, modified: float) -> None:
        self._drop(name)
        self._db.executemany(
            "INSERT INTO chunks(name, body) VALUES (?, ?)", [(name, c) for c in file.chunks]
        )
        self._files[name] = file
        self._modified[name] = modified

    def _drop(self, name: str) -> None:
        self._db.execute("DELETE FROM chunks WHERE name = ?", (name,))
        self._files.pop(name, None)
        self._modified.pop(name, None)


async def refreshed(current: DocumentIndex | None, patterns: list[str]) -> DocumentIndex | None:
    """The index for ``patterns``: ``current`` with the files that changed re-read, or,
    for a changed list, a new one built whole (a turn searching the old one finishes on
    it); None for none. In a thread: a folder of PDFs never holds the event loop."""
    if not patterns:
        return None
    if current is not None and current.patterns == patterns:
        await asyncio.to_thread(current.refresh)
        return current
    fresh = DocumentIndex(patterns)
    await asyncio.to_thread(fresh.refresh)
    return fresh
