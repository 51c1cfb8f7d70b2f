"""The in-memory store's operator half: pairings, and what ``tether status``, ``tether
dead`` and the alerts read. A mixin of :class:`~tether.memory.inmemory.store.MemoryStore`, kept
apart so each module stays one screenful of concern."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from tether.memory.records import DeadLetter, InboxRow, OutboxRow, Pairing, Usage


class OpsTables:
    """Reads and operator actions over the tables :class:`MemoryStore` owns."""

    _inbox: dict[str, InboxRow]
    _touched: dict[str, float]
    _outbox: dict[str, OutboxRow]
    _usage: dict[tuple[str, str, str], Usage]
    _dead: dict[str, DeadLetter]
    _pairings: dict[tuple[str, str], Pairing]
    _sent_at: dict[str, float]
    #: Declared, not defined: ConsoleTables' (later in the store's bases) is the one.
    _move: Callable[..., None]

    def _check(self) -> None:
        raise NotImplementedError

    # -- pairing --------------------------------------------------------------------

    async def pairing(self, platform: str, user_id: str) -> Pairing | None:
        self._check()
        found = self._pairings.get((platform, user_id))
        return replace(found) if found else None

    async def request_pairing(self, platform: str, user_id: str, name: str, code: str) -> Pairing:
        self._check()
        now = time.time()
        found = self._pairings.setdefault(
            (platform, user_id), Pairing(platform, user_id, name, code, "pending", now, now)
        )
        return replace(found)

    async def approve_pairing(self, code: str) -> Pairing | None:
        self._check()
        for found in self._pairings.values():
            if found.code == code.strip().upper():
                found.status, found.updated = "approved", time.time()
                return replace(found)
        return None

    async def revoke_pairing(self, platform: str, user_id: str) -> bool:
        self._check()
        return self._pairings.pop((platform, user_id), None) is not None

    async def pairings(self) -> list[Pairing]:
        self._check()
        return [replace(p) for p in sorted(self._pairings.values(), key=lambda p: p.created)]

    # -- reporting (status, dead letters) -------------------------------------------

    async def counts(self) -> dict[str, dict[str, int]]:
        self._check()
        inbox: dict[str, int] = {}
        for row in self._inbox.values():
            inbox[row.status] = inbox.get(row.status, 0) + 1
        outbox: dict[str, int] = {}
        for out in self._outbox.values():
            outbox[out.status] = outbox.get(out.status, 0) + 1
        return {"inbox": inbox, "outbox": outbox}

    async def activity(self) -> dict[str, dict[str, float]]:
        self._check()
        out: dict[str, dict[str, float]] = {}
        for row in self._inbox.values():
            platform = row.conversation.split(":", 1)[0]
            seen = out.setdefault(platform, {})
            seen["received"] = max(seen.get("received", 0.0), self._touched[row.key])
        for sent in self._outbox.values():
            if sent.status == "sent":
                seen = out.setdefault(sent.platform, {})
                seen["sent"] = max(seen.get("sent", 0.0), self._sent_at.get(sent.key, 0.0))
        return out

    async def spend(self, since: str) -> dict[str, tuple[int, float]]:
        return self._spend(since, by_model=True)

    async def spend_by_conversation(self, since: str) -> dict[str, tuple[int, float]]:
        return self._spend(since, by_model=False)

    def _spend(self, since: str, *, by_model: bool) -> dict[str, tuple[int, float]]:
        self._check()
        out: dict[str, tuple[int, float]] = {}
        for (conv, day, model), row in sorted(self._usage.items()):
            if day >= since:
                key = model if by_model else conv
                tokens, cost = out.get(key, (0, 0.0))
                out[key] = (tokens + row.tokens, cost + row.cost)
        return out

    async def dead_letters(self) -> list[DeadLetter]:
        self._check()
        return sorted(self._dead.values(), key=lambda d: d.created)

    async def dead_letter(self, key: str) -> DeadLetter | None:
        self._check()
        return self._dead.get(key)

    async def requeue(self, key: str) -> bool:
        self._check()
        row = self._inbox.get(key)
        if row and row.status in ("dead", "retry_wait"):
            self._move(row, "received", attempts=0, retry_at=None)
            self._touched[key] = time.time()
            self._dead.pop(key, None)
            return True
        out = self._outbox.get(key)
        if out and out.status in ("dead", "unknown"):
            out.status, out.attempts, out.next_at = "pending", 0, None
            return True
        return False
