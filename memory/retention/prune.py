"""Pruning, one class of data at a time (config/retention.py), for both SQL stores.

Each statement deletes (or reduces) at most ``batch`` rows and is its own short
transaction; between two the caller's ``between`` runs (the pruner yields to the event
loop there), so traffic never waits behind a long delete. What is in flight is never
touched, and each statement says so again in its own WHERE, so a row that moved after
it was read (a dead letter retried) is left alone:

- inbox rows: only ``done`` ones, and ``dead`` ones whose dead letter is gone (``tether
  dead retry`` needs the row); never received, running, waiting or retrying ones;
- steps: only of ``done`` events (a waiting turn's steps are its progress);
- outbox rows: only ``sent`` ones (``unknown`` and ``dead`` ones are the operator's);
- turns: only those compaction marked ``summarized`` (the summary stays);
- waits and tasks (audit): only ended ones.

Reads walk the primary key from the oldest row and stop at the first row younger than
the cutoff, so a pass costs what it deletes plus the old rows it keeps, not the table.
The inbox's own rows go in order; payloads and steps leave their rows behind, so those
two remember where they got to (and the rows they had to skip, to look at again).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from tether.events import Event, Sender
from tether.memory.retention.sizes import ClassSize, SqlSizes
from tether.memory.sql.statements import FINISH, Statement

#: What the caller runs between two statements (the pruner: a yield to the loop).
Between = Callable[[], Awaitable[None]]
#: The marker of a reduced payload (``meta``), so it is reduced once.
REDUCED = "reduced"
_REDUCED_JSON = f'"{REDUCED}":true'
_REDUCE = "UPDATE inbox SET payload = ? WHERE seq = ? AND status = 'done'"
_INBOX_WALK = (
    "SELECT seq, key, status, created, updated{} FROM inbox WHERE seq > ? ORDER BY seq LIMIT ?"
)


async def _no_pause() -> None:
    return None


@runtime_checkable
class PruneStore(Protocol):
    """A store that prunes (both SQL stores; the in-memory one keeps nothing anyway)."""

    async def prune(
        self, kind: str, before: float, batch: int, between: Between = _no_pause
    ) -> int:
        """Delete (``payloads``: reduce) the rows of class ``kind`` older than ``before``
        (epoch seconds), ``batch`` at most per statement; how many."""
        ...

    async def reclaim(self) -> int:
        """Give the space of deleted rows back (SQLite: incremental vacuum); pages freed."""
        ...

    async def class_sizes(self) -> dict[str, ClassSize]:
        """Rows (and bytes where the engine says) of each class."""
        ...


def reduced_payload(payload: str) -> str | None:
    """The stored event with only what dedup, lanes and reports read (key, platform,
    kind, conversation, sender id, message id, time); None when it is reduced already
    or is not an event."""
    if _REDUCED_JSON in payload:
        return None
    try:
        event = Event.from_json(payload)
    except ValueError:
        return None
    sender = Sender(id=event.sender.id, is_bot=event.sender.is_bot) if event.sender else None
    kept = Event(
        key=event.key,
        platform=event.platform,
        kind=event.kind,
        conversation=event.conversation,
        sender=sender,
        message_id=event.message_id,
        timestamp=event.timestamp,
        meta={REDUCED: True},
    )
    return kept.to_json()


@dataclass(slots=True)
class _Walk:
    """Where a walk over the inbox got to, and the rows it skipped (not finished yet)."""

    after: int = 0
    held: set[int] = field(default_factory=set)


class _Sql(Protocol):
    def _write(self, phase: int, *statements: Statement) -> Awaitable[None]: ...

    async def _rows(self, text: str, params: Sequence[Any] = ()) -> list[Sequence[Any]]: ...


def _marks(values: Sequence[Any]) -> str:
    return ", ".join("?" for _ in values)


class SqlPruning(SqlSizes):
    """:class:`PruneStore` over ``_rows`` and ``_write`` (see the module)."""

    async def prune(
        self, kind: str, before: float, batch: int, between: Between = _no_pause
    ) -> int:
        prune: Callable[[float, int, Between], Awaitable[int]] = getattr(self, f"_prune_{kind}")
        return await prune(before, batch, between)

    async def _read(self: Any, text: str, params: Sequence[Any] = ()) -> list[Sequence[Any]]:
        """The store's read that does not queue behind traffic's writes, where it has one
        (SQLite's ``_peek``; this class awaits its own writes before it reads again)."""
        rows: list[Sequence[Any]] = await getattr(self, "_peek", self._rows)(text, params)
        return rows

    def _walk(self, name: str) -> _Walk:
        walks: dict[str, _Walk] = self.__dict__.setdefault("_retention_walks", {})
        return walks.setdefault(name, _Walk())

    # -- the inbox's own rows: dedup keys ---------------------------------------------

    async def _prune_inbox(self: Any, before: float, batch: int, between: Between) -> int:
        done, after = 0, 0
        while True:
            rows = await self._read(_INBOX_WALK.format(""), (after, batch))
            page = [row for row in rows if float(row[3]) < before]
            finished = [r for r in page if r[2] in ("done", "dead") and float(r[4]) < before]
            dead = [str(r[1]) for r in finished if r[2] == "dead"]
            lettered: set[str] = set()
            if dead:
                found = await self._read(
                    f"SELECT key FROM dead_letters WHERE key IN ({_marks(dead)})", dead
                )
                lettered = {str(row[0]) for row in found}
            gone = [r for r in finished if str(r[1]) not in lettered]
            if gone:
                # Their steps first, in the same transaction (both stores run a write's
                # statements in order), of the rows still finished (one retried since the
                # read is running again, and keeps its row and its steps).
                seqs = [int(r[0]) for r in gone]
                where = f"seq IN ({_marks(seqs)}) AND status IN ('done', 'dead') AND updated < ?"
                params, keys = (*seqs, before), f"SELECT key FROM inbox WHERE {where}"
                await self._write(
                    FINISH,
                    (f"DELETE FROM steps WHERE event_key IN ({keys})", params),
                    (f"DELETE FROM usage_calls WHERE event_key IN ({keys})", params),
                    (f"DELETE FROM inbox WHERE {where}", params),
                )
                done += len(gone)
            if page:
                after = int(page[-1][0])
            if len(page) < len(rows) or len(rows) < batch:
                return done
            await between()

    # -- what finished events leave behind: payloads and steps --------------------------

    async def _prune_payloads(self: Any, before: float, batch: int, between: Between) -> int:
        async def reduce(rows: list[Sequence[Any]]) -> int:
            updates = []
            for row in rows:
                payload = reduced_payload(str(row[5]))
                if payload is not None:
                    updates.append((_REDUCE, (payload, int(row[0]))))
            if updates:
                await self._write(FINISH, *updates)
            return len(updates)

        return int(await self._walk_inbox("payloads", ", payload", before, batch, reduce, between))

    async def _prune_steps(self: Any, before: float, batch: int, between: Between) -> int:
        async def delete(rows: list[Sequence[Any]]) -> int:
            seqs = [int(row[0]) for row in rows]
            keys = f"SELECT key FROM inbox WHERE seq IN ({_marks(seqs)}) AND status = 'done'"
            (count,) = (
                await self._read(f"SELECT count(*) FROM steps WHERE event_key IN ({keys})", seqs)
            )[0]
            if count:
                await self._write(FINISH, (f"DELETE FROM steps WHERE event_key IN ({keys})", seqs))
            return int(count)

        return int(await self._walk_inbox("steps", "", before, batch, delete, between))

    async def _walk_inbox(
        self: Any,
        name: str,
        columns: str,
        before: float,
        batch: int,
        act: Callable[[list[Sequence[Any]]], Awaitable[int]],
        between: Between,
    ) -> int:
        """Run ``act`` on the ``done`` inbox rows older than ``before`` that this walk has
        not seen: first those it skipped last time, then on from where it stopped."""
        walk: _Walk = self._walk(name)
        done: int = 0
        held, walk.held = sorted(walk.held), set()
        for start in range(0, len(held), batch):
            chunk = held[start : start + batch]
            rows = await self._read(
                f"SELECT seq, key, status, created, updated{columns} FROM inbox"
                f" WHERE seq IN ({_marks(chunk)})",
                chunk,
            )
            done += int(await self._sorted(walk, rows, before, act))
            await between()
        while True:
            rows = await self._read(_INBOX_WALK.format(columns), (walk.after, batch))
            page = [row for row in rows if float(row[3]) < before]
            done += int(await self._sorted(walk, page, before, act))
            if page:
                walk.after = int(page[-1][0])
            if len(page) < len(rows) or len(rows) < batch:
                return done
            await between()

    async def _sorted(
        self,
        walk: _Walk,
        rows: list[Sequence[Any]],
        before: float,
        act: Callable[[list[Sequence[Any]]], Awaitable[int]],
    ) -> int:
        ready = [row for row in rows if row[2] == "done" and float(row[4]) < before]
        walk.held |= {
            int(row[0]) for row in rows if not (row[2] == "done" and float(row[4]) < before)
        }
        return int(await act(ready)) if ready else 0

    # -- the rest: each its own table ------------------------------------------------

    async def _prune_outbox(self: Any, before: float, batch: int, between: Between) -> int:
        done, after = 0, 0
        while True:
            rows = await self._read(
                "SELECT seq, status, created, updated FROM outbox"
                " WHERE seq > ? ORDER BY seq LIMIT ?",
                (after, batch),
            )
            page = [row for row in rows if float(row[2]) < before]
            seqs = [int(r[0]) for r in page if r[1] == "sent" and float(r[3]) < before]
            if seqs:
                await self._write(
                    FINISH,
                    (f"DELETE FROM outbox WHERE seq IN ({_marks(seqs)}) AND status = 'sent'", seqs),
                )
                done += len(seqs)
            if page:
                after = int(page[-1][0])
            if len(page) < len(rows) or len(rows) < batch:
                return done
            await between()

    async def _prune_history(self: Any, before: float, batch: int, between: Between) -> int:
        done = 0
        conversations = await self._read(
            "SELECT conversation, summarized_upto, context_from FROM conversations"
            " WHERE summarized_upto > 0 OR context_from > 0"
        )
        for conversation, upto, context_from in conversations:
            bound = max(int(upto), int(context_from))
            while True:
                ids = [int(row[0]) for row in await self._read(
                    "SELECT id FROM messages WHERE conversation = ? AND id <= ? AND summarized = 1"
                    " AND created < ? ORDER BY id LIMIT ?",
                    (conversation, bound, before, batch),
                )]  # fmt: skip
                if ids:
                    await self._write(
                        FINISH,
                        (
                            f"DELETE FROM messages WHERE id IN ({_marks(ids)}) AND summarized = 1",
                            ids,
                        ),
                    )
                    done += len(ids)
                    await between()
                if len(ids) < batch:
                    break
        return done

    async def _prune_dead_letters(self: Any, before: float, batch: int, between: Between) -> int:
        return int(
            await self._by_key("dead_letters", "key", "created < ?", (before,), batch, between)
        )

    async def _prune_audit(self: Any, before: float, batch: int, between: Between) -> int:
        done = 0
        for table, key, where in (
            ("inbox_history", "seq", "at < ?"),
            ("waits", "id", "status <> 'open' AND resolved < ?"),
            ("tasks", "id", "created < ? AND status <> 'running' AND updated < ?"),
        ):
            params = (before, before) if table == "tasks" else (before,)
            done += await self._by_key(table, key, where, params, batch, between)
        (count,) = (await self._read("SELECT count(*) FROM erasures WHERE at < ?", (before,)))[0]
        if count:
            await self._write(FINISH, ("DELETE FROM erasures WHERE at < ?", (before,)))
        return done + int(count)

    async def _prune_blobs(self: Any, before: float, batch: int, between: Between) -> int:
        """Blobs older than ``before`` that no outbox row names (the rows are read once
        for the names: a blob is at most a few per reply, the outbox the table to read)."""
        old = [
            str(row[0])
            for row in await self._read("SELECT sha256 FROM blobs WHERE created < ?", (before,))
        ]
        if not old:
            return 0
        named: set[str] = set()
        for (payload,) in await self._read(
            "SELECT payload FROM outbox WHERE payload LIKE ?", ('%"blob":"%',)
        ):
            named |= set(_blob_names(str(payload)))
        gone = [key for key in old if key not in named]
        for start in range(0, len(gone), batch):
            chunk = gone[start : start + batch]
            await self._write(
                FINISH,
                (
                    f"DELETE FROM blobs WHERE sha256 IN ({_marks(chunk)}) AND created < ?",
                    (*chunk, before),
                ),
            )
            await between()
        return len(gone)

    async def _by_key(
        self: Any,
        table: str,
        key: str,
        where: str,
        params: Sequence[Any],
        batch: int,
        between: Between,
    ) -> int:
        done = 0
        while True:
            keys = [row[0] for row in await self._read(
                f"SELECT {key} FROM {table} WHERE {where} LIMIT ?", (*params, batch)
            )]  # fmt: skip
            if keys:
                await self._write(
                    FINISH,
                    (
                        f"DELETE FROM {table} WHERE {key} IN ({_marks(keys)}) AND {where}",
                        (*keys, *params),
                    ),
                )
                done += len(keys)
                await between()
            if len(keys) < batch:
                return done


def _blob_names(payload: str) -> list[str]:
    marker, names, at = '"blob":"', [], 0
    while (at := payload.find(marker, at)) >= 0:
        at += len(marker)
        names.append(payload[at : at + 64])
    return names
